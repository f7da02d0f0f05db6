package controlplane

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-kafka/baton/controlplane/cutover"
	"github.com/baton-kafka/baton/migration"
)

// stepDoneFaults is a Store whose writes of a topic's COMPLETE and PROXY
// fail once the cutover stored cutover.StepDone (etcd unavailable for a moment).
// With applyProxy, a PROXY write is applied and answered with an error
// anyway (etcd applied a request the client gave up on, as store.go's
// AppendEvent describes). atStepDone runs once, right after cutover.StepDone is
// stored.
type stepDoneFaults struct {
	Store
	failComplete  bool
	applyComplete bool // COMPLETE applied, and answered with an error
	applyProxy    bool
	atStepDone    func()

	mu          sync.Mutex
	stepDone    bool
	proxyFailed chan struct{}
	once        sync.Once
}

var errEtcdDown = errors.New("etcdserver: request timed out (test)")

func (s *stepDoneFaults) PutTopic(ctx context.Context, t Topic, version uint64) error {
	if err, faulty := s.fault(t, func() error { return s.Store.PutTopic(ctx, t, version) }); faulty {
		return err
	}
	err := s.Store.PutTopic(ctx, t, version)
	if err == nil && t.State == migration.Migrating && t.Cutover != nil && t.Cutover.Step == cutover.StepDone {
		s.mu.Lock()
		first := !s.stepDone
		s.stepDone = true
		s.mu.Unlock()
		if first && s.atStepDone != nil {
			s.atStepDone()
		}
	}
	return err
}

func (s *stepDoneFaults) PutTopicUndecided(ctx context.Context, t Topic, version uint64, attempt int, decide bool) (Topic, error) {
	var stored Topic
	if err, faulty := s.fault(t, func() (err error) {
		stored, err = s.Store.PutTopicUndecided(ctx, t, version, attempt, decide)
		return err
	}); faulty {
		return stored, err
	}
	return s.Store.PutTopicUndecided(ctx, t, version, attempt, decide)
}

// fault fails a write of COMPLETE or PROXY once cutover.StepDone is stored,
// applying it first (apply) where the test says so; faulty reports whether
// it did.
func (s *stepDoneFaults) fault(t Topic, apply func() error) (err error, faulty bool) {
	s.mu.Lock()
	armed := s.stepDone
	s.mu.Unlock()
	switch {
	case armed && t.State == migration.Complete && (s.failComplete || s.applyComplete):
		if s.applyComplete {
			if err := apply(); err != nil {
				return err, true
			}
		}
		return errEtcdDown, true
	case armed && t.State == migration.Proxy:
		if s.applyProxy {
			if err := apply(); err != nil {
				return err, true
			}
		}
		s.once.Do(func() { close(s.proxyFailed) })
		return errEtcdDown, true
	}
	return nil, false
}

// offsetClock is the wall clock plus an offset a test moves forward.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

func storedTopic(t *testing.T, ctx context.Context, st Store, name string) Topic {
	t.Helper()
	_, topics, _, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(topics, func(t Topic) bool { return t.Name == name })
	if i < 0 {
		t.Fatalf("%s not stored", name)
	}
	return topics[i]
}

