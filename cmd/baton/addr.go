package main

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// addrKind is what an address flag holds; the root command checks every
// such flag before any command runs, so that "--source 127.0.0.1" is
// refused naming the flag instead of silently meaning port 9092.
type addrKind string

const (
	// addrDial is host:port, comma-separated lists allowed (bootstrap
	// brokers): host and port both required.
	addrDial addrKind = "dial"
	// addrListen is one [host]:port to listen on; port 0 picks one.
	addrListen addrKind = "listen"
	// addrEtcd is a list of etcd endpoints, host:port with an optional
	// http:// or https:// scheme.
	addrEtcd addrKind = "etcd"
	// addrURL is one http or https URL with a host.
	addrURL addrKind = "url"
)

const addrAnnotation = "baton-address"

// markAddrs tags flags of f as addresses of kind.
func markAddrs(f *pflag.FlagSet, kind addrKind, names ...string) {
	for _, n := range names {
		if err := f.SetAnnotation(n, addrAnnotation, []string{string(kind)}); err != nil {
			panic(err) // a flag name typo in this binary
		}
	}
}

// checkAddrFlags validates every address flag of cmd that is set or has a
// default.
func checkAddrFlags(cmd *cobra.Command) error {
	var first error
	cmd.Flags().VisitAll(func(fl *pflag.Flag) {
		kinds := fl.Annotations[addrAnnotation]
		if first != nil || len(kinds) == 0 || fl.Value.String() == "" {
			return
		}
		if err := checkAddr(addrKind(kinds[0]), fl.Value.String()); err != nil {
			first = fmt.Errorf("--%s %q: %w", fl.Name, fl.Value.String(), err)
		}
	})
	return first
}

func checkAddr(kind addrKind, v string) error {
	switch kind {
	case addrURL:
		u, err := url.Parse(v)
		if err != nil {
			return err
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("want an http:// or https:// URL with a host")
		}
		return nil
	case addrListen:
		return checkHostPort(v, false)
	}
	parts := splitList(v)
	if len(parts) == 0 {
		return fmt.Errorf("no address in the list")
	}
	for _, p := range parts {
		if kind == addrEtcd {
			p = strings.TrimPrefix(strings.TrimPrefix(p, "http://"), "https://")
		}
		if err := checkHostPort(p, true); err != nil {
			return err
		}
	}
	return nil
}

// checkHostPort wants host:port with a numeric port; needHost also wants
// a host and a port above 0 (an address to dial).
func checkHostPort(v string, needHost bool) error {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return fmt.Errorf("want host:port: %v", err)
	}
	n, err := strconv.Atoi(port)
	switch {
	case err != nil || n < 0 || n > 65535:
		return fmt.Errorf("%s: port %q is not a number from 0 to 65535", v, port)
	case needHost && host == "":
		return fmt.Errorf("%s: a host is required", v)
	case needHost && n == 0:
		return fmt.Errorf("%s: port 0 cannot be dialed", v)
	}
	return nil
}
