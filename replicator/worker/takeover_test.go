package worker_test

// Takeover tests: real WorkerPool, real Workers, real
// replicators and kfake clusters; the gRPC hop is a direct call to
// WorkerPool.Work that a test can cut (a worker out of reach of the
// control plane).

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/replicator"
	"github.com/baton-kafka/baton/replicator/worker"
)

const (
	revLease  = 600 * time.Millisecond
	revFlight = 200 * time.Millisecond
)

// link is a worker's connection to the control plane: WorkerPool.Work,
// called directly, or Unavailable while down.
type link struct {
	pool *replication.WorkerPool
	down atomic.Bool
}

func (l *link) Work(ctx context.Context, in *batonv1.WorkRequest, _ ...grpc.CallOption) (*batonv1.WorkResponse, error) {
	if l.down.Load() {
		return nil, status.Error(codes.Unavailable, "control plane out of reach (test)")
	}
	return l.pool.Work(ctx, in)
}

type node struct {
	id     string
	w      *worker.Worker
	r      *replicator.Replicator
	link   *link
	cancel context.CancelFunc
	done   chan struct{}
}

// startNode runs a worker with a replicator (opts added to the test's)
// until the test ends.
func startNode(t *testing.T, id string, pool *replication.WorkerPool, src, dst []string, opts ...replicator.Opt) *node {
	t.Helper()
	l := &link{pool: pool}
	w, err := worker.New(id, l, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]replicator.Opt{replicator.Source(src...), replicator.Destination(dst...),
		replicator.SampleInterval(50 * time.Millisecond), replicator.GroupSyncInterval(0), replicator.ConfigSyncInterval(0),
		replicator.Leases(w)}, opts...)
	r, err := replicator.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	w.Copier = r
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{id: id, w: w, r: r, link: l, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(n.done)
		rdone := make(chan struct{})
		go func() { defer close(rdone); _ = r.Run(ctx) }()
		_ = w.Run(ctx)
		<-rdone
	}()
	t.Cleanup(n.kill)
	return n
}

func (n *node) kill() {
	n.cancel()
	<-n.done
}

func (n *node) holds(topic string, p int32) bool {
	_, ok := n.w.MayWrite(topic, p)
	return ok
}

type env struct {
	dstCluster *embedded.Cluster // for faults injected into the destination
	src, dst   []string
	pool       *replication.WorkerPool
	sadm       *kadm.Client
	dadm       *kadm.Client
}

