package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/baton-kafka/baton/agent"
)

// securityFlags are one cluster's TLS and SASL flags:
//
//   - --<side>-tls turns TLS on (default off); --<side>-tls-ca names a PEM
//     CA bundle to verify the brokers with (default: the system's), and
//     --<side>-tls-cert and --<side>-tls-key a client certificate (mTLS),
//     --<side>-tls-server-name the name the brokers' certificates carry
//     (default: each address's host). Naming any of them turns TLS on.
//   - --<side>-sasl-mechanism and --<side>-sasl-user, with the password
//     from --<side>-sasl-password-file (its contents, one trailing newline
//     dropped) or else $BATON_<SIDE>_SASL_PASSWORD: never from a flag, which
//     ps shows. No mechanism (the default) means no SASL.
type securityFlags struct {
	tlsFlags
	mechanism, user, passFile string
}

// tlsFlags are the TLS flags of one connection (a cluster, the control
// plane): --<side>-tls, --<side>-tls-ca, --<side>-tls-cert,
// --<side>-tls-key and --<side>-tls-server-name, as above.
type tlsFlags struct {
	side                      string
	tls                       bool
	caFile, certFile, keyFile string
	serverName                string
}

// add registers the flags on f; what names the peer in their help ("the
// source brokers").
func (s *tlsFlags) add(f stringFlags, side, what string) {
	s.side = side
	f.BoolVar(&s.tls, side+"-tls", false, "connect to "+what+" with TLS")
	f.StringVar(&s.caFile, side+"-tls-ca", "", "PEM CA bundle verifying "+what+" (default: the system's; implies TLS)")
	f.StringVar(&s.certFile, side+"-tls-cert", "", "PEM client certificate for "+what+" (with --"+side+"-tls-key; implies TLS)")
	f.StringVar(&s.serverName, side+"-tls-server-name", "", "name the certificates of "+what+" must carry (default: the host of each address dialed; implies TLS)")
	f.StringVar(&s.keyFile, side+"-tls-key", "", "PEM client key for "+what+" (with --"+side+"-tls-cert)")
}

// stringFlags is the part of a pflag.FlagSet that add uses.
type stringFlags interface {
	StringVar(p *string, name, value, usage string)
	BoolVar(p *bool, name string, value bool, usage string)
}

// add registers the flags of side ("source" or "destination") on f.
func (s *securityFlags) add(f stringFlags, side string) {
	s.side = side
	f.StringVar(&s.mechanism, side+"-sasl-mechanism", "", "SASL mechanism for the "+side+" cluster: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: no SASL)")
	f.StringVar(&s.user, side+"-sasl-user", "", "SASL user for the "+side+" cluster")
	f.StringVar(&s.passFile, side+"-sasl-password-file", "", "file holding the SASL password for the "+side+" cluster (default: $"+s.envVar()+")")
	s.tlsFlags.add(f, side, "the "+side+" brokers")
}

func (s *securityFlags) envVar() string { return "BATON_" + strings.ToUpper(s.side) + "_SASL_PASSWORD" }

// principal is the Kafka principal the flags authenticate as, User:<user>,
// or "" without SASL.
func (s *securityFlags) principal() string {
	if s.mechanism == "" || s.user == "" {
		return ""
	}
	return "User:" + s.user
}

// opts returns the franz-go options the flags ask for (none by default).
func (s *securityFlags) opts() ([]kgo.Opt, error) {
	sec, err := s.agentSecurity()
	if err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	if sec.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(sec.TLS))
	}
	if sec.SASL != nil {
		opts = append(opts, kgo.SASL(sec.SASL))
	}
	return opts, nil
}

// agentSecurity returns what the flags ask for as the agent takes it (the
// zero value by default: plaintext).
func (s *securityFlags) agentSecurity() (agent.Security, error) {
	cfg, err := s.tlsConfig()
	if err != nil {
		return agent.Security{}, err
	}
	mech, err := s.saslMechanism()
	if err != nil {
		return agent.Security{}, err
	}
	return agent.Security{TLS: cfg, SASL: mech}, nil
}

// tlsConfig returns the TLS config, or nil if TLS is not asked for.
func (s *tlsFlags) tlsConfig() (*tls.Config, error) {
	if !s.tls && s.caFile == "" && s.certFile == "" && s.keyFile == "" && s.serverName == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.serverName}
	if s.caFile != "" {
		pool, err := readCAFile("--"+s.side+"-tls-ca", s.caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if (s.certFile == "") != (s.keyFile == "") {
		return nil, fmt.Errorf("--%s-tls-cert and --%s-tls-key go together", s.side, s.side)
	}
	if s.certFile != "" {
		cert, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
		if err != nil {
			return nil, fmt.Errorf("--%s-tls-cert/--%s-tls-key: %w", s.side, s.side, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// password reads the SASL password: the file's contents, else the
// environment variable.
func (s *securityFlags) password() (string, error) {
	if s.passFile == "" {
		return os.Getenv(s.envVar()), nil
	}
	b, err := os.ReadFile(s.passFile)
	if err != nil {
		return "", fmt.Errorf("--%s-sasl-password-file: %w", s.side, err)
	}
	return strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"), nil
}

// saslMechanism returns the SASL mechanism (nil without one).
func (s *securityFlags) saslMechanism() (sasl.Mechanism, error) {
	if s.mechanism == "" {
		if s.user != "" || s.passFile != "" {
			return nil, fmt.Errorf("--%s-sasl-user and --%s-sasl-password-file need --%s-sasl-mechanism", s.side, s.side, s.side)
		}
		return nil, nil
	}
	if s.user == "" {
		return nil, fmt.Errorf("--%s-sasl-mechanism %s needs --%s-sasl-user", s.side, s.mechanism, s.side)
	}
	pass, err := s.password()
	if err != nil {
		return nil, err
	}
	if pass == "" {
		// Caught here, not as an authentication failure on every broker.
		return nil, fmt.Errorf("--%s-sasl-mechanism %s needs a password: --%s-sasl-password-file or $%s", s.side, s.mechanism, s.side, s.envVar())
	}
	switch strings.ToUpper(s.mechanism) {
	case "PLAIN":
		return plain.Auth{User: s.user, Pass: pass}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: s.user, Pass: pass}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: s.user, Pass: pass}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("--%s-sasl-mechanism: %q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.side, s.mechanism)
}

// readCAFile reads a PEM CA bundle named by flag.
func readCAFile(flag, file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate in %s", flag, file)
	}
	return pool, nil
}
