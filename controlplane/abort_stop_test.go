package controlplane

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
)

// stallLift is a destination write guard whose first Lift is answered
// only when the test releases it (whatever its context says).
type stallLift struct {
	protections
	once             sync.Once
	entered, release chan struct{}
}

func (g *stallLift) Lift(context.Context, string) error {
	g.once.Do(func() {
		close(g.entered)
		<-g.release
	})
	return nil
}

// An operator's abort is carried out though the control plane starts to
// stop before the cutover sees it: the cutover rolls back (aborted, with
// the operator's reason), as it did before the core. Taken for the stop
// instead, the topic stays MIGRATING, Abort answers without an error, and
// the next start decides from the stored step: at StepDone it would
// complete the cutover the operator aborted.
func TestAbortBeforeAStopRollsBack(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := NewMemStore()
	guard := &stallLift{entered: make(chan struct{}), release: make(chan struct{})}
	start := func() *ControlPlane {
		cp, err := New(ctx, WithStore(st), WithReplication(&endsClock{}), WithSourceFence(NoFence{}), WithGuard(guard), Logger(quiet),
			CutoverTimeout(time.Minute), Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"}))
		if err != nil {
			t.Fatal(err)
		}
		return cp
	}
	cp := start()
	if _, err := cp.AddTopic(ctx, TopicSpec{Name: topic, State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Migrate(ctx, topic, "test", allGates...); err != nil {
		t.Fatal(err)
	}
	select {
	case <-guard.entered:
	case <-ctx.Done():
		t.Fatal("the cutover never lifted the write guard")
	}
	type answer struct {
		top Topic
		err error
	}
	aborted := make(chan answer, 1)
	go func() {
		top, err := cp.Abort(ctx, topic, "operator", "the destination looks wrong")
		aborted <- answer{top, err}
	}()
	wait.For(t, 10*time.Second, "the abort asked", func() string {
		cp.mu.Lock()
		defer cp.mu.Unlock()
		if r := cp.runs[topic]; r == nil || !r.aborted {
			return "not yet"
		}
		return ""
	})
	closed := make(chan struct{})
	go func() {
		cp.Close()
		close(closed)
	}()
	wait.For(t, 10*time.Second, "the control plane stopping", func() string {
		if cp.ctx.Err() == nil {
			return "not yet"
		}
		return ""
	})
	close(guard.release)
	a := <-aborted
	<-closed
	if a.err == nil && a.top.State != migration.Proxy {
		t.Errorf("Abort answered %s (step %v) with no error", a.top.State, a.top.Cutover)
	}
	evs, err := st.Events(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	var said []string
	for _, e := range evs {
		said = append(said, e.Kind)
		if e.Kind == EventAborted && (e.Actor != "operator" || e.Reason != "the destination looks wrong") {
			t.Errorf("aborted by %q: %q, want the operator's", e.Actor, e.Reason)
		}
	}
	if !slices.Contains(said, EventAborted) {
		t.Errorf("events %v: the abort was not carried out", said)
	}
}
