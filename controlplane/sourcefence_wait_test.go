package controlplane

import (
	"context"
	"sync"
	"testing"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
)

// clockedFence is a SourceFence enforced as soon as it is up; it notes
// when Enforced first said so.
type clockedFence struct {
	mu         sync.Mutex
	up         map[string]bool
	enforcedAt time.Time
}

func (f *clockedFence) Fence(_ context.Context, topic string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.up == nil {
		f.up = map[string]bool{}
	}
	f.up[topic] = true
	return nil
}

func (f *clockedFence) Enforced(_ context.Context, topic string) (bool, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.up[topic] {
		return false, "not up", nil
	}
	if f.enforcedAt.IsZero() {
		f.enforcedAt = time.Now()
	}
	return true, "", nil
}

func (f *clockedFence) Lift(_ context.Context, topic string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.up, topic)
	return nil
}

// endsClock is a replication always caught up at offset 0 that notes when
// the cutover first read the source's end offsets (the first read after it
// raised the topic's priority: bypass detection reads them too).
type endsClock struct {
	caughtUp
	mu        sync.Mutex
	migrating bool
	readAt    time.Time
}

func (r *endsClock) SetMigrating(_ string, on bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.migrating = on
	return nil
}

func (r *endsClock) SourceEndOffsets(context.Context, string) (map[int32]int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.migrating && r.readAt.IsZero() {
		r.readAt = time.Now()
	}
	return map[int32]int64{0: 0}, nil
}

func (r *endsClock) Progress(string) (map[int32]int64, error) { return map[int32]int64{0: 0}, nil }

func (r *endsClock) Stop(context.Context, string) (map[int32]int64, []replicator.SourceBatch, error) {
	return map[int32]int64{0: 0}, nil, nil
}

// The fence step waits F after every broker enforces the fence so that a
// produce the source authorized just before is answered (or given up on)
// by the agent that sent it before the end offsets are read. An agent
// waits for a produce's answer for the F of the last heartbeat answer it
// got (agent/router.go waitCall: forwardDeadline(nil)), and an agent
// without a lease keeps forwarding fenced topics on it for up to
// UnleasedForward, across control-plane restarts and failovers. A control
// plane that waits a smaller F than the one such an agent holds reads the
// end offsets while the agent can still be acked a write above them:
// acked, never copied.
func TestSourceFenceWaitsTheForwardDeadlineAgentsHold(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	for _, tc := range []struct {
		name string
		// first answers the agent's last heartbeat; the control plane
		// that cuts over (on the same store) has F after.
		first, after time.Duration
	}{
		{name: "same F throughout", first: time.Second, after: time.Second},
		{name: "restarted (or another replica elected) with a smaller F", first: 2 * time.Second, after: 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			st := NewMemStore()
			fence := &clockedFence{}
			repl := &endsClock{}
			start := func(f time.Duration) *ControlPlane {
				cp, err := New(ctx, WithStore(st), WithReplication(repl), WithSourceFence(fence), Logger(quiet),
					LeaseDuration(3*time.Second), ForwardDeadline(f), CutoverTimeout(15*time.Second),
					Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"}))
				if err != nil {
					t.Fatal(err)
				}
				return cp
			}
			cp := start(tc.first)
			if _, err := cp.AddTopic(ctx, TopicSpec{Name: topic, State: migration.Proxy}, "test"); err != nil {
				t.Fatal(err)
			}
			// The agent's last heartbeat, granted: then it is cut off, and
			// forwards the fenced topic without a lease on this answer's F.
			resp, err := cp.Heartbeat(ctx, &batonv1.HeartbeatRequest{NodeId: "agent-1", AckedVersion: cp.Version()})
			if err != nil || !resp.GetGranted() {
				t.Fatalf("heartbeat: %v, %v", resp, err)
			}
			held := resp.GetForwardDeadline().AsDuration()
			cp.Close()
			cp = start(tc.after)
			defer cp.Close()
			if _, err := cp.Migrate(ctx, topic, "test", allGates...); err != nil {
				t.Fatal(err)
			}
			waitComplete(t, ctx, cp, topic)
			fence.mu.Lock()
			enforced := fence.enforcedAt
			fence.mu.Unlock()
			repl.mu.Lock()
			read := repl.readAt
			repl.mu.Unlock()
			if enforced.IsZero() || read.IsZero() {
				t.Fatalf("fence enforced at %v, end offsets read at %v", enforced, read)
			}
			if waited := read.Sub(enforced); waited < held {
				t.Errorf("end offsets read %v after the fence was enforced; an agent cut off since its last heartbeat "+
					"answer (F %v) may be acked a write the source authorized just before the fence until then",
					waited.Round(time.Millisecond), held)
			}
		})
	}
}

