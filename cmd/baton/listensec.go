package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/filter/sasl"
)

// listenFlags are how producers connect to the agent:
//
//   - --listen-tls-cert and --listen-tls-key serve the listener with TLS;
//     --listen-client-ca then requires client certificates that CA
//     signed (mTLS).
//   - --client-sasl none (default), forward or local; --client-sasl-mechanisms
//     narrows the mechanisms offered; --client-sasl-scram-credentials names
//     the users local mode accepts (`baton agent scram-credential` writes
//     entries); --client-sasl-max-session bounds a session (clients
//     re-authenticate before it ends); --client-sasl-max-principals bounds
//     forward mode's principals.
type listenFlags struct {
	certFile, keyFile, clientCA string
	mode, mechanisms, scramFile string
	maxSession                  time.Duration
	maxPrincipals               int
}

func (l *listenFlags) add(f stringFlags, more interface {
	DurationVar(p *time.Duration, name string, value time.Duration, usage string)
	IntVar(p *int, name string, value int, usage string)
}) {
	f.StringVar(&l.certFile, "listen-tls-cert", "", "PEM certificate the listener serves TLS with (with --listen-tls-key)")
	f.StringVar(&l.keyFile, "listen-tls-key", "", "PEM key of --listen-tls-cert")
	f.StringVar(&l.clientCA, "listen-client-ca", "", "PEM CA bundle: clients must present a certificate it signed (mTLS; needs --listen-tls-cert)")
	f.StringVar(&l.mode, "client-sasl", "none", "how clients authenticate with SASL: none, forward (PLAIN or OAUTHBEARER, the client's own credentials used on both clusters) or local (SCRAM against --client-sasl-scram-credentials, the agent's own identity upstream)")
	f.StringVar(&l.mechanisms, "client-sasl-mechanisms", "", "mechanisms offered, comma-separated (default: PLAIN,OAUTHBEARER for forward; the SCRAM mechanisms with users for local)")
	f.StringVar(&l.scramFile, "client-sasl-scram-credentials", "", "YAML list of the SCRAM users --client-sasl local accepts (see baton agent scram-credential)")
	more.DurationVar(&l.maxSession, "client-sasl-max-session", 0, "longest SASL session before a client must authenticate again (0: until its token expires)")
	more.IntVar(&l.maxPrincipals, "client-sasl-max-principals", agent.DefaultMaxPrincipals, "client principals with upstream connections of their own at once (--client-sasl forward)")
}

// clientSecurity returns what the flags ask for, for a listener on listen;
// errors name the flag.
func (l *listenFlags) clientSecurity(listen string) (agent.ClientSecurity, error) {
	cs := agent.ClientSecurity{SASL: agent.SASLMode(l.mode), MaxSession: l.maxSession, MaxPrincipals: l.maxPrincipals}
	switch {
	case l.scramFile != "" && l.mode != string(agent.SASLLocal):
		return cs, fmt.Errorf("--client-sasl-scram-credentials is for --client-sasl local, not %s", l.mode)
	case l.mode == string(agent.SASLLocal) && l.scramFile == "":
		return cs, errors.New("--client-sasl local needs --client-sasl-scram-credentials: the users it accepts")
	case l.mode == string(agent.SASLForward) && l.certFile == "" && !loopback(listen):
		// Forwarded passwords and tokens must not cross the network in
		// the clear; a sidecar's loopback listener does not.
		return cs, fmt.Errorf("--client-sasl forward on --listen %s needs --listen-tls-cert: clients send their passwords or tokens, which must not cross the network in the clear", listen)
	}
	var err error
	if cs.TLS, err = serverTLS("listen", "", l.certFile, l.keyFile, l.clientCA, "", tls.RequireAndVerifyClientCert); err != nil {
		return cs, err
	}
	for _, m := range strings.Split(l.mechanisms, ",") {
		if m = strings.TrimSpace(strings.ToUpper(m)); m != "" {
			cs.Mechanisms = append(cs.Mechanisms, m)
		}
	}
	if l.scramFile != "" {
		creds, err := sasl.LoadSCRAMCredentials(l.scramFile)
		if err != nil {
			return cs, fmt.Errorf("--client-sasl-scram-credentials: %w", err)
		}
		cs.SCRAM = creds
	}
	return cs, nil
}

// newSCRAMCredentialCmd writes a SCRAM users file entry for a password
// read from stdin: what the agent stores, never the password.
func newSCRAMCredentialCmd() *cobra.Command {
	var user, mechanism string
	var iterations int
	cmd := &cobra.Command{
		Use:   "scram-credential",
		Short: "Print a --client-sasl-scram-credentials entry for a password read from stdin",
		Long: `Print a --client-sasl-scram-credentials entry (YAML) for --user, with the
password read from the first line of stdin. The entry holds a random salt and
the keys derived from the password, as a broker stores them, not the password:

  printf %s "$PASSWORD" | baton agent scram-credential --user app >> users.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if user == "" {
				return errors.New("--user is required")
			}
			line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
			if err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("reading the password from stdin: %w", err)
			}
			pass := strings.TrimRight(line, "\r\n")
			if pass == "" {
				return errors.New("no password on stdin")
			}
			var out []sasl.SCRAMCredential
			for _, m := range strings.Split(mechanism, ",") {
				c, err := sasl.NewSCRAMCredential(strings.TrimSpace(m), user, pass, iterations)
				if err != nil {
					return fmt.Errorf("--mechanism: %w", err)
				}
				out = append(out, c)
			}
			b, err := yaml.Marshal(out)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&user, "user", "", "the SCRAM user (required)")
	f.StringVar(&mechanism, "mechanism", sasl.ScramSHA256+","+sasl.ScramSHA512, "SCRAM-SHA-256, SCRAM-SHA-512, or both comma-separated")
	f.IntVar(&iterations, "iterations", 8192, "PBKDF2 iterations (Kafka's minimum is 4096)")
	return cmd
}
