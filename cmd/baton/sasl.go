package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// saslFlags are one cluster's SASL flags: --<side>-sasl-mechanism,
// --<side>-sasl-user and --<side>-sasl-password, the password falling back
// to $BATON_<SIDE>_SASL_PASSWORD so that it need not show in ps. No
// mechanism (the default) means no SASL.
type saslFlags struct {
	side                      string
	mechanism, user, password string
}

// stringFlags is the part of a pflag.FlagSet that add uses.
type stringFlags interface {
	StringVar(p *string, name, value, usage string)
}

// add registers the flags of side ("source" or "destination") on f.
func (s *saslFlags) add(f stringFlags, side string) {
	s.side = side
	f.StringVar(&s.mechanism, side+"-sasl-mechanism", "", "SASL mechanism for the "+side+" cluster: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: no SASL)")
	f.StringVar(&s.user, side+"-sasl-user", "", "SASL user for the "+side+" cluster")
	f.StringVar(&s.password, side+"-sasl-password", "", "SASL password for the "+side+" cluster (default $"+s.envVar()+")")
}

func (s *saslFlags) envVar() string { return "BATON_" + strings.ToUpper(s.side) + "_SASL_PASSWORD" }

// principal is the Kafka principal the flags authenticate as, User:<user>,
// or "" without SASL.
func (s *saslFlags) principal() string {
	if s.mechanism == "" || s.user == "" {
		return ""
	}
	return "User:" + s.user
}

// opts returns the franz-go options the flags ask for (none without a
// mechanism).
func (s *saslFlags) opts() ([]kgo.Opt, error) {
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
