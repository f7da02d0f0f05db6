package controlplane

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/baton-kafka/baton/controlplane/cutover"
	"github.com/baton-kafka/baton/migration"
)

// pauseAtStep is a Store that holds the write of a cutover's step until
// released: the control plane can be stopped right after it.
type pauseAtStep struct {
	Store
	step    cutover.Step
	reached chan struct{}
	release chan struct{}
}

func (s *pauseAtStep) PutTopic(ctx context.Context, t Topic, version uint64) error {
	err := s.Store.PutTopic(ctx, t, version)
	if t.Cutover != nil && t.Cutover.Step == s.step {
		close(s.reached)
		<-s.release
	}
	return err
}

// TestTakeoverCompletesACutoverWithEveryStepDone: a control plane stops
// right after a cutover stored that every step but COMPLETE is done
// (cutover.StepDone: agents drained, replication stopped at the end offsets, the
// guard lifted). The next one to start stores COMPLETE, with the source
// batches of the stopped replication, instead of rolling back; a cutover
// stopped at an earlier step is rolled back (TestCutover, "restart during
// PROXY and during MIGRATING").
func TestTakeoverCompletesACutoverWithEveryStepDone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newMemRepl()
	st := NewMemStore()
	paused := &pauseAtStep{Store: st, step: cutover.StepDone, reached: make(chan struct{}), release: make(chan struct{})}
	first, err := New(ctx, memOpts(paused, r)...)
	if err != nil {
		t.Fatal(err)
	}
	r.produce("resume", 30) // an idempotent producer: its last batches go with COMPLETE
	if _, err := first.AddTopic(ctx, TopicSpec{Name: "resume", State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	p := &plane{cp: first}
	migrateWhenGateOpens(t, ctx, p, "resume")
	select {
	case <-paused.reached:
	case <-ctx.Done():
		t.Fatalf("the cutover never stored step %q: %v", cutover.StepDone, eventLines(t, ctx, p, "resume"))
	}
	closed := make(chan struct{})
	go func() { defer close(closed); first.Close() }()
	eventually(t, ctx, "the first control plane stopping", func() bool { return first.ctx.Err() != nil })
	close(paused.release)
	<-closed
	_, topics, _, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(topics, func(t Topic) bool { return t.Name == "resume" })
	if i < 0 || topics[i].State != migration.Migrating || topics[i].Cutover == nil || topics[i].Cutover.Step != cutover.StepDone ||
		len(topics[i].SourceBatches) == 0 {
		t.Fatalf("stored after the stop: %+v; want MIGRATING at step %q with the source batches", topics, cutover.StepDone)
	}
	batches := topics[i].SourceBatches

	second, err := New(ctx, memOpts(st, r)...)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	top, err := second.Topic("resume")
	if err != nil || top.State != migration.Complete || top.Cutover != nil {
		t.Fatalf("after the takeover: %+v, %v; want COMPLETE", top, err)
	}
	if !slices.Equal(top.SourceBatches, batches) || top.SourceBatchesUntil.IsZero() {
		t.Errorf("COMPLETE carries %d source batches (until %v), the stopped replication %d", len(top.SourceBatches),
			top.SourceBatchesUntil, len(batches))
	}
	p2 := &plane{cp: second}
	wantEvents(t, ctx, p2, "resume", EventInitiated, EventDrained, EventReplStopped, EventGuardLifted, EventRecovered, EventCompleted)
	if slices.Contains(kinds(t, ctx, p2, "resume"), EventRolledBack) {
		t.Errorf("rolled back: %v", eventLines(t, ctx, p2, "resume"))
	}
}
