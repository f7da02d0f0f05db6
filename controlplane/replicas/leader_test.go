package replicas

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
)

// TestLeaderElectionFencesTheLoser: two replicas on one etcd: the first
// leads, the second waits in the campaign; when the leader's etcd session
// ends (as when it stops keeping it alive) the second is elected, the
// first learns it lost, and none of its writes commits any more.
func TestLeaderElectionFencesTheLoser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, err := controlplane.OpenEmbedded(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := controlplane.OpenEtcd(ctx, a.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	la, err := Campaign(ctx, a, Replica{ID: "a", GRPC: "127.0.0.1:1"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	type elected struct {
		l   *Leadership
		err error
	}
	bElected := make(chan elected, 1)
	go func() {
		l, err := Campaign(ctx, b, Replica{ID: "b", GRPC: "127.0.0.1:2"}, time.Second)
		bElected <- elected{l, err}
	}()
	wait.For(t, 30*time.Second, "both replicas registered", func() string {
		st, err := Status(ctx, a)
		if err != nil {
			return err.Error()
		}
		if len(st.Replicas) != 2 || st.Leader != "a" {
			return "replicas " + st.Leader
		}
		return ""
	})
	select {
	case e := <-bElected:
		t.Fatalf("b elected (%v) while a leads", e.err)
	default:
	}
	topic := controlplane.Topic{TopicSpec: controlplane.TopicSpec{Name: "t", State: migration.Proxy}}
	if err := a.PutTopic(ctx, topic, 1); err != nil {
		t.Fatalf("the leader's write: %v", err)
	}

	// a's session ends: etcd revokes a lease nobody keeps alive.
	if _, err := b.Client().Revoke(ctx, la.session.Lease()); err != nil {
		t.Fatal(err)
	}
	var lb *Leadership
	select {
	case e := <-bElected:
		if e.err != nil {
			t.Fatal(e.err)
		}
		lb = e.l
	case <-ctx.Done():
		t.Fatal("b not elected after a's session ended")
	}
	select {
	case <-la.Lost():
	case <-ctx.Done():
		t.Fatal("a not told it lost")
	}
	for name, err := range map[string]error{
		"PutTopic":    a.PutTopic(ctx, topic, 2),
		"DeleteTopic": a.DeleteTopic(ctx, "t", 2),
		"PutAgents":   a.PutAgents(ctx, []controlplane.Agent{{Node: "n"}}),
		"AppendEvent": func() error {
			_, err := a.AppendEvent(ctx, controlplane.Event{Topic: "t", Kind: controlplane.EventAdded})
			return err
		}(),
	} {
		if !errors.Is(err, controlplane.ErrNotLeader) {
			t.Errorf("the old leader's %s: %v, want controlplane.ErrNotLeader", name, err)
		}
	}
	if err := b.PutTopic(ctx, topic, 2); err != nil {
		t.Fatalf("the new leader's write: %v", err)
	}
	version, _, agents, err := b.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if version != 2 || len(agents) != 0 {
		t.Errorf("after the takeover: version %d, %d agents; want 2 (the new leader's) and none (the old one's write refused)", version, len(agents))
	}
	st, err := Status(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if st.Leader != "b" || len(st.Replicas) != 1 || st.Replicas[0].ID != "b" || len(st.Etcd) != 1 || !st.Etcd[0].Healthy {
		t.Errorf("status %+v: want b leading alone on a healthy etcd", st)
	}
	if err := lb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
