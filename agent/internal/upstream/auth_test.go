package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/baton-kafka/baton/internal/testcert"
)

// TestSecurity dials kfake brokers that require TLS, SASL or both, and asks
// them for metadata through a Cluster configured to match (or not).
func TestSecurity(t *testing.T) {
	t.Parallel()
	ca := testcert.New(t)
	serverTLS := &tls.Config{Certificates: []tls.Certificate{ca.Server}, MinVersion: tls.VersionTLS12}
	clientTLS := &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}
	untrusted := &tls.Config{RootCAs: testcert.New(t).Pool, MinVersion: tls.VersionTLS12}
	scram256 := scram.Auth{User: "agent", Pass: "s3cret"}.AsSha256Mechanism()
	cases := []struct {
		name    string
		broker  []kfake.Opt
		sec     Security
		wantErr error // nil: metadata answered
	}{
		{"plaintext", nil, Security{}, nil},
		{"TLS", []kfake.Opt{kfake.TLS(serverTLS)}, Security{TLS: clientTLS}, nil},
		{"TLS with a CA that did not sign the broker's certificate", []kfake.Opt{kfake.TLS(serverTLS)}, Security{TLS: untrusted}, ErrTLS},
		{"PLAIN", saslBroker("PLAIN"), Security{SASL: plain.Auth{User: "agent", Pass: "s3cret"}.AsMechanism()}, nil},
		{"SCRAM-SHA-256", saslBroker("SCRAM-SHA-256"), Security{SASL: scram256}, nil},
		{"SCRAM-SHA-512", saslBroker("SCRAM-SHA-512"), Security{SASL: scram.Auth{User: "agent", Pass: "s3cret"}.AsSha512Mechanism()}, nil},
		{"SCRAM-SHA-256 over TLS", append(saslBroker("SCRAM-SHA-256"), kfake.TLS(serverTLS)), Security{TLS: clientTLS, SASL: scram256}, nil},
		// kfake closes the connection on a wrong password, where Kafka
		// answers SASL_AUTHENTICATION_FAILED (TestRefusedAuthIsErrAuth):
		// not authenticated either way, and not called a refusal.
		{"a wrong password", saslBroker("SCRAM-SHA-256"), Security{SASL: scram.Auth{User: "agent", Pass: "wrong"}.AsSha256Mechanism()}, ErrConnClosed},
		{"a mechanism the user has no credentials for", saslBroker("PLAIN"), Security{SASL: scram256}, ErrConnClosed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			kc, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, c.broker...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer kc.Close()
			u := New(Config{Name: "source", Bootstrap: kc.ListenAddrs(), PoolSize: 1,
				DialTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, Security: c.sec})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			md, err := u.Metadata(ctx, nil, false)
			switch {
			case c.wantErr == nil && err != nil:
				t.Fatalf("metadata: %v", err)
			case c.wantErr == nil && len(md.Brokers) != 1:
				t.Fatalf("metadata lists %d brokers, want 1", len(md.Brokers))
			case c.wantErr != nil && !errors.Is(err, c.wantErr):
				t.Fatalf("metadata: %v, want an error wrapping %v", err, c.wantErr)
			}
		})
	}
}

// TestRefusedAuthIsErrAuth: a broker that answers SaslAuthenticate with
// SASL_AUTHENTICATION_FAILED, as Kafka does for a wrong password, gives an
// error wrapping ErrAuth, and the WARN names the credentials.
func TestRefusedAuthIsErrAuth(t *testing.T) {
	t.Parallel()
	b, u := saslPool(t, 0, 5*time.Second)
	b.RejectAuth.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := u.Metadata(ctx, nil, false)
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("metadata: %v, want an error wrapping ErrAuth", err)
	}
	if msg := checkFor(err); !strings.Contains(msg, "refused the agent's SASL") {
		t.Errorf("checkFor = %q, want it to name the credentials", msg)
	}
}

// saslBroker is a kfake broker that requires SASL, with user agent /
// s3cret for mechanism alone.
func saslBroker(mechanism string) []kfake.Opt {
	return []kfake.Opt{kfake.EnableSASL(), kfake.Superuser(mechanism, "agent", "s3cret")}
}

// TestSessionLifetimeReplacesTheConnection: a broker that ends SASL
// sessions (connections.max.reauth.ms) gets a fresh authenticated pooled
// connection before the end, and the old one closes once it has answered
// what was on it.
func TestSessionLifetimeReplacesTheConnection(t *testing.T) {
	t.Parallel()
	kc, err := kfake.NewCluster(append(saslBroker("SCRAM-SHA-256"), kfake.NumBrokers(1),
		kfake.BrokerConfigs(map[string]string{"connections.max.reauth.ms": "1000"}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	var mech sasl.Mechanism = scram.Auth{User: "agent", Pass: "s3cret"}.AsSha256Mechanism()
	u := New(Config{Name: "source", Bootstrap: kc.ListenAddrs(), PoolSize: 1,
		DialTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, Security: Security{SASL: mech}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := kc.ListenAddrs()[0]
	first, err := u.conn(ctx, addr, 0)
	if err != nil {
		t.Fatal(err)
	}
	if first.authExpires.IsZero() {
		t.Fatal("the broker's session lifetime was not read from SaslAuthenticate")
	}
	// Until the retire time the pool hands out the same connection; past
	// it, a new one.
	for !first.Expiring(time.Now()) {
		if c, err := u.conn(ctx, addr, 0); err != nil || c != first {
			t.Fatalf("before its retire time the pool gave %p (%v), want the first %p", c, err, first)
		}
		time.Sleep(50 * time.Millisecond)
	}
	second, err := u.conn(ctx, addr, 0)
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatal("past its retire time the pool still gives the first connection")
	}
	select {
	case <-first.dead:
	case <-ctx.Done():
		t.Fatal("the replaced connection, with nothing on it, never closed")
	}
	if !errors.Is(first.deathErr(), ErrConnClosed) || second.Dead() {
		t.Fatalf("first: %v; second dead: %v", first.deathErr(), second.Dead())
	}
	if _, err := u.Metadata(ctx, nil, false); err != nil {
		t.Fatalf("metadata on the new connection: %v", err)
	}
}

// TestCheckForNamesTheCause: the WARN said when a cluster is unreachable
// names what to check for the error that made it so.
func TestCheckForNamesTheCause(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: dialing: %w", ErrNotSent, fmt.Errorf("%w with PLAIN at b:9092", ErrAuth)), "SASL authentication"},
		{fmt.Errorf("%w: b:9093: x509: unknown authority", ErrTLS), "TLS handshake"},
		{errors.New("connection refused"), "brokers are up"},
	}
	for _, c := range cases {
		if got := checkFor(c.err); !strings.Contains(got, c.want) {
			t.Errorf("checkFor(%v) = %q, want it to mention %q", c.err, got, c.want)
		}
	}
}
