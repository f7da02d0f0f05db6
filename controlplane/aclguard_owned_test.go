package controlplane

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/baton-kafka/baton/internal/wait"
)

func hasACL(t *testing.T, ctx context.Context, adm *kadm.Client, topic, principal string, allow bool) bool {
	t.Helper()
	b := kadm.NewACLs().Topics(topic).Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)
	if allow {
		b = b.Allow(principal).AllowHosts()
	} else {
		b = b.Deny(principal).DenyHosts()
	}
	res, err := adm.DescribeACLs(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		for _, a := range r.Described {
			if a.Principal == principal && a.Name == topic {
				return true
			}
		}
	}
	return false
}

// Lift deletes only what Protect created: an operator's own DENY (and an
// ALLOW for the replicator that was there before) survive it.
func TestACLGuardLiftsOnlyItsOwn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dest := aclDestination(t)
	adm := kadm.NewClient(saslClient(t, dest, "admin", "admin-pw"))
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	// The operator's: app may never write orders; other keeps an explicit grant
	// denied too.
	if _, err := adm.CreateACLs(ctx, kadm.NewACLs().Topics("orders").Deny("User:app").DenyHosts().
		Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)); err != nil {
		t.Fatal(err)
	}
	g := &ACLGuard{Admin: adm, Replicator: "repl"}
	if err := g.Protect(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if err := canWrite(t, dest, "repl", "orders"); err != nil {
		t.Fatalf("the replicator while protected: %v", err)
	}
	if err := g.Lift(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if !hasACL(t, ctx, adm, "orders", "User:app", false) {
		t.Error("Lift deleted the operator's own DENY WRITE for User:app")
	}
	if err := canWrite(t, dest, "app", "orders"); err == nil {
		t.Error("app wrote orders after Lift despite the operator's DENY")
	}
	if hasACL(t, ctx, adm, "orders", "User:repl", true) {
		t.Error("Lift left the replicator's ALLOW it created")
	}
}

// The replicator's principal must be told apart from producers.
func TestACLGuardRefusesAnonymousReplicator(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dest := aclDestination(t)
	adm := kadm.NewClient(saslClient(t, dest, "admin", "admin-pw"))
	for _, p := range []string{"User:ANONYMOUS", "ANONYMOUS", "User:*"} {
		if err := (&ACLGuard{Admin: adm, Replicator: p}).Protect(ctx, "orders"); !errors.Is(err, ErrGuardPrincipal) {
			t.Errorf("Protect with replicator %s: %v, want ErrGuardPrincipal", p, err)
		}
		if _, err := DetectGuard(ctx, adm, p); !errors.Is(err, ErrGuardPrincipal) {
			t.Errorf("DetectGuard with replicator %s on a destination with an authorizer: %v, want ErrGuardPrincipal", p, err)
		}
	}
	if hasACL(t, ctx, adm, "orders", "User:ANONYMOUS", true) {
		t.Error("an ALLOW for User:ANONYMOUS was created")
	}
}

// A write grant made after the guard went up is denied at the control
// plane's next guard pass.
func TestGuardHoldsAgainstLaterGrants(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := startKafka(t, ctx)
	dest := aclDestination(t)
	adm := kadm.NewClient(saslClient(t, dest, "admin", "admin-pw"))
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "held"); err != nil {
		t.Fatal(err)
	}
	p := startPlane(t, ctx, t.TempDir(), "", k, WithGuard(&ACLGuard{Admin: adm, Replicator: "repl", Owned: nil}),
		GuardResync(200*time.Millisecond))
	if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: "held"}, "test"); err != nil {
		t.Fatal(err)
	}
	if err := canWrite(t, dest, "other", "held"); err == nil {
		t.Fatal("other (no ACL) wrote held while protected")
	}
	if _, err := adm.CreateACLs(ctx, kadm.NewACLs().Topics("held").Allow("User:other").AllowHosts().
		Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the later grant to other is denied", func() string {
		if !hasACL(t, ctx, adm, "held", "User:other", false) {
			return "no DENY for User:other yet"
		}
		return ""
	})
	if err := canWrite(t, dest, "other", "held"); err == nil {
		t.Error("other wrote held after its grant was denied")
	}
	if err := canWrite(t, dest, "repl", "held"); err != nil {
		t.Errorf("the replicator: %v", err)
	}
}
