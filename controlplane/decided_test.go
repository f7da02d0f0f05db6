package controlplane

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/migration"
)

// elect waits until s's own term is elected on its etcd and fences s's
// writes on it, as replicas.Campaign does (that package imports this one,
// so its tests cannot call it here); it returns the term's session.
func elect(t *testing.T, ctx context.Context, s *EtcdStore, id string) *concurrency.Session {
	t.Helper()
	session, err := concurrency.NewSession(s.Client(), concurrency.WithTTL(1), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = session.Close() })
	e := concurrency.NewElection(session, "/baton/leader")
	if err := e.Campaign(ctx, id); err != nil {
		t.Fatal(err)
	}
	s.SetFence(clientv3.Compare(clientv3.CreateRevision(e.Key()), "=", e.Rev()))
	return session
}

// noRun waits until no cutover goroutine runs for topic.
func noRun(t *testing.T, ctx context.Context, cp *ControlPlane, topic string) {
	t.Helper()
	eventually(t, ctx, "the cutover of "+topic+" ended", func() bool {
		cp.mu.Lock()
		defer cp.mu.Unlock()
		_, running := cp.runs[topic]
		return !running
	})
}

// TestReaddedTopicCutoverCompletes: a topic is cut over (attempt 1,
// decision key /baton/decided/<topic>/1 created), removed, and added again
// under the same name. Its attempt counter starts over, so its next cutover
// is attempt 1 again: the removal took the old decision key with it, and
// that cutover completes, also across a restart, rather than staying
// MIGRATING for good.
func TestReaddedTopicCutoverCompletes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newMemRepl()
	st := NewMemStore()
	p := startMemPlane(t, ctx, st, "", r)
	r.produce("again", 30)
	if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: "again", State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	migrateWhenGateOpens(t, ctx, p, "again")
	waitState(t, ctx, p, "again", migration.Complete)
	if _, err := p.cp.SetState(ctx, "again", migration.Unmanaged, "test"); err != nil {
		t.Fatal(err)
	}
	// Written while the topic is not managed, for the new attempt to copy.
	// (The double reads no source batches, so no forgotten-producer gate
	// refuses it here as it does on Kafka: migrateWhenGateOpens takes
	// either.)
	r.produce("again", 10)
	if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: "again", State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	migrateWhenGateOpens(t, ctx, p, "again")
	noRun(t, ctx, p.cp, "again")
	got, _ := p.cp.Topic("again")
	stored := storedTopic(t, ctx, st, "again")
	lines := eventLines(t, ctx, p, "again")
	// A restart (or a new leader) rolls a MIGRATING topic back: does it?
	p.stop()
	p2 := startMemPlane(t, ctx, st, "", r)
	after, _ := p2.cp.Topic("again")
	if got.State == migration.Migrating || stored.State == migration.Migrating || after.State == migration.Migrating {
		t.Fatalf("the re-added topic's cutover (attempt %d) ended with the topic %s in memory (step %q), %s in the store (step %q), "+
			"no cutover running; after a restart: %s (step %q): MIGRATING for good; events: %v",
			got.Attempts, got.State, stepOf(got), stored.State, stepOf(stored), after.State, stepOf(after), lines)
	}
}

// recordUndecided records the errors PutTopicUndecided returns.
type recordUndecided struct {
	Store
	mu   sync.Mutex
	errs []error
}

func (s *recordUndecided) PutTopicUndecided(ctx context.Context, t Topic, version uint64, attempt int, decide bool) (Topic, error) {
	got, err := s.Store.PutTopicUndecided(ctx, t, version, attempt, decide)
	s.mu.Lock()
	s.errs = append(s.errs, err)
	s.mu.Unlock()
	return got, err
}

// startSpy counts Start calls once armed.
type startSpy struct {
	Replication
	armed  atomic.Bool
	starts atomic.Int32
}

func (s *startSpy) Start(topic string) error {
	if s.armed.Load() {
		s.starts.Add(1)
	}
	return s.Replication.Start(topic)
}

// TestDeposedLeaderRollbackIsNotLeader: leader A's cutover is mid-way
// when A's term ends; B is elected, finds the topic MIGRATING and rolls it
// back (PROXY, deciding attempt 1). A's cutover then fails (its next step
// write: ErrNotLeader) and A rolls back too. A's PROXY write fails both
// conditions (its term and the decision key): it must be told
// ErrNotLeader, and do nothing more (no replication restarted, no guard
// restored), not take B's decision for its own earlier rollback.
func TestDeposedLeaderRollbackIsNotLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := startKafka(t, ctx)
	a, err := OpenEmbedded(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	b, err := OpenEtcd(ctx, a.Client().Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	la := elect(t, ctx, a, "a")
	paused := &pauseAtStep{Store: a, step: "replicate-to-end", reached: make(chan struct{}), release: make(chan struct{})}
	rec := &recordUndecided{Store: paused}
	spy := &startSpy{Replication: k.repl}
	opts := func(s Store, r Replication) []Opt {
		o := resumeOpts(k, s)
		return append(o, WithReplication(r))
	}
	cpA, err := New(ctx, opts(rec, spy)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cpA.Close)
	k.produce(t, ctx, "dep", 30)
	if _, err := cpA.AddTopic(ctx, TopicSpec{Name: "dep", State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	pA := &plane{cp: cpA}
	migrateWhenGateOpens(t, ctx, pA, "dep")
	cpA.mu.Lock() // before the step: setStep holds cp.mu while paused
	r := cpA.runs["dep"]
	cpA.mu.Unlock()
	select {
	case <-paused.reached:
	case <-ctx.Done():
		t.Fatalf("never reached the step: %v", eventLines(t, ctx, pA, "dep"))
	}
	// A's term ends; B leads and rolls the cutover back.
	if _, err := b.Client().Revoke(ctx, la.Lease()); err != nil {
		t.Fatal(err)
	}
	elect(t, ctx, b, "b")
	cpB, err := New(ctx, resumeOpts(k, b)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cpB.Close)
	if top, _ := cpB.Topic("dep"); top.State != migration.Proxy {
		t.Fatalf("B: %s, want PROXY (rolled back)", top.State)
	}
	spy.armed.Store(true)
	close(paused.release)
	select { // A's cutover goroutine, its rollback included, ended
	case <-r.done:
	case <-ctx.Done():
		t.Fatal("A's cutover never ended")
	}
	eventually(t, ctx, "A's rollback wrote", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.errs) > 0
	})
	rec.mu.Lock()
	errs := slices.Clone(rec.errs)
	rec.mu.Unlock()
	if !errors.Is(errs[len(errs)-1], ErrNotLeader) {
		t.Errorf("the deposed leader's PutTopicUndecided: %v; want ErrNotLeader", errs[len(errs)-1])
	}
	if n := spy.starts.Load(); n > 0 {
		top, _ := cpA.Topic("dep")
		t.Errorf("the deposed leader restarted replication of dep %d time(s) (its topic now %s)", n, top.State)
	}
}

// resumeOpts are the options of a control plane on s and the kfake
// harness's replication, as startPlaneStore's.
func resumeOpts(k *kafkaEnv, s Store, extra ...Opt) []Opt {
	return append([]Opt{WithStore(s), WithReplication(k.repl), LeaseDuration(tLease), ForwardDeadline(tForward),
		CutoverTimeout(tTimeout), Logger(quiet),
		Clusters(&batonv1.Cluster{Name: "source", Bootstrap: k.src.Addrs()}, &batonv1.Cluster{Name: "destination", Bootstrap: k.dst.Addrs()})},
		extra...)
}
