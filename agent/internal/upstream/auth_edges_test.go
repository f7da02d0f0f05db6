package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/baton-kafka/baton/internal/saslfake"
	"github.com/baton-kafka/baton/internal/testcert"
)

// apiVersions0 sends ApiVersions v0 (empty body) on c and waits.
func apiVersions0(ctx context.Context, c *Conn) error {
	cl, err := c.Send(18, 0, nil, nil, true)
	if err != nil {
		return err
	}
	_, err = cl.Wait(ctx)
	return err
}

// TestSASLFinalMessageIsWritten: sasl.Session.Challenge may return done
// together with "an additional last message to be written"; it is written
// as one more SaslAuthenticate (as franz-go does), else the broker never
// completes authentication and closes the connection at the first request.
func TestSASLFinalMessageIsWritten(t *testing.T) {
	b, err := saslfake.New([]string{"first", "final"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m := &saslfake.Mechanism{Steps: []string{"first", "final"}, FinalDone: true}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := dial(ctx, b.Addr, time.Second, 5*time.Second, Security{SASL: m})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(nil)
	if err := apiVersions0(ctx, c); err != nil {
		t.Fatalf("first request after SASL: %v (broker saw auth messages %q, unauthed closes %d)", err, b.SeenAuth(), b.Unauthed.Load())
	}
}

// TestSASLAuthenticateGetsHostPort: sasl.Mechanism.Authenticate gets
// "host:port", as its contract says and franz-go passes; franz-go's
// AWS_MSK_IAM mechanism fails on a bare host.
func TestSASLAuthenticateGetsHostPort(t *testing.T) {
	b, err := saslfake.New([]string{"x"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m := &saslfake.Mechanism{Steps: []string{"x"}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := dial(ctx, b.Addr, time.Second, 5*time.Second, Security{SASL: m})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(nil)
	got := *m.Host.Load()
	// What that does to a real mechanism given the same kind of argument:
	msk := aws.Auth{AccessKey: "a", SecretKey: "b"}.AsManagedStreamingIAMMechanism()
	host := "b-1.demo.abc123.c2.kafka.us-east-1.amazonaws.com"
	_, _, mskErr := msk.Authenticate(ctx, host) // what authenticate would pass for host:9098
	if got != b.Addr {
		t.Fatalf("Authenticate got host %q, want host:port %q; AWS_MSK_IAM given %q fails: %v", got, b.Addr, host, mskErr)
	}
}

// TestPoolNeverHandsOutAConnPastSessionEnd: when the replacement cannot be
// dialed, the old connection is handed out only until its session ends;
// after that the request is not sent (Kafka would close the connection at
// it, leaving it in doubt).
func TestPoolNeverHandsOutAConnPastSessionEnd(t *testing.T) {
	const life = 400 * time.Millisecond
	b, u := saslPool(t, life, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	first, err := u.conn(ctx, b.Addr, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.RejectAuth.Store(true) // new connections fail to authenticate
	waitPast(first.authExpires)
	cl, err := u.Send(ctx, b.Addr, 0, 18, 0, nil, nil, true)
	if err != nil {
		if !errors.Is(err, ErrNotSent) {
			t.Fatalf("send: %v, want ErrNotSent", err)
		}
		return // right: not written on a connection whose session ended
	}
	if cl.Conn() == first {
		_, werr := cl.Wait(ctx)
		t.Fatalf("the pool handed out the connection whose SASL session ended %v ago; the request was written and then: %v (broker expired closes: %d)",
			time.Since(first.authExpires).Round(time.Millisecond), werr, b.Expired.Load())
	}
}

// TestPinnedSendGoesOnARetiringConn: a request pinned to a pooled
// connection (a partition with produces outstanding on it) still goes on it
// after the pool replaced it for its SASL lifetime, while it is alive and
// its session not over: refusing it would answer the client a retriable
// error at every rotation under load.
func TestPinnedSendGoesOnARetiringConn(t *testing.T) {
	b, u := saslPool(t, time.Second, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	first, err := u.conn(ctx, b.Addr, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.Hold.Store(true)
	outstanding, err := first.Send(18, 0, nil, nil, true) // the partition's outstanding produce
	if err != nil {
		t.Fatal(err)
	}
	waitPast(first.retireAt)
	if second, err := u.conn(ctx, b.Addr, 0); err != nil || second == first { // another client's request rotates the slot
		t.Fatalf("rotation: %v", err)
	}
	_, err = u.SendvOn(ctx, b.Addr, 0, first, 18, 0, nil, [][]byte{nil}, true)
	b.Hold.Store(false)
	if _, werr := outstanding.Wait(ctx); werr != nil {
		t.Fatalf("outstanding: %v", werr)
	}
	if err != nil {
		t.Fatalf("pinned send on the live retiring connection (session ends in %v): %v", time.Until(first.authExpires).Round(time.Millisecond), err)
	}
}

// TestTLSMissingIsNotCalledASASLRefusal: a SASL_SSL listener dialed with
// SASL but without TLS closes the connection during the SASL handshake;
// that is not a refusal of the credentials, and the WARN does not say so.
func TestTLSMissingIsNotCalledASASLRefusal(t *testing.T) {
	ca := testcert.New(t)
	kc, err := kfake.NewCluster(append(saslBroker("PLAIN"), kfake.NumBrokers(1),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{ca.Server}, MinVersion: tls.VersionTLS12}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	u := New(Config{Name: "source", Bootstrap: kc.ListenAddrs(), PoolSize: 1, DialTimeout: 2 * time.Second,
		ReadTimeout: 2 * time.Second, Security: Security{SASL: plain.Auth{User: "agent", Pass: "s3cret"}.AsMechanism()}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = u.Metadata(ctx, nil, false)
	if err == nil {
		t.Fatal("metadata answered")
	}
	if msg := checkFor(err); strings.Contains(msg, "refused the agent's SASL") {
		t.Fatalf("the broker never answered the SASL handshake (it closed: no TLS), yet: %q\nerr: %v", msg, err)
	}
}

// saslPool starts a saslfake broker whose sessions last life (0: forever)
// and a one-connection pool that authenticates to it; both end with t.
func saslPool(t *testing.T, life, dialTimeout time.Duration) (*saslfake.Broker, *Cluster) {
	t.Helper()
	b, err := saslfake.New([]string{"x"}, life)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	u := New(Config{Name: "source", Bootstrap: []string{b.Addr}, PoolSize: 1, DialTimeout: dialTimeout,
		ReadTimeout: 5 * time.Second, Security: Security{SASL: &saslfake.Mechanism{Steps: []string{"x"}}}})
	return b, u
}

// waitPast returns once the clock has passed at: the session moments
// (retire, expiry) these tests cross are points in time, not events.
func waitPast(at time.Time) {
	for !time.Now().After(at) {
		time.Sleep(time.Millisecond)
	}
}