// startEnv starts two clusters, creates topic on the source with
// partitions, and a WorkerPool replicating it.
func startEnv(t *testing.T, topic string, partitions int32) *env {
	t.Helper()
	var cs []*embedded.Cluster
	for range 2 {
		c, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(int(partitions)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		cs = append(cs, c)
	}
	e := &env{src: cs[0].Addrs(), dst: cs[1].Addrs(), dstCluster: cs[1]}
	scl, err := kgo.NewClient(kgo.SeedBrokers(e.src...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(scl.Close)
	dcl, err := kgo.NewClient(kgo.SeedBrokers(e.dst...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dcl.Close)
	e.sadm, e.dadm = kadm.NewClient(scl), kadm.NewClient(dcl)
	if _, err := e.sadm.CreateTopic(context.Background(), partitions, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	if e.pool, err = replication.NewWorkerPool(e.sadm, revLease, revFlight, 0, slog.Default()); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.Start(topic); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go e.pool.Run(ctx)
	return e
}

func (e *env) end(t *testing.T, adm *kadm.Client, topic string, p int32) int64 {
	t.Helper()
	l, err := adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := l.Lookup(topic, p)
	if !ok || o.Err != nil {
		return -1
	}
	return o.Offset
}

func (e *env) waitDst(t *testing.T, topic string, p int32, want int64) {
	t.Helper()
	wait.For(t, time.Minute, fmt.Sprintf("destination %s/%d at %d", topic, p, want), func() string {
		if got := e.end(t, e.dadm, topic, p); got < want {
			return fmt.Sprintf("at %d", got)
		}
		return ""
	})
}

// settle waits until the copy reached the source's last stable offset of
// topic/p, as the pool hears from the partition's worker, and returns the
// destination's end then: every write of the copy up to there is on D.
func (e *env) settle(t *testing.T, topic string, p int32) int64 {
	t.Helper()
	wait.For(t, time.Minute, fmt.Sprintf("the copy of %s/%d caught up", topic, p), func() string {
		lso, err := e.sadm.ListCommittedOffsets(context.Background(), topic)
		if err != nil {
			return err.Error()
		}
		o, ok := lso.Lookup(topic, p)
		if !ok || o.Err != nil {
			return fmt.Sprintf("source last stable offset: %v", o.Err)
		}
		prog, err := e.pool.Progress(topic)
		if err != nil {
			return err.Error()
		}
		if prog[p] < o.Offset {
			return fmt.Sprintf("copied to %d of %d", prog[p], o.Offset)
		}
		return ""
	})
	return e.end(t, e.dadm, topic, p)
}

func produce(t *testing.T, seeds []string, topic string, n int, prefix string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range n {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Value: []byte(fmt.Sprint(prefix, i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func produceTxns(t *testing.T, seeds []string, topic string, txns, per int) {
	t.Helper()
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic), kgo.TransactionalID("takeover-tx"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range txns {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for j := range per {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("txn %d rec %d", i, j))}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
}

func diverged(n *node, topic string) string {
	for _, ts := range n.r.Status() {
		if ts.Topic != topic {
			continue
		}
		for _, p := range ts.Partitions {
			if p.Diverged != nil {
				return p.Diverged.Error()
			}
		}
	}
	return ""
}

// TestTakeoverReadsTheOffsetMapAgain: a worker that takes over a
// partition of a mapped topic (transactions) reads the offset map segments
// the previous holder wrote since it loaded the map, and resumes at the
// right source offset: no record is copied twice.
func TestTakeoverReadsTheOffsetMapAgain(t *testing.T) {
	t.Parallel()
	const topic = "txn"
	e := startEnv(t, topic, 1)
	a := startNode(t, "a", e.pool, e.src, e.dst)
	wait.For(t, 30*time.Second, "a holds txn/0", func() string {
		if !a.holds(topic, 0) {
			return "not yet"
		}
		return ""
	})
	b := startNode(t, "b", e.pool, e.src, e.dst) // its map is loaded now: empty

	// 3 committed transactions of 10: 30 records, 3 control records.
	produceTxns(t, e.src, topic, 3, 10)
	e.waitDst(t, topic, 0, 30)

	a.kill()
	wait.For(t, 30*time.Second, "b takes txn/0 over", func() string {
		if !b.holds(topic, 0) {
			return "not yet"
		}
		return ""
	})
	produce(t, e.src, topic, 5, "plain ")
	e.waitDst(t, topic, 0, 35)
	got := e.settle(t, topic, 0)
	rep, err := replicator.Verify(context.Background(), e.src, e.dst, topic, replicator.DefaultOffsetMapTopic)
	if err != nil {
		t.Fatal(err)
	}
	// What a cutover would see: no divergence, and a Stop that succeeds.
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	final, _, stopErr := e.pool.Stop(sctx, topic)
	if got != 35 || len(rep.Mismatches) > 0 {
		t.Errorf("destination holds %d records, want the 35 committed on the source; verify: %d mismatches (first: %v); "+
			"b diverged: %q; pool Diverged: %v; pool Stop: %v, %v (the cutover would complete)",
			got, len(rep.Mismatches), first(rep.Mismatches), diverged(b, topic), e.pool.Diverged(topic), final, stopErr)
	}
}

func first[T any](s []T) any {
	if len(s) == 0 {
		return nil
	}
	return s[0]
}

// TestRegainedPartitionResumesFromTheDestination: a partition that comes
// back to a worker after another worker copied more resumes from what the
// destination holds, not from the position the worker had: nothing lands
// twice and nothing diverges.
func TestRegainedPartitionResumesFromTheDestination(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	e := startEnv(t, topic, 1)
	a := startNode(t, "a", e.pool, e.src, e.dst)
	wait.For(t, 30*time.Second, "a holds orders/0", func() string {
		if !a.holds(topic, 0) {
			return "not yet"
		}
		return ""
	})
	b := startNode(t, "b", e.pool, e.src, e.dst)
	produce(t, e.src, topic, 20, "first ")
	e.waitDst(t, topic, 0, 20)
	e.settle(t, topic, 0)

	// a is out of reach of the control plane for a while: its lease runs
	// out and b gets the partition.
	a.link.down.Store(true)
	wait.For(t, 30*time.Second, "b takes orders/0 over", func() string {
		if !b.holds(topic, 0) {
			return "not yet"
		}
		return ""
	})
	a.link.down.Store(false)
	produce(t, e.src, topic, 20, "second ")
	e.waitDst(t, topic, 0, 40)
	e.settle(t, topic, 0)

	// b dies: the partition goes back to a.
	b.kill()
	wait.For(t, 30*time.Second, "a holds orders/0 again", func() string {
		if !a.holds(topic, 0) {
			return "not yet"
		}
		return ""
	})
	produce(t, e.src, topic, 5, "third ")
	e.waitDst(t, topic, 0, 45)
	got := e.settle(t, topic, 0)
	rep, err := replicator.Verify(context.Background(), e.src, e.dst, topic, replicator.DefaultOffsetMapTopic)
	if err != nil {
		t.Fatal(err)
	}
	if d := diverged(a, topic); got != 45 || d != "" || len(rep.Mismatches) > 0 {
		t.Errorf("destination end %d (source 45); verify: %d mismatches (first: %v); a reports diverged: %q",
			got, len(rep.Mismatches), first(rep.Mismatches), d)
	}
}

// fakeCopier is a Copier that copies nothing: the lease protocol only.
type fakeCopier struct{}

func (fakeCopier) Start(string) {}
func (fakeCopier) DestinationLatency(string) (replicator.Latency, bool) {
	return replicator.Latency{}, false
}
func (fakeCopier) Forget(string) error              { return nil }
func (fakeCopier) SetMigrating(string, bool) error  { return nil }
func (fakeCopier) Status() []replicator.TopicStatus { return nil }
func (fakeCopier) Stop(context.Context, string) (replicator.Stopped, error) {
	return replicator.Stopped{}, nil
}

// swLink is a link whose control plane can be switched (a new leader).
type swLink struct {
	pool atomic.Pointer[replication.WorkerPool]
	down atomic.Bool
}

func (l *swLink) Work(ctx context.Context, in *batonv1.WorkRequest, _ ...grpc.CallOption) (*batonv1.WorkResponse, error) {
	if l.down.Load() {
		return nil, status.Error(codes.Unavailable, "control plane out of reach (test)")
	}
	return l.pool.Load().Work(ctx, in)
}

func startFakeWorker(t *testing.T, id string, pool *replication.WorkerPool) (*worker.Worker, *swLink) {
	t.Helper()
	l := &swLink{}
	l.pool.Store(pool)
	w, err := worker.New(id, l, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	w.Copier = fakeCopier{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return w, l
}

// TestNewLeaderKeepsOnlyRunningLeases: a worker whose lease ran out (cut
// off; the old leader gave its partition to another worker) does not claim
// the partition at a new leader in its quiet time, so the new leader keeps
// it for the worker whose lease still runs: never two writers.
func TestNewLeaderKeepsOnlyRunningLeases(t *testing.T) {
	t.Parallel()
	const (
		topic  = "t"
		lease  = 3 * time.Second
		flight = 500 * time.Millisecond
	)
	e := startEnv(t, topic, 1)
	newPool := func() *replication.WorkerPool {
		p, err := replication.NewWorkerPool(e.sadm, lease, flight, 0, slog.Default())
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(topic); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go p.Run(ctx)
		return p
	}
	old := newPool()
	w1, l1 := startFakeWorker(t, "w1", old)
	holds := func(w *worker.Worker) bool { _, ok := w.MayWrite(topic, 0); return ok }
	wait.For(t, 30*time.Second, "w1 holds t/0", func() string {
		if !holds(w1) {
			return "not yet"
		}
		return ""
	})
	w2, l2 := startFakeWorker(t, "w2", old)
	l1.down.Store(true) // w1 cut off: the old leader gives t/0 to w2
	wait.For(t, 30*time.Second, "w2 holds t/0", func() string {
		if !holds(w2) {
			return "not yet"
		}
		return ""
	})

	// The old leader dies; a new one starts. w2 has not reached it yet
	// (its lease from the old leader runs on); w1 reaches it first.
	cur := newPool()
	l2.down.Store(true)
	l2.pool.Store(cur)
	wait.For(t, 10*time.Second, "the new leader read t's partitions", func() string {
		if _, err := cur.Progress(topic); err != nil {
			return err.Error()
		}
		return ""
	})
	l1.pool.Store(cur)
	l1.down.Store(false)
	neverBoth(t, w1, w2, topic, "the new leader gave it to w1 on w1's stale report while w2's lease from the old leader runs")
}

// neverBoth waits until w2 no longer may write topic/0 (its lease from the
// old leader ran out), failing with why if w1 and w2 ever may both.
func neverBoth(t *testing.T, w1, w2 *worker.Worker, topic, why string) {
	t.Helper()
	holds := func(w *worker.Worker) bool { _, ok := w.MayWrite(topic, 0); return ok }
	wait.For(t, time.Minute, "w2's lease from the old leader to run out", func() string {
		if holds(w1) && holds(w2) {
			t.Fatalf("w1 and w2 may both write %s/0: %s", topic, why)
		}
		if holds(w2) {
			return "w2 may still write"
		}
		return ""
	})
}
