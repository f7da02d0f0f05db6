package controlplane

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
)

// wakes counts a cutover's polls of a condition (a fence check, a read of
// replication's progress) against the agent reports sent, and the polls
// that came with no report since the one before: with the poll interval
// far longer than the test, only a report wakes a wait.
type wakes struct {
	mu        sync.Mutex
	reports   int // agent reports sent so far
	polls     int
	lastSeen  int // reports at the last poll
	unwoken   int // polls with no report since the last
	satisfied bool
}

// poll notes one poll and says whether the condition holds.
func (w *wakes) poll() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.polls > 0 && w.reports == w.lastSeen {
		w.unwoken++
	}
	w.polls++
	w.lastSeen = w.reports
	return w.satisfied
}

func (w *wakes) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.polls
}

// wakeFence is a source fence that each source broker enforces once the
// test says so.
type wakeFence struct {
	clockedFence
	w *wakes
}

func (f *wakeFence) Enforced(context.Context, string) (bool, string, error) {
	if !f.w.poll() {
		return false, "broker 2 not enforcing the fence yet", nil
	}
	return true, "", nil
}

// wakeCopy is a replication that reaches the source's end offsets (1 on
// partition 0) once the test says so.
type wakeCopy struct {
	caughtUp
	w *wakes
}

func (r wakeCopy) SourceEndOffsets(context.Context, string) (map[int32]int64, error) {
	return map[int32]int64{0: 1}, nil
}

func (r wakeCopy) Progress(string) (map[int32]int64, error) {
	if r.w.poll() {
		return map[int32]int64{0: 1}, nil
	}
	return map[int32]int64{0: 0}, nil
}

func (r wakeCopy) Stop(context.Context, string) (map[int32]int64, []replicator.SourceBatch, error) {
	return map[int32]int64{0: 1}, nil, nil
}

// A cutover's waits after the drain (every source broker enforcing the
// fence, replication reaching the end offsets) poll again when an agent
// reports or a poll interval passes, as the drain's does. A wait that
// keeps the signal of a report it has already seen polls without end: a
// DescribeAcls to every source broker, or a read of the copy's progress,
// in a loop, for as long as the cutover waits.
func TestCutoverWaitsAfterTheDrainWakeOnReports(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	for _, tc := range []struct {
		name  string
		start func(*wakes) []Opt
	}{
		{"every source broker enforcing the fence", func(w *wakes) []Opt {
			return []Opt{WithSourceFence(&wakeFence{w: w}), WithReplication(&endsClock{})}
		}},
		{"replication reaching the end offsets", func(w *wakes) []Opt {
			return []Opt{WithSourceFence(NoFence{}), WithReplication(wakeCopy{w: w})}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			w := &wakes{}
			cp, err := New(ctx, append(tc.start(w), WithStore(NewMemStore()), Logger(quiet), PollInterval(time.Hour),
				ForwardDeadline(100*time.Millisecond), CutoverTimeout(20*time.Second),
				Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"}))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cp.Close()
			if _, err := cp.AddTopic(ctx, TopicSpec{Name: topic, State: migration.Proxy}, "test"); err != nil {
				t.Fatal(err)
			}
			if _, err := cp.Migrate(ctx, topic, "test", allGates...); err != nil {
				t.Fatal(err)
			}
			report := func() {
				w.mu.Lock()
				w.reports++
				w.mu.Unlock()
				if _, err := cp.Heartbeat(ctx, &batonv1.HeartbeatRequest{NodeId: "agent-1", AckedVersion: cp.Version()}); err != nil {
					t.Fatal(err)
				}
			}
			// Two reports, each polled after; then the condition holds and
			// a third report wakes the wait that finds it.
			for polls := 1; polls <= 3; polls++ {
				wait.For(t, 20*time.Second, fmt.Sprintf("poll %d", polls), func() string {
					if n := w.count(); n < polls {
						return fmt.Sprintf("%d polls", n)
					}
					return ""
				})
				if polls == 3 {
					w.mu.Lock()
					w.satisfied = true
					w.mu.Unlock()
				}
				report()
			}
			waitComplete(t, ctx, cp, topic)
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.unwoken > 0 {
				t.Errorf("%d of %d polls came with no agent report since the one before (poll interval an hour): "+
					"the wait does not wait", w.unwoken, w.polls)
			}
		})
	}
}

// notifyingCopy is a wakeCopy that tells of its progress (ProgressNotifier),
// as the replicator and the worker pool do.
type notifyingCopy struct {
	wakeCopy
	mu sync.Mutex
	f  func(string)
}

func (r *notifyingCopy) OnProgress(f func(string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.f = f
}

// advance lets the copy reach the end offsets and tells the control plane.
func (r *notifyingCopy) advance(topic string) {
	r.w.mu.Lock()
	r.w.satisfied = true
	r.w.mu.Unlock()
	r.mu.Lock()
	f := r.f
	r.mu.Unlock()
	if f != nil {
		f(topic)
	}
}

// The cutover's wait for the copy to reach the source's end offsets wakes
// when the copy advances: with the poll interval an hour and no agent
// reporting, the progress the replication tells of completes the cutover.
func TestCutoverCatchUpWakesOnProgress(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := &wakes{}
	repl := &notifyingCopy{wakeCopy: wakeCopy{w: w}}
	cp, err := New(ctx, WithStore(NewMemStore()), Logger(quiet), PollInterval(time.Hour), WithSourceFence(NoFence{}),
		WithReplication(repl), ForwardDeadline(100*time.Millisecond), CutoverTimeout(20*time.Second),
		Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"}))
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	if _, err := cp.AddTopic(ctx, TopicSpec{Name: topic, State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	// Progress told of before the cutover waits for it wakes nothing.
	repl.mu.Lock()
	f := repl.f
	repl.mu.Unlock()
	if f == nil {
		t.Fatal("New did not ask the replication to tell of its progress (OnProgress)")
	}
	f(topic)
	if _, err := cp.Migrate(ctx, topic, "test", allGates...); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "the cutover reading the copy's progress", func() string {
		if n := w.count(); n < 1 {
			return fmt.Sprintf("%d reads", n)
		}
		return ""
	})
	repl.advance(topic)
	waitComplete(t, ctx, cp, topic)
	if n := w.count(); n != 2 {
		t.Errorf("the copy's progress was read %d times, want 2: once behind, once at the end it told of", n)
	}
}