// runStepDone starts a control plane on faults, and a cutover of topic
// that stores cutover.StepDone and then ends, its rollback's PROXY write failed.
func runStepDone(t *testing.T, ctx context.Context, r *memRepl, faults *stepDoneFaults, topic string, extra ...Opt) *ControlPlane {
	t.Helper()
	first, err := New(ctx, memOpts(faults, r, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(first.Close)
	r.produce(topic, 30)
	if _, err := first.AddTopic(ctx, TopicSpec{Name: topic, State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	p := &plane{cp: first}
	migrateWhenGateOpens(t, ctx, p, topic)
	select {
	case <-faults.proxyFailed:
	case <-ctx.Done():
		t.Fatalf("the rollback never wrote PROXY: %v", eventLines(t, ctx, p, topic))
	}
	eventually(t, ctx, "the cutover goroutine ended", func() bool {
		first.mu.Lock()
		defer first.mu.Unlock()
		_, running := first.runs[topic]
		return !running
	})
	return first
}

// TestResumeCompletesACutoverThatTimedOut: a cutover stores cutover.StepDone; then
// its deadline passes before COMPLETE is stored, so it times out (event
// timed_out) and rolls back. The rollback's PROXY write fails (etcd down
// for a moment); the topic stays MIGRATING "until the next start" (the
// log says: the next start rolls it back). The next start stores COMPLETE
// anyway, after the deadline (docs/design.md §6 step 5: COMPLETE is stored
// only if the deadline has not passed) and after the operator was told it
// timed out and was rolled back.
func TestResumeCompletesACutoverThatTimedOut(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newMemRepl()
	st := NewMemStore()
	clock := &offsetClock{}
	faults := &stepDoneFaults{Store: st, proxyFailed: make(chan struct{}),
		atStepDone: func() { clock.off.Store(int64(2 * tTimeout)) }} // the deadline passes right after cutover.StepDone
	first := runStepDone(t, ctx, r, faults, "late", Clock(clock.now))
	p := &plane{cp: first}
	if !slices.Contains(kinds(t, ctx, p, "late"), EventTimedOut) {
		t.Fatalf("want a timed_out cutover: %v", eventLines(t, ctx, p, "late"))
	}
	co := storedTopic(t, ctx, st, "late").Cutover
	first.Close()

	second, err := New(ctx, memOpts(st, r, Clock(clock.now))...)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	top, _ := second.Topic("late")
	if top.State == migration.Complete {
		t.Fatalf("a cutover that timed out (deadline %s, now %s past it) and whose rollback was under way was completed by the next start; events: %v",
			co.Deadline.Format(time.RFC3339Nano), clock.now().Sub(co.Deadline).Round(time.Millisecond), eventLines(t, ctx, &plane{cp: second}, "late"))
	}
}

// TestMigratingStepDoneKeepsItsSourceBatches: a cutover stores cutover.StepDone
// with the stopped replication's last idempotent batches; storing
// COMPLETE fails, and so does the rollback's PROXY (etcd down for a
// moment), so the topic stays MIGRATING in the running control plane. Its
// periodic dropSourceBatches (Run, every lease/3) must not write the
// MIGRATING topic: no one but its cutover does (a takeover completing at
// cutover.StepDone reads the batches from it: TestTakeoverCompletesACutoverWithEveryStepDone).
func TestMigratingStepDoneKeepsItsSourceBatches(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newMemRepl()
	st := NewMemStore()
	faults := &stepDoneFaults{Store: st, failComplete: true, proxyFailed: make(chan struct{})}
	first := runStepDone(t, ctx, r, faults, "kept")
	before := storedTopic(t, ctx, st, "kept")
	if before.State != migration.Migrating || before.Cutover == nil || len(before.SourceBatches) == 0 {
		t.Fatalf("stored: %+v; want MIGRATING with source batches", before)
	}
	first.dropSourceBatches(ctx) // Run's tick
	after := storedTopic(t, ctx, st, "kept")
	if after.State != migration.Migrating || len(after.SourceBatches) != len(before.SourceBatches) {
		t.Fatalf("after dropSourceBatches: %s with %d source batches; want MIGRATING with %d, untouched", after.State,
			len(after.SourceBatches), len(before.SourceBatches))
	}
}

// TestRollbackProxyNotOverwrittenByStepDone: the rollback of a cutover at
// cutover.StepDone writes PROXY; etcd applies it but the client gets an error
// (an ambiguous write), so the control plane keeps the topic MIGRATING at
// cutover.StepDone in memory, with replication stopped. Followers (and a new
// leader) see PROXY: agents forward the topic to the source again. The
// running control plane's next write of the topic (dropSourceBatches'
// tick) must not put MIGRATING at cutover.StepDone back over that PROXY: the next
// start would then complete the topic without the records written to the
// source under PROXY meanwhile (replication never restarted).
func TestRollbackProxyNotOverwrittenByStepDone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newMemRepl()
	st := NewMemStore()
	faults := &stepDoneFaults{Store: st, failComplete: true, applyProxy: true, proxyFailed: make(chan struct{})}
	first := runStepDone(t, ctx, r, faults, "flip")
	if got := storedTopic(t, ctx, st, "flip"); got.State != migration.Proxy {
		t.Fatalf("stored after the rollback: %s; want PROXY (applied, answered with an error)", got.State)
	}
	// Agents that got PROXY from a follower forward to the source again.
	r.produce("flip", 10)
	srcEnds, err := r.SourceEndOffsets(ctx, "flip")
	if err != nil {
		t.Fatal(err)
	}

	first.dropSourceBatches(ctx) // Run's tick
	after := storedTopic(t, ctx, st, "flip")
	copied := r.progressOf("flip") // the destination, before a start copies again
	first.Close()
	second, err := New(ctx, memOpts(st, r)...)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	top, _ := second.Topic("flip")
	if after.State != migration.Proxy || top.State == migration.Complete {
		var lost int64
		for p, o := range copied {
			lost += srcEnds[p] - o
		}
		t.Fatalf("the rollback's PROXY was overwritten by %s at step %q (dropSourceBatches wrote the in-memory topic), and the next start "+
			"made it %s; %d records written to the source under PROXY are not on the destination (source ends %v)",
			after.State, stepOf(after), top.State, lost, srcEnds)
	}
}

func stepOf(t Topic) string {
	if t.Cutover == nil {
		return ""
	}
	return string(t.Cutover.Step)
}

// TestAmbiguousCompleteIsKept: etcd stores a cutover's COMPLETE but the
// write is answered with an error (the client gave up on it). The
// rollback that follows must not overwrite it with PROXY: agents of a
// follower may already route to the destination. It finds the attempt
// decided, and the control plane takes the COMPLETE.
func TestAmbiguousCompleteIsKept(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newMemRepl()
	st := NewMemStore()
	faults := &stepDoneFaults{Store: st, applyComplete: true, proxyFailed: make(chan struct{})}
	cp, err := New(ctx, memOpts(faults, r)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	r.produce("amb", 30)
	if _, err := cp.AddTopic(ctx, TopicSpec{Name: "amb", State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	p := &plane{cp: cp}
	migrateWhenGateOpens(t, ctx, p, "amb")
	waitState(t, ctx, p, "amb", migration.Complete)
	if stored := storedTopic(t, ctx, st, "amb"); stored.State != migration.Complete || len(stored.SourceBatches) == 0 {
		t.Fatalf("stored: %s with %d source batches; want COMPLETE with the batches", stored.State, len(stored.SourceBatches))
	}
	wantEvents(t, ctx, p, "amb", EventInitiated, EventGuardLifted, EventFailed, EventCompleted)
	if got := kinds(t, ctx, p, "amb"); slices.Contains(got, EventRolledBack) {
		t.Errorf("rolled back over a stored COMPLETE: %v", eventLines(t, ctx, p, "amb"))
	}
	select {
	case <-faults.proxyFailed:
		t.Error("the rollback wrote PROXY over the stored COMPLETE")
	default:
	}
}
