package clients

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/baton-kafka/baton/internal/oauthbearer"
)

// Security is how a client connects to the brokers it is given (or to an
// agent): TLS and SASL, each optional. The zero value is plaintext without
// authentication. Every driver honours every field, or returns
// ErrUnsupported for a combination its client cannot do (each driver says
// which, and why).
type Security struct {
	// TLS, if set, connects with TLS.
	TLS *TLS
	// SASL, if set, authenticates every connection.
	SASL *SASL
}

// TLS is a client's TLS: the CA it trusts and, for mTLS, its own
// certificate.
type TLS struct {
	// CAFile is a PEM bundle of the CAs that sign the server's
	// certificate; required (no client here trusts the system's CAs).
	CAFile string
	// CertFile and KeyFile are the client's PEM certificate and its
	// unencrypted PKCS#8 key ("PRIVATE KEY"), presented for mTLS; both
	// or neither. PKCS#8 because the Java client reads nothing else from
	// a PEM keystore.
	CertFile, KeyFile string
}

// SASL mechanisms a Security may name.
const (
	MechPlain       = "PLAIN"
	MechScramSHA256 = "SCRAM-SHA-256"
	MechScramSHA512 = "SCRAM-SHA-512"
	MechOAuthBearer = "OAUTHBEARER"
)

// SASL is a client's SASL authentication.
type SASL struct {
	// Mechanism is MechPlain, MechScramSHA256, MechScramSHA512 or
	// MechOAuthBearer.
	Mechanism string
	// User and Password are PLAIN's and SCRAM's credentials.
	User, Password string
	// Token is OAUTHBEARER's token, sent as it is (no refresh: the test
	// makes it outlive the run). A JWT's sub and exp claims, where it has
	// them, name the principal and the lifetime to the clients that want
	// to know (librdkafka, the Java client).
	Token string
}

// check refuses a Security no client can use.
func (s Security) check() error {
	if t := s.TLS; t != nil {
		switch {
		case t.CAFile == "":
			return errors.New("clients: Security.TLS.CAFile is empty")
		case (t.CertFile == "") != (t.KeyFile == ""):
			return errors.New("clients: Security.TLS.CertFile and KeyFile go together")
		}
	}
	if a := s.SASL; a != nil {
		switch a.Mechanism {
		case MechPlain, MechScramSHA256, MechScramSHA512:
			if a.User == "" || a.Password == "" || a.Token != "" {
				return fmt.Errorf("clients: Security.SASL %s wants User and Password, no Token", a.Mechanism)
			}
		case MechOAuthBearer:
			if a.Token == "" || a.User != "" || a.Password != "" {
				return errors.New("clients: Security.SASL OAUTHBEARER wants a Token, no User or Password")
			}
		default:
			return fmt.Errorf("clients: Security.SASL.Mechanism %q: want PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", a.Mechanism)
		}
	}
	return nil
}

// Protocol is Kafka's name of the security protocol: PLAINTEXT, SSL,
// SASL_PLAINTEXT or SASL_SSL.
func (s Security) Protocol() string {
	switch {
	case s.TLS != nil && s.SASL != nil:
		return "SASL_SSL"
	case s.TLS != nil:
		return "SSL"
	case s.SASL != nil:
		return "SASL_PLAINTEXT"
	}
	return "PLAINTEXT"
}

// KgoOpts are franz-go options that connect as s says: the Franz driver's,
// and what the drivers' own metadata look-ups and tests' direct clients
// use.
func (s Security) KgoOpts() ([]kgo.Opt, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	if s.TLS != nil {
		cfg, err := s.TLS.Config()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if a := s.SASL; a != nil {
		switch a.Mechanism {
		case MechPlain:
			opts = append(opts, kgo.SASL(plain.Auth{User: a.User, Pass: a.Password}.AsMechanism()))
		case MechScramSHA256:
			opts = append(opts, kgo.SASL(scram.Auth{User: a.User, Pass: a.Password}.AsSha256Mechanism()))
		case MechScramSHA512:
			opts = append(opts, kgo.SASL(scram.Auth{User: a.User, Pass: a.Password}.AsSha512Mechanism()))
		case MechOAuthBearer:
			opts = append(opts, kgo.SASL(oauth.Auth{Token: a.Token}.AsMechanism()))
		}
	}
	return opts, nil
}

// Config is the crypto/tls client configuration of t: RootCAs from CAFile
// and, for mTLS, the client certificate. The server name is left to the
// dialer (franz-go and sarama set it to each broker's host).
func (t *TLS) Config() (*tls.Config, error) {
	pem, err := os.ReadFile(t.CAFile)
	if err != nil {
		return nil, fmt.Errorf("clients: TLS CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("clients: TLS CA file %s holds no PEM certificate", t.CAFile)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("clients: TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// tokenClaims are what a client that wants them is told of an OAUTHBEARER
// token: the principal (the JWT's sub, else "baton") and when it expires
// (its exp, else an hour from now).
func tokenClaims(token string) (principal string, expires time.Time) {
	principal = "baton"
	if sub, err := oauthbearer.Subject(token); err == nil && sub != "" {
		principal = sub
	}
	expires = oauthbearer.Expiry(token)
	if expires.IsZero() {
		expires = time.Now().Add(time.Hour)
	}
	return principal, expires
}

// securedKgo is a franz-go client of bootstrap that connects as sec says,
// for the drivers' own look-ups (kcat's partition count).
func securedKgo(_ context.Context, bootstrap string, sec Security, opts ...kgo.Opt) (*kgo.Client, error) {
	so, err := sec.KgoOpts()
	if err != nil {
		return nil, err
	}
	return kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(bootstrapList(bootstrap)...)}, so...), opts...)...)
}
