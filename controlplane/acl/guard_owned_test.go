package acl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/baton-kafka/baton/controlplane/acl/acltest"
)

// Lift deletes only what Protect created: an operator's own DENY (and an
// ALLOW for the replicator that was there before) survive it.
func TestGuardLiftsOnlyItsOwn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dest := acltest.Cluster(t)
	adm := kadm.NewClient(acltest.Client(t, dest, "admin", "admin-pw"))
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	// The operator's: app may never write orders; other keeps an explicit grant
	// denied too.
	if _, err := adm.CreateACLs(ctx, kadm.NewACLs().Topics("orders").Deny("User:app").DenyHosts().
		Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)); err != nil {
		t.Fatal(err)
	}
	g := &Guard{Admin: adm, Replicator: "repl"}
	if err := g.Protect(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if err := acltest.CanWrite(t, dest, "repl", "orders"); err != nil {
		t.Fatalf("the replicator while protected: %v", err)
	}
	if err := g.Lift(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if !acltest.HasACL(t, ctx, adm, "orders", "User:app", false) {
		t.Error("Lift deleted the operator's own DENY WRITE for User:app")
	}
	if err := acltest.CanWrite(t, dest, "app", "orders"); err == nil {
		t.Error("app wrote orders after Lift despite the operator's DENY")
	}
	if acltest.HasACL(t, ctx, adm, "orders", "User:repl", true) {
		t.Error("Lift left the replicator's ALLOW it created")
	}
}

// The replicator's principal must be told apart from producers. A
// Guard refuses one that cannot be; DetectGuard runs without a guard for
// an anonymous replicator (every client of a destination without SASL or
// mTLS is one), saying why, and refuses none or the wildcard.
func TestGuardRefusesAnonymousReplicator(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dest := acltest.Cluster(t)
	adm := kadm.NewClient(acltest.Client(t, dest, "admin", "admin-pw"))
	for _, tc := range []struct {
		replicator string
		detected   string // what DetectGuard gives: "none" (an Unguarded saying why) or "refused"
	}{
		{"User:ANONYMOUS", "none"},
		{"ANONYMOUS", "none"},
		{"User:*", "refused"},
		{"", "refused"},
	} {
		t.Run(fmt.Sprintf("%q", tc.replicator), func(t *testing.T) {
			if err := (&Guard{Admin: adm, Replicator: tc.replicator}).Protect(ctx, "orders"); !errors.Is(err, ErrGuardPrincipal) {
				t.Errorf("Protect with replicator %q: %v, want ErrGuardPrincipal", tc.replicator, err)
			}
			g, none, err := DetectGuard(ctx, adm, tc.replicator)
			switch tc.detected {
			case "none":
				if err != nil || g != nil || none == nil || !strings.Contains(none.Why, "User:ANONYMOUS") ||
					!strings.Contains(none.Remedy, "--replicator-principal") {
					t.Errorf("DetectGuard with replicator %q on a destination with an authorizer = %v, %#v, %v; want an "+
						"Unguarded saying the replicator is anonymous and naming --replicator-principal", tc.replicator, g, none, err)
				}
			case "refused":
				if !errors.Is(err, ErrGuardPrincipal) {
					t.Errorf("DetectGuard with replicator %q = %v, %v, %v; want ErrGuardPrincipal", tc.replicator, g, none, err)
				}
			}
		})
	}
	if acltest.HasACL(t, ctx, adm, "orders", "User:ANONYMOUS", true) {
		t.Error("an ALLOW for User:ANONYMOUS was created")
	}
}
