package controlplane

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// The replicator's principal must be told apart from producers. An
// ACLGuard refuses one that cannot be; DetectGuard runs without a guard for
// an anonymous replicator (every client of a destination without SASL or
// mTLS is one), saying why, and refuses none or the wildcard.
func TestACLGuardRefusesAnonymousReplicator(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dest := aclDestination(t)
	adm := kadm.NewClient(saslClient(t, dest, "admin", "admin-pw"))
	for _, tc := range []struct {
		replicator string
		detected   string // what DetectGuard gives: "none" (a NoGuard saying why) or "refused"
	}{
		{"User:ANONYMOUS", "none"},
		{"ANONYMOUS", "none"},
		{"User:*", "refused"},
		{"", "refused"},
	} {
		t.Run(fmt.Sprintf("%q", tc.replicator), func(t *testing.T) {
			if err := (&ACLGuard{Admin: adm, Replicator: tc.replicator}).Protect(ctx, "orders"); !errors.Is(err, ErrGuardPrincipal) {
				t.Errorf("Protect with replicator %q: %v, want ErrGuardPrincipal", tc.replicator, err)
			}
			g, err := DetectGuard(ctx, adm, tc.replicator)
			switch tc.detected {
			case "none":
				ng, ok := g.(NoGuard)
				if err != nil || !ok || !strings.Contains(ng.Why, "User:ANONYMOUS") || !strings.Contains(ng.Remedy, "--replicator-principal") {
					t.Errorf("DetectGuard with replicator %q on a destination with an authorizer = %#v, %v; want a NoGuard "+
						"saying the replicator is anonymous and naming --replicator-principal", tc.replicator, g, err)
				}
			case "refused":
				if !errors.Is(err, ErrGuardPrincipal) {
					t.Errorf("DetectGuard with replicator %q = %T, %v; want ErrGuardPrincipal", tc.replicator, g, err)
				}
			}
		})
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
