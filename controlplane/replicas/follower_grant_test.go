package replicas

import (
	"bytes"
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/migration"
)

// watchGate holds the leader's record watch (Records.watch ->
// takeRecorded) at its next record until released: it stands for a watch
// that delivers a moment late, which it may always do.
type watchGate struct {
	armed    atomic.Bool
	once     sync.Once
	blocked  chan struct{}
	released chan struct{}
}

func newWatchGate() *watchGate {
	return &watchGate{blocked: make(chan struct{}), released: make(chan struct{})}
}

func (g *watchGate) now() time.Time {
	if g.armed.Load() {
		buf := make([]byte, 16<<10)
		if n := runtime.Stack(buf, false); bytes.Contains(buf[:n], []byte("takeRecorded")) {
			g.once.Do(func() { close(g.blocked) })
			<-g.released
		}
	}
	return time.Now()
}

// TestFollowerGrantLostBehindLaterRecord: a follower grants agent n a
// lease (record r1). Before the leader's watch delivers r1, n's next
// heartbeat (it had not applied a newer version yet, and carried writes)
// is refused by the follower and recorded (r2, no grant), over r1 in
// etcd. A cutover starts: the drain must wait for n, whose lease runs,
// though the latest record of n holds no grant: the leader takes every
// revision of the records, in order, before it drains (Records.Sync).
func TestFollowerGrantLostBehindLaterRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const lease = 30 * time.Second // n's lease outlasts the test
	k := startKafka(t, ctx)
	ls, fs := replicaStores(t, ctx)
	gate := newWatchGate()
	p := startPlaneStore(t, ctx, ls, k, controlplane.ReplicaID("L"), controlplane.Clock(gate.now), controlplane.LeaseDuration(lease))
	// Registered after the plane's cleanup, so it runs first: the plane
	// stops only once its watch can go on.
	t.Cleanup(func() {
		select {
		case <-gate.released:
		default:
			close(gate.released)
		}
	})
	f, _ := startFollower(t, ctx, fs, k, "F", controlplane.LeaseDuration(lease))

	k.produce(t, ctx, "t", 20)
	if _, err := p.cp.AddTopic(ctx, controlplane.TopicSpec{Name: "t", State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	v1 := p.cp.Version()
	eventually(t, ctx, "the follower at the leader's version", func() bool { return f.Version() == v1 })

	gate.armed.Store(true)
	resp, err := f.Heartbeat(ctx, &batonv1.HeartbeatRequest{NodeId: "n", AckedVersion: v1})
	if err != nil || !resp.GetGranted() {
		t.Fatalf("the follower's grant: %v, %v", resp, err)
	}
	grantedUntil := resp.GetExpiresAt().AsTime()
	select { // the leader's watch has r1 and has not merged it yet
	case <-gate.blocked:
	case <-ctx.Done():
		t.Fatal("the leader's watch never delivered the follower's grant")
	}

	// Another change: n has not applied it when it heartbeats next.
	if _, err := p.cp.AddTopic(ctx, controlplane.TopicSpec{Name: "other", State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	v2 := p.cp.Version()
	eventually(t, ctx, "the follower at the leader's version", func() bool { return f.Version() == v2 })
	resp, err = f.Heartbeat(ctx, &batonv1.HeartbeatRequest{NodeId: "n", AckedVersion: v1,
		Topics: []*batonv1.TopicDrain{{Topic: "t", Writes: []*batonv1.PartitionWrites{{Partition: 0, Acked: []*batonv1.OffsetRange{{Start: 0, End: 1}}}}}}})
	if err != nil || resp.GetGranted() {
		t.Fatalf("the follower's refusal: %v, %v", resp, err)
	}

	migrateWhenGateOpens(t, ctx, p, "t")
	top, err := p.cp.Topic("t")
	if err != nil || top.Cutover == nil {
		t.Fatalf("t after migrate: %+v, %v", top, err)
	}
	// The cutover's drain starts: it waits for the held watch (or, read
	// past it, merged r2 alone). Then the watch goes on.
	eventually(t, ctx, "the drain waits for the watch, or read n's refused record", func() bool {
		if p.records.syncWaits.Load() > 0 {
			return true
		}
		for _, a := range p.cp.Agents() {
			if a.Node == "n" && a.Refused != "" {
				return true
			}
		}
		return false
	})
	close(gate.released)

	// n holds a lease (from F) until grantedUntil, and never reported
	// drained: the drain must wait for it.
	eventually(t, ctx, "the cutover waits for n, or drains without it", func() bool {
		if slices.Contains(kinds(t, ctx, p, "t"), controlplane.EventDrained) {
			if time.Now().Before(grantedUntil) {
				t.Fatalf("the cutover drained while n holds a lease the follower granted until %s (%v left); leader's view of n: %+v; events: %v",
					grantedUntil.Format(time.RFC3339Nano), time.Until(grantedUntil).Round(time.Millisecond), agentView(p, "n"), eventLines(t, ctx, p, "t"))
			}
			return true
		}
		evs, err := p.cp.Events(ctx, "t", 0)
		if err != nil {
			t.Fatal(err)
		}
		// The drain said it waits for n (cutover.Drain listed it waiting).
		return slices.ContainsFunc(evs, func(e controlplane.Event) bool {
			return e.Kind == controlplane.EventWaitingOnAgent && e.Agent == "n"
		})
	})
}

func agentView(p *plane, node string) controlplane.AgentView {
	for _, a := range p.cp.Agents() {
		if a.Node == node {
			return a
		}
	}
	return controlplane.AgentView{}
}
