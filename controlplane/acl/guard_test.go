package acl

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/controlplane/acl/acltest"
	"github.com/baton-kafka/baton/test/kafka"
)

func TestGuard(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dest := acltest.Cluster(t)
	adm := kadm.NewClient(acltest.Client(t, dest, "admin", "admin-pw"))
	for _, topic := range []string{"orders", "payments"} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	g := &Guard{Admin: adm, Replicator: "repl"}

	for _, u := range []string{"repl", "app"} {
		if err := acltest.CanWrite(t, dest, u, "orders"); err != nil {
			t.Fatalf("%s before Protect: %v", u, err)
		}
	}
	for range 2 { // idempotent
		if err := g.Protect(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
	}
	if err := acltest.CanWrite(t, dest, "app", "orders"); err == nil {
		t.Error("app wrote orders while protected")
	}
	if err := acltest.CanWrite(t, dest, "other", "orders"); err == nil {
		t.Error("other (no ACL) wrote orders while protected")
	}
	if err := acltest.CanWrite(t, dest, "repl", "orders"); err != nil {
		t.Errorf("the replicator could not write orders while protected: %v", err)
	}
	if err := acltest.CanWrite(t, dest, "app", "payments"); err != nil {
		t.Errorf("app could not write payments (not protected): %v", err)
	}

	if err := g.Lift(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"repl", "app"} {
		if err := acltest.CanWrite(t, dest, u, "orders"); err != nil {
			t.Errorf("%s after Lift: %v", u, err)
		}
	}
	if err := acltest.CanWrite(t, dest, "other", "orders"); err == nil {
		t.Error("other (no ACL) wrote orders after Lift")
	}
	if err := g.Lift(ctx, "orders"); err != nil { // nothing left to lift
		t.Fatal(err)
	}
}

// A wildcard ALLOW cannot be narrowed by DENYs without denying the
// replicator too: Protect refuses it.
func TestGuardRefusesWildcardAllow(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dest := acltest.Cluster(t)
	adm := kadm.NewClient(acltest.Client(t, dest, "admin", "admin-pw"))
	if _, err := adm.CreateACLs(ctx, kadm.NewACLs().Topics("orders").Allow("User:*").Operations(kadm.OpWrite).
		ResourcePatternType(kadm.ACLPatternLiteral)); err != nil {
		t.Fatal(err)
	}
	g := &Guard{Admin: adm, Replicator: "User:repl"}
	if err := g.Protect(ctx, "orders"); !errors.Is(err, ErrGuard) {
		t.Fatalf("want ErrGuard for an ALLOW to User:*, got %v", err)
	}
}

func TestDetectGuard(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dest := acltest.Cluster(t)
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
		{"authorizer", kadm.NewClient(acltest.Client(t, dest, "admin", "admin-pw")), "repl", "acl", nil},
		{"authorizer without the replicator's principal", kadm.NewClient(acltest.Client(t, dest, "admin", "admin-pw")), "", "error", ErrGuardPrincipal},
		{"authorizer, anonymous replicator", kadm.NewClient(acltest.Client(t, dest, "admin", "admin-pw")), "User:ANONYMOUS", "none", nil},
		{"admin may not describe ACLs", kadm.NewClient(acltest.Client(t, dest, "other", "other-pw")), "repl", "error", ErrGuard},
		{"Apache Kafka without an authorizer", kadm.NewClient(plainCl), "repl", "none", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, none, err := DetectGuard(ctx, tc.adm, tc.replicator)
			got := "error"
			switch {
			case err != nil:
			case g != nil && none == nil:
				got = "acl"
			case g == nil && none != nil:
				got = "none"
			}
			if got != tc.want {
				t.Fatalf("DetectGuard = %v, %v, %v; want %s", g, none, err, tc.want)
			}
			if tc.want == "error" && !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v is not %v", err, tc.wantErr)
			}
		})
	}
}
