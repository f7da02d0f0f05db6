package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// securityFlags are one cluster's TLS and SASL flags:
//
//   - --<side>-tls turns TLS on (default off); --<side>-tls-ca names a PEM
//     CA bundle to verify the brokers with (default: the system's), and
//     --<side>-tls-cert and --<side>-tls-key a client certificate (mTLS).
//     Naming any file turns TLS on.
//   - --<side>-sasl-mechanism, --<side>-sasl-user and --<side>-sasl-password,
//     the password falling back to $BATON_<SIDE>_SASL_PASSWORD so that it
//     need not show in ps. No mechanism (the default) means no SASL.
type securityFlags struct {
	side                      string
	mechanism, user, password string
	tls                       bool
	caFile, certFile, keyFile string
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
	f.StringVar(&s.password, side+"-sasl-password", "", "SASL password for the "+side+" cluster (default $"+s.envVar()+")")
	f.BoolVar(&s.tls, side+"-tls", false, "connect to the "+side+" cluster with TLS")
	f.StringVar(&s.caFile, side+"-tls-ca", "", "PEM CA bundle verifying the "+side+" brokers (default: the system's; implies TLS)")
	f.StringVar(&s.certFile, side+"-tls-cert", "", "PEM client certificate for the "+side+" cluster (with --"+side+"-tls-key; implies TLS)")
	f.StringVar(&s.keyFile, side+"-tls-key", "", "PEM client key for the "+side+" cluster (with --"+side+"-tls-cert)")
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
	tlsOpts, err := s.tlsOpts()
	if err != nil {
		return nil, err
	}
	saslOpts, err := s.saslOpts()
	if err != nil {
		return nil, err
	}
	return append(tlsOpts, saslOpts...), nil
}

// tlsOpts returns the TLS dial option, if TLS is asked for.
func (s *securityFlags) tlsOpts() ([]kgo.Opt, error) {
	if !s.tls && s.caFile == "" && s.certFile == "" && s.keyFile == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if s.caFile != "" {
		pem, err := os.ReadFile(s.caFile)
		if err != nil {
			return nil, fmt.Errorf("--%s-tls-ca: %w", s.side, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--%s-tls-ca: no PEM certificate in %s", s.side, s.caFile)
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
	return []kgo.Opt{kgo.DialTLSConfig(cfg)}, nil
}

// saslOpts returns the SASL option (none without a mechanism).
func (s *securityFlags) saslOpts() ([]kgo.Opt, error) {
	if s.mechanism == "" {
		if s.user != "" || s.password != "" {
			return nil, fmt.Errorf("--%s-sasl-user and --%s-sasl-password need --%s-sasl-mechanism", s.side, s.side, s.side)
		}
		return nil, nil
	}
	pass := s.password
	if pass == "" {
		pass = os.Getenv(s.envVar())
	}
	if s.user == "" {
		return nil, fmt.Errorf("--%s-sasl-mechanism %s needs --%s-sasl-user", s.side, s.mechanism, s.side)
	}
	if pass == "" {
		// Caught here, not as an authentication failure on every broker.
		return nil, fmt.Errorf("--%s-sasl-mechanism %s needs a password: --%s-sasl-password or $%s", s.side, s.mechanism, s.side, s.envVar())
	}
	switch strings.ToUpper(s.mechanism) {
	case "PLAIN":
		return []kgo.Opt{kgo.SASL(plain.Auth{User: s.user, Pass: pass}.AsMechanism())}, nil
	case "SCRAM-SHA-256":
		return []kgo.Opt{kgo.SASL(scram.Auth{User: s.user, Pass: pass}.AsSha256Mechanism())}, nil
	case "SCRAM-SHA-512":
		return []kgo.Opt{kgo.SASL(scram.Auth{User: s.user, Pass: pass}.AsSha512Mechanism())}, nil
	}
	return nil, fmt.Errorf("--%s-sasl-mechanism: %q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.side, s.mechanism)
}
