package controlplane

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/test/kafka"
)

// aclDestination starts a kfake destination with an authorizer: "admin" is
// a superuser; "repl" (the replicator) and "app" (a producer) may write
// every topic (ALLOW WRITE on literal "*"); "other" may write nothing.
func aclDestination(t *testing.T, extra ...kfake.Opt) *embedded.Cluster {
	t.Helper()
	writeAll := kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "*", Pattern: kmsg.ACLResourcePatternTypeLiteral,
		Operation: kmsg.ACLOperationWrite, Allow: true}
	opts := append([]kfake.Opt{kfake.EnableSASL(), kfake.EnableACLs(), kfake.Superuser("PLAIN", "admin", "admin-pw"),
		kfake.User("PLAIN", "repl", "repl-pw", writeAll), kfake.User("PLAIN", "app", "app-pw", writeAll),
		kfake.User("PLAIN", "other", "other-pw")}, extra...)
	c, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(1), embedded.KfakeOpts(opts...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func saslClient(t *testing.T, c *embedded.Cluster, user, pass string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()),
		kgo.DisableIdempotentWrite(), kgo.RecordDeliveryTimeout(3*time.Second), kgo.RecordRetries(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// canWrite produces one record as user with a fresh client.
func canWrite(t *testing.T, c *embedded.Cluster, user, topic string) error {
	t.Helper()
	cl := saslClient(t, c, user, user+"-pw")
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("x")}).FirstErr()
}

func TestACLGuard(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dest := aclDestination(t)
	adm := kadm.NewClient(saslClient(t, dest, "admin", "admin-pw"))
	for _, topic := range []string{"orders", "payments"} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	g := &ACLGuard{Admin: adm, Replicator: "repl"}

	for _, u := range []string{"repl", "app"} {
		if err := canWrite(t, dest, u, "orders"); err != nil {
			t.Fatalf("%s before Protect: %v", u, err)
		}
	}
	for range 2 { // idempotent
		if err := g.Protect(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
	}
	if err := canWrite(t, dest, "app", "orders"); err == nil {
		t.Error("app wrote orders while protected")
	}
	if err := canWrite(t, dest, "other", "orders"); err == nil {
		t.Error("other (no ACL) wrote orders while protected")
	}
	if err := canWrite(t, dest, "repl", "orders"); err != nil {
		t.Errorf("the replicator could not write orders while protected: %v", err)
	}
	if err := canWrite(t, dest, "app", "payments"); err != nil {
		t.Errorf("app could not write payments (not protected): %v", err)
	}

	if err := g.Lift(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"repl", "app"} {
		if err := canWrite(t, dest, u, "orders"); err != nil {
			t.Errorf("%s after Lift: %v", u, err)
		}
	}
	if err := canWrite(t, dest, "other", "orders"); err == nil {
		t.Error("other (no ACL) wrote orders after Lift")
	}
	if err := g.Lift(ctx, "orders"); err != nil { // nothing left to lift
		t.Fatal(err)
	}
}

// A wildcard ALLOW cannot be narrowed by DENYs without denying the
// replicator too: Protect refuses it.
func TestACLGuardRefusesWildcardAllow(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dest := aclDestination(t)
	adm := kadm.NewClient(saslClient(t, dest, "admin", "admin-pw"))
	if _, err := adm.CreateACLs(ctx, kadm.NewACLs().Topics("orders").Allow("User:*").Operations(kadm.OpWrite).
		ResourcePatternType(kadm.ACLPatternLiteral)); err != nil {
		t.Fatal(err)
	}
	g := &ACLGuard{Admin: adm, Replicator: "User:repl"}
	if err := g.Protect(ctx, "orders"); !errors.Is(err, ErrGuard) {
		t.Fatalf("want ErrGuard for an ALLOW to User:*, got %v", err)
	}
}

func TestDetectGuard(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dest := aclDestination(t)
	noAuthorizer := kafka.StartT(t, kafka.Brokers(1))
	plainCl, err := kgo.NewClient(kgo.SeedBrokers(noAuthorizer.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plainCl.Close)

	for _, tc := range []struct {
		name       string
		adm        *kadm.Client
		replicator string
		want       string // "acl", "none" or "error"
		wantErr    error  // for "error"
	}{
		{"authorizer", kadm.NewClient(saslClient(t, dest, "admin", "admin-pw")), "repl", "acl", nil},
		{"authorizer without the replicator's principal", kadm.NewClient(saslClient(t, dest, "admin", "admin-pw")), "", "error", ErrGuardPrincipal},
		{"authorizer, anonymous replicator", kadm.NewClient(saslClient(t, dest, "admin", "admin-pw")), "User:ANONYMOUS", "none", nil},
		{"admin may not describe ACLs", kadm.NewClient(saslClient(t, dest, "other", "other-pw")), "repl", "error", ErrGuard},
		{"Apache Kafka without an authorizer", kadm.NewClient(plainCl), "repl", "none", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := DetectGuard(ctx, tc.adm, tc.replicator)
			got := "error"
			switch g.(type) {
			case *ACLGuard:
				got = "acl"
			case NoGuard:
				got = "none"
			}
			if got != tc.want {
				t.Fatalf("DetectGuard = %T, %v; want %s", g, err, tc.want)
			}
			if tc.want == "error" && !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v is not %v", err, tc.wantErr)
			}
		})
	}
}
