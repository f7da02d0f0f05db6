package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"

	"github.com/baton-kafka/baton/controlplane/httpapi"
)

// The HTTP API over TLS (docs/controlplane.md, "API callers"): the control
// plane's --http-tls-cert, --http-tls-key, --http-client-ca and
// --api-identities, and the operator commands' --ca-file, --cert-file and
// --key-file.

// httpSecurity returns the HTTP API's TLS config (nil: plain HTTP) and,
// with --http-client-ca, the API identity rules. A client certificate is
// verified when sent but not required at the handshake: a caller with a
// bearer token needs none, and one with neither gets the API's 401 saying
// what it takes instead of a failed handshake that says nothing.
func httpSecurity(certFile, keyFile, clientCA, identities string) (*tls.Config, []httpapi.Identity, error) {
	cfg, err := serverTLS("http", "api-identities", certFile, keyFile, clientCA, identities, tls.VerifyClientCertIfGiven)
	if err != nil || clientCA == "" {
		return cfg, nil, err
	}
	if identities == "" {
		return nil, nil, errors.New("--http-client-ca needs --api-identities: a client certificate names a caller only through a rule that gives its identity a name and a role")
	}
	ids, err := httpapi.LoadIdentities(identities)
	if err != nil {
		return nil, nil, fmt.Errorf("--api-identities: %w", err)
	}
	return cfg, ids, nil
}

// httpGuard refuses to serve, on an address reachable from the network,
// an API that takes no credentials (anyone who reaches it could migrate or
// abort any topic) unless insecure (--api-insecure), and warns once when
// bearer tokens would cross the network in the clear. It warns instead of
// refusing because a TLS proxy in front of the API is a sound setup the
// control plane cannot see.
func httpGuard(log *slog.Logger, addr string, tokens, identities, tlsOn, insecure bool) error {
	if loopback(addr) {
		return nil
	}
	if !tokens && !identities && !insecure {
		return fmt.Errorf("--http %s is reachable from the network and the API takes no credentials: anyone who reaches it could migrate or abort any topic; set --api-tokens-file, or --http-client-ca with --api-identities (docs/controlplane.md, API callers), or --api-insecure to accept that", addr)
	}
	if tokens && !tlsOn {
		log.Warn("the HTTP API takes bearer tokens over plain HTTP on an address reachable from the network: every request's token travels in the clear; serve HTTPS with --http-tls-cert and --http-tls-key, or reach the API only through a TLS proxy", "http", addr)
	}
	return nil
}

// Environment variables the operator commands read when the flag is not
// given (as apiTokenEnv for --token-file), so that an operator's shell can
// hold them once.
const (
	// apiCAEnv names the CA bundle verifying the control plane (--ca-file).
	apiCAEnv = "BATON_API_CA_FILE"
	// apiCertEnv and apiKeyEnv name the client certificate and its key
	// (--cert-file, --key-file).
	apiCertEnv = "BATON_API_CERT_FILE"
	apiKeyEnv  = "BATON_API_KEY_FILE"
)

// namedFile is a file and where it was named ("--ca-file",
// "$BATON_API_CA_FILE"), for errors.
type namedFile struct{ name, file string }

// fromFlagOrEnv is the file the flag names, else the one the environment
// variable names, else none (named after the flag).
func fromFlagOrEnv(flag, value, env string) (f namedFile, byFlag bool) {
	if value != "" {
		return namedFile{"--" + flag, value}, true
	}
	if v := os.Getenv(env); v != "" {
		return namedFile{"$" + env, v}, false
	}
	return namedFile{name: "--" + flag}, false
}

// apiHTTPClient returns the HTTP client of an operator command: for an
// https:// server, one verifying the control plane with the CA bundle in
// ca (default: the system's roots) and presenting the certificate in cert
// and key, if named. An http:// server gets the default client: a file
// named by a flag is then an error (the flag would do nothing), one named
// by an environment variable is left unused (the variables serve every
// command of a shell, some against a loopback http:// API).
func apiHTTPClient(server string, ca, cert, key namedFile, byFlag bool) (*http.Client, error) {
	u, err := url.Parse(server)
	if err != nil {
		return nil, fmt.Errorf("--server: %w", err)
	}
	if u.Scheme != "https" {
		if byFlag {
			return nil, fmt.Errorf("--ca-file, --cert-file and --key-file are for an https:// --server, not %s", server)
		}
		return nil, nil
	}
	cfg, err := clientTLS(ca, cert, key)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	// HTTP/1.1 only: a command sends a request or two, and HTTP/2 reports
	// a connection the control plane closed at its first read (its
	// refusal of a client certificate, with TLS 1.3) as "could not be
	// established", losing the alert that says why.
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP1(true)
	return &http.Client{Transport: hintTransport{tr, ca, cert}}, nil
}

// hintTransport adds to a failed TLS handshake with the control plane what
// would fix it, naming the flag.
type hintTransport struct {
	rt       http.RoundTripper
	ca, cert namedFile
}

func (h hintTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := h.rt.RoundTrip(r)
	if err != nil {
		err = h.hint(err)
	}
	return resp, err
}

// hint returns err with its fix, or err itself: http.Client reads some
// transport errors by type (tls.RecordHeaderError), so only those hinted
// at are wrapped.
func (h hintTransport) hint(err error) error {
	var unknownCA x509.UnknownAuthorityError
	var noRoots x509.SystemRootsError
	var host x509.HostnameError
	var op *net.OpError
	switch {
	case errors.As(err, &unknownCA), errors.As(err, &noRoots):
		trusted := "the system's roots"
		if h.ca.file != "" {
			trusted = h.ca.name + " (" + h.ca.file + ")"
		}
		return fmt.Errorf("%w: the control plane's certificate is not signed by a CA in %s: pass the CA that signed it with --ca-file or $%s", err, trusted, apiCAEnv)
	case errors.As(err, &host):
		return fmt.Errorf("%w: --server must name a host the control plane's certificate carries", err)
	case errors.As(err, &op) && op.Op == "remote error" && h.cert.file != "":
		// The control plane verifies a client certificate when one is
		// sent; an alert after sending one is its refusal.
		return fmt.Errorf("%w: the control plane refused the client certificate (%s %s): it must chain to the control plane's --http-client-ca and be valid now", err, h.cert.name, h.cert.file)
	}
	return err
}
