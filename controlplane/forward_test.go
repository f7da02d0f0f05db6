package controlplane

import (
	"context"
	"testing"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
)

// A silent agent is safe only after its lease grant + lease + F, with F the
// larger of the control plane's and the one pushed in the topic's route:
// agents answer a forwarded produce within the route's F.
func TestSilentAgentWaitUsesTheTopicsForwardDeadline(t *testing.T) {
	t.Parallel()
	granted := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const lease, forward = 5 * time.Second, 2 * time.Second
	cases := []struct {
		name     string
		topicF   time.Duration
		at       time.Duration // after the grant
		wantSafe bool
	}{
		{"control plane's F, before", 0, lease + forward - time.Millisecond, false},
		{"control plane's F, after", 0, lease + forward, true},
		{"larger topic F, before", 4 * time.Second, lease + 4*time.Second - time.Millisecond, false},
		{"larger topic F, after", 4 * time.Second, lease + 4*time.Second, true},
		{"smaller topic F keeps the control plane's", time.Second, lease + time.Second, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cp := &ControlPlane{
				cfg:    config{lease: lease, forward: forward},
				now:    func() time.Time { return granted.Add(tc.at) },
				topics: map[string]*Topic{"t": {TopicSpec: TopicSpec{Name: "t", ForwardDeadline: tc.topicF}}},
				agents: map[string]*Agent{"a": {Node: "a", GrantedAt: granted}},
			}
			p := cp.pendingAgents("t", 2)
			if safe := len(p.expired) == 1; safe != tc.wantSafe {
				t.Fatalf("agent counted safe=%v at grant+%v (expired %v, waiting %v), want %v",
					safe, tc.at, p.expired, p.waiting, tc.wantSafe)
			}
		})
	}
}

// A control plane that crashed before it stored an agent's newest grant
// must, after the restart, treat every agent it knows as possibly holding
// a lease from then: a new agent is stored at its first heartbeat (refused:
// it had not applied the routes yet), and the grant that followed lived
// only in memory until the next flush. Found by the cutover simulation.
func TestRestartCountsEveryKnownAgentAsGranted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	st := NewMemStore()
	open := func() *ControlPlane {
		cp, err := New(ctx, WithStore(st), WithReplication(idleReplication{}), Clock(clock), Logger(quiet),
			Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"}))
		if err != nil {
			t.Fatal(err)
		}
		return cp
	}
	cp := open()
	if _, err := cp.AddTopic(ctx, TopicSpec{Name: "t"}, "test"); err != nil {
		t.Fatal(err)
	}
	for _, acked := range []uint64{0, cp.Version()} {
		if _, err := cp.Heartbeat(ctx, &batonv1.HeartbeatRequest{NodeId: "a", AckedVersion: acked}); err != nil {
			t.Fatal(err)
		}
	}
	if a := cp.Agents(); len(a) != 1 || !a[0].LeaseValid {
		t.Fatalf("agent a holds no lease before the crash: %+v", a)
	}
	cp.Close() // a crash: no flush
	now = now.Add(time.Second)
	cp = open()
	defer cp.Close()
	p := cp.pendingAgents("t", cp.Version()+1)
	if len(p.waiting) != 1 || p.waiting[0].node != "a" {
		t.Fatalf("after the restart agent a is waiting=%v drained=%v expired=%v; want it waited for (it may still forward)",
			p.waiting, p.drained, p.expired)
	}
}
