package controlplane

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/baton-kafka/baton/controlplane/acl"
	"github.com/baton-kafka/baton/controlplane/acl/acltest"
	"github.com/baton-kafka/baton/internal/wait"
)

// A write grant made after the guard went up is denied at the control
// plane's next guard pass.
func TestGuardHoldsAgainstLaterGrants(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := startKafka(t, ctx)
	dest := acltest.Cluster(t)
	adm := kadm.NewClient(acltest.Client(t, dest, "admin", "admin-pw"))
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "held"); err != nil {
		t.Fatal(err)
	}
	p := startPlane(t, ctx, t.TempDir(), "", k, WithGuard(&acl.Guard{Admin: adm, Replicator: "repl", Owned: nil}),
		GuardResync(200*time.Millisecond))
	if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: "held"}, "test"); err != nil {
		t.Fatal(err)
	}
	if err := acltest.CanWrite(t, dest, "other", "held"); err == nil {
		t.Fatal("other (no ACL) wrote held while protected")
	}
	if _, err := adm.CreateACLs(ctx, kadm.NewACLs().Topics("held").Allow("User:other").AllowHosts().
		Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the later grant to other is denied", func() string {
		if !acltest.HasACL(t, ctx, adm, "held", "User:other", false) {
			return "no DENY for User:other yet"
		}
		return ""
	})
	if err := acltest.CanWrite(t, dest, "other", "held"); err == nil {
		t.Error("other wrote held after its grant was denied")
	}
	if err := acltest.CanWrite(t, dest, "repl", "held"); err != nil {
		t.Errorf("the replicator: %v", err)
	}
}
