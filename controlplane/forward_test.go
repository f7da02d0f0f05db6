package controlplane

import (
	"context"
	"testing"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane/cutover"
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
			if safe := len(p.Expired) == 1; safe != tc.wantSafe {
				t.Fatalf("agent counted safe=%v at grant+%v (expired %v, waiting %v), want %v",
					safe, tc.at, p.Expired, p.Waiting, tc.wantSafe)
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
	if len(p.Waiting) != 1 || p.Waiting[0].Node != "a" {
		t.Fatalf("after the restart agent a is waiting=%v drained=%v expired=%v; want it waited for (it may still forward)",
			p.Waiting, p.Drained, p.Expired)
	}
}

// A restarted agent's new process reports the topic drained, but what its
// earlier process sent to the source may still land there up to F later:
// the drain waits for the earlier process by the silent-safe rule (its last
// grant + lease + F), whatever the new one reports. Found by the cutover
// simulation (seed 20534: a produce the killed agent had sent landed on the
// source after replication stopped). Without an incarnation nothing changes;
// on a fenced topic the fence stops the earlier process, as any silent one.
func TestRestartedAgentWaitsForItsEarlierProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const lease, forward = 5 * time.Second, 2 * time.Second
	for _, tc := range []struct {
		name          string
		first, second uint64 // incarnations of the two processes' heartbeats
		fenced        bool
		wantWait      bool
	}{
		{"restarted", 1, 2, false, true},
		{"same process", 1, 1, false, false},
		{"no incarnation sent", 0, 0, false, false},
		{"restarted, fenced topic", 1, 2, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			now := start
			cp, err := New(ctx, WithStore(NewMemStore()), WithReplication(idleReplication{}), Clock(func() time.Time { return now }),
				Logger(quiet), LeaseDuration(lease), ForwardDeadline(forward),
				Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"}))
			if err != nil {
				t.Fatal(err)
			}
			defer cp.Close()
			if _, err := cp.AddTopic(ctx, TopicSpec{Name: "t"}, "test"); err != nil {
				t.Fatal(err)
			}
			cp.mu.Lock()
			cp.topics["t"].FenceAtCutover = tc.fenced
			cp.mu.Unlock()
			beat := func(inc uint64, v uint64, drained bool) {
				t.Helper()
				req := &batonv1.HeartbeatRequest{NodeId: "a", Incarnation: inc, AckedVersion: v}
				if drained {
					req.Topics = []*batonv1.TopicDrain{{Topic: "t", StoppedForwarding: true}}
				}
				if resp, err := cp.Heartbeat(ctx, req); err != nil || !resp.GetGranted() {
					t.Fatalf("heartbeat: %v %v", resp, err)
				}
			}
			beat(tc.first, cp.Version(), false) // the first process, granted at start
			now = start.Add(time.Second)
			v := cp.Version() + 1 // MIGRATING, as the cutover pushes it
			cp.mu.Lock()
			cp.version = v
			cp.mu.Unlock()
			beat(tc.second, v, true) // the process after the restart: drained
			at := func(d time.Duration) cutover.Pending {
				now = start.Add(d)
				return cp.pendingAgents("t", v)
			}
			waited := len(at(time.Second).Waiting) == 1
			if waited != tc.wantWait {
				t.Fatalf("right after the restart: waiting=%v, want %v (%+v)", waited, tc.wantWait, at(time.Second))
			}
			if tc.wantWait {
				if p := at(lease + forward - time.Millisecond); len(p.Waiting) != 1 {
					t.Fatalf("just before the earlier grant + lease + F: %+v, want the agent waited for", p)
				}
				if p := at(lease + forward); len(p.Drained) != 1 {
					t.Fatalf("at the earlier grant + lease + F: %+v, want the agent drained", p)
				}
			}
		})
	}
}

// A follower's record of a restarted agent keeps its earlier process's
// grant in the leader's view too.
func TestRecordedRestartKeepsTheEarlierGrant(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	cp := &ControlPlane{cfg: config{lease: 5 * time.Second, replica: "L"}, agents: map[string]*Agent{}, now: func() time.Time { return now },
		recorded: map[string]int64{}, dirty: map[string]bool{}, changed: make(chan struct{})}
	merge := func(rev int64, inc uint64, at time.Time) {
		now = at
		cp.MergeRecords(context.Background(), false, RecordedAgent{Agent: Agent{Node: "a", Incarnation: inc, GrantedAt: t0, Replica: "F"}, Rev: rev})
	}
	merge(1, 7, t0)
	merge(2, 7, t0.Add(time.Second))
	if e := cp.agents["a"].EarlierGrantedAt; !e.IsZero() {
		t.Fatalf("same process: earlier grant %v, want none", e)
	}
	merge(3, 8, t0.Add(2*time.Second))
	if e := cp.agents["a"].EarlierGrantedAt; !e.Equal(t0.Add(time.Second)) {
		t.Fatalf("restarted: earlier grant %v, want the first process's last, %v", e, t0.Add(time.Second))
	}
}

// pendingAgents (for tests) is the drain of topic at version v now: which agents it
// waits for (cutover.Drain).
func (cp *ControlPlane) pendingAgents(topic string, v uint64) cutover.Pending {
	now := cp.now()
	d := &driver{cp: cp, name: topic}
	agents := d.agents()
	cp.mu.Lock()
	spec := cutover.DrainSpec{Version: v}
	if t, ok := cp.topics[topic]; ok {
		spec.Fenced, spec.Forward = t.FenceAtCutover, t.ForwardDeadline
	}
	cp.mu.Unlock()
	return cutover.Drain(now, cp.rules(), spec, agents)
}