// protections records the destination write guard's Protect calls.
type protections struct {
	mu  sync.Mutex
	got map[string]int
}

func (p *protections) Protect(_ context.Context, topic string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.got == nil {
		p.got = map[string]int{}
	}
	p.got[topic]++
	return nil
}

func (p *protections) Lift(context.Context, string) error { return nil }

// slowCopy is a replication whose copy reaches the source's end offsets
// (1 per partition 0) copy after the cutover raised the topic's priority.
type slowCopy struct {
	caughtUp
	copy  time.Duration
	mu    sync.Mutex
	since time.Time
}

func (r *slowCopy) SetMigrating(_ string, on bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on && r.since.IsZero() {
		r.since = time.Now()
	}
	return nil
}

func (r *slowCopy) SourceEndOffsets(context.Context, string) (map[int32]int64, error) {
	return map[int32]int64{0: 1}, nil
}

func (r *slowCopy) Progress(string) (map[int32]int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.since.IsZero() && time.Since(r.since) >= r.copy {
		return map[int32]int64{0: 1}, nil
	}
	return map[int32]int64{0: 0}, nil
}

func (r *slowCopy) Stop(context.Context, string) (map[int32]int64, []replicator.SourceBatch, error) {
	return map[int32]int64{0: 1}, nil, nil
}

// design.md §6 Decisions: "a cut-off agent makes every cutover of every
// topic wait up to lease + F; the defaults (5 s + 2 s inside a 10 s
// timeout) leave room for the copy." With the source fence the cutover
// waits F once more after the fence, so with the defaults and one agent
// cut off the copy gets 1 s, where the time-lag gate admits topics up to
// 2.5 s behind. (For a fenced topic the drain's wait for a silent agent
// buys nothing the fence does not: the agent forwards it without a lease
// anyway, and the fence plus F is what ends its writes.)
func TestSourceFenceLeavesRoomForTheCopyWithAnAgentCutOff(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a lease")
	}
	t.Parallel()
	const topic = "orders"
	for _, tc := range []struct {
		name  string
		fence SourceFence
	}{
		{"without a source fence (control case)", NoFence{}},
		{"with a source fence", &clockedFence{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			repl := &slowCopy{copy: 1500 * time.Millisecond} // well inside the time-lag gate's timeout/4
			cp, err := New(ctx, WithStore(NewMemStore()), WithReplication(repl), WithSourceFence(tc.fence), Logger(quiet),
				Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"})) // default lease, F, timeout
			if err != nil {
				t.Fatal(err)
			}
			defer cp.Close()
			if _, err := cp.AddTopic(ctx, TopicSpec{Name: topic, State: migration.Proxy}, "test"); err != nil {
				t.Fatal(err)
			}
			// An agent granted a lease, then cut off.
			if resp, err := cp.Heartbeat(ctx, &batonv1.HeartbeatRequest{NodeId: "cut-off", AckedVersion: cp.Version()}); err != nil || !resp.GetGranted() {
				t.Fatalf("heartbeat: %v, %v", resp, err)
			}
			if _, err := cp.Migrate(ctx, topic, "test", allGates...); err != nil {
				t.Fatal(err)
			}
			waitComplete(t, ctx, cp, topic)
		})
	}
}

// waitComplete waits for topic's cutover to complete, failing t with the
// timeout's reason if it rolled back.
func waitComplete(t *testing.T, ctx context.Context, cp *ControlPlane, topic string) {
	t.Helper()
	wait.For(t, time.Minute, topic+" COMPLETE", func() string {
		top, _ := cp.Topic(topic)
		if top.State == migration.Proxy {
			evs, _ := cp.Events(ctx, topic, 0)
			for _, e := range evs {
				if e.Kind == EventTimedOut || e.Kind == EventFailed {
					t.Fatalf("rolled back: %s", e.Reason)
				}
			}
		}
		if top.State != migration.Complete {
			return top.State.String()
		}
		return ""
	})
}
