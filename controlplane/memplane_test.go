package controlplane

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/replicator"
)

// The second harness: a real ControlPlane on a MemStore (package storetest
// holds it to the etcd store's contract) and memRepl, a double of the
// Replication it reads, for the tests whose subject is the control plane's
// own rules, not Kafka's or etcd's behaviour. Agents are the same
// stand-ins, over the same gRPC lease and xDS services.

// memRepl is a Replication in memory: the test sets each topic's source
// end offsets, copy progress and lag, and reads what the
// control plane called. A topic is copied as it is produced (produce)
// unless paused; a topic it was never told of has no lag to measure.
type memRepl struct {
	mu     sync.Mutex
	topics map[string]*memTopic
	calls  []string
	notify func(string)
}

// memTopic is one topic's copy.
type memTopic struct {
	ends, progress map[int32]int64
	lag            time.Duration
	lagErr         error
	paused         bool
	batches        []replicator.SourceBatch
}

var (
	_ Replication      = (*memRepl)(nil)
	_ ProgressNotifier = (*memRepl)(nil)
)

// memPartitions is how many partitions a memRepl topic has, as many as
// the Kafka harness's clusters give a topic.
const memPartitions = 2

func newMemRepl() *memRepl { return &memRepl{topics: map[string]*memTopic{}} }

// topic returns name's copy, made caught up and empty; r.mu is held.
func (r *memRepl) topic(name string) *memTopic {
	t, ok := r.topics[name]
	if !ok {
		t = &memTopic{ends: map[int32]int64{}, progress: map[int32]int64{}}
		for p := range int32(memPartitions) {
			t.ends[p], t.progress[p] = 0, 0
		}
		r.topics[name] = t
	}
	return t
}

func (r *memRepl) record(format string, args ...any) {
	r.calls = append(r.calls, fmt.Sprintf(format, args...))
}

// do changes topic under the lock and then tells the control plane the
// copy may have advanced, as the replicator does.
func (r *memRepl) do(topic string, f func(t *memTopic)) {
	r.mu.Lock()
	f(r.topic(topic))
	n := r.notify
	r.mu.Unlock()
	if n != nil {
		n(topic)
	}
}

// produce writes n records to topic's source, round robin over its
// partitions; the copy keeps up unless paused. Each record is one batch
// of one idempotent producer, kept (at most 5 a partition, as the
// replicator keeps) for Stop to return once copied.
func (r *memRepl) produce(topic string, n int) {
	r.do(topic, func(t *memTopic) {
		for i := range n {
			p := int32(i % memPartitions)
			t.ends[p]++
			if !t.paused {
				t.copyTo(p, t.ends[p])
			}
		}
	})
}

// copyTo copies partition p up to offset next.
func (t *memTopic) copyTo(p int32, next int64) {
	for o := t.progress[p]; o < next; o++ {
		t.batches = append(t.batches, replicator.SourceBatch{Partition: p, ProducerID: 1, BaseSeq: int32(o), Records: 1, Offset: o, Copied: time.Now()})
	}
	t.progress[p] = next
	var kept []replicator.SourceBatch
	per := map[int32]int{}
	for i := len(t.batches) - 1; i >= 0; i-- {
		if b := t.batches[i]; per[b.Partition] < 5 {
			per[b.Partition]++
			kept = append([]replicator.SourceBatch{b}, kept...)
		}
	}
	t.batches = kept
}

// produceTo writes n records to partition p of topic's source, as
// produce.
func (r *memRepl) produceTo(topic string, p int32, n int) {
	r.do(topic, func(t *memTopic) {
		t.ends[p] += int64(n)
		if !t.paused {
			t.copyTo(p, t.ends[p])
		}
	})
}

// pause stops copying topic (its lag then grows); resume, or a Start,
// copies it to its ends again.
func (r *memRepl) pause(topic string) {
	r.do(topic, func(t *memTopic) { t.paused, t.lag = true, time.Minute })
}

// setEnds sets source end offsets of topic without copying up to them.
func (r *memRepl) setEnds(topic string, ends map[int32]int64) {
	r.do(topic, func(t *memTopic) { maps.Copy(t.ends, ends) })
}

// catchUp copies topic to its ends and sets its lag zero.
func (r *memRepl) catchUp(topic string) {
	r.do(topic, func(t *memTopic) {
		t.paused, t.lag, t.lagErr = false, 0, nil
		for p, e := range t.ends {
			t.copyTo(p, e)
		}
	})
}

// setLagErr makes topic's lag unmeasurable with err (nil: measurable).
func (r *memRepl) setLagErr(topic string, err error) {
	r.do(topic, func(t *memTopic) { t.lagErr = err })
}

// progressOf returns topic's copy progress.
func (r *memRepl) progressOf(topic string) map[int32]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.topic(topic).progress)
}

// called returns the calls made so far, as "Stop orders", in order.
func (r *memRepl) called() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

// Start implements Replication: it copies topic (again) to its ends.
func (r *memRepl) Start(topic string) error {
	r.mu.Lock()
	r.record("Start %s", topic)
	r.mu.Unlock()
	r.catchUp(topic)
	return nil
}

// Stop implements Replication.
func (r *memRepl) Stop(_ context.Context, topic string) (map[int32]int64, []replicator.SourceBatch, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record("Stop %s", topic)
	t := r.topic(topic)
	t.paused = true
	return maps.Clone(t.progress), append([]replicator.SourceBatch(nil), t.batches...), nil
}

// SetMigrating implements Replication.
func (r *memRepl) SetMigrating(topic string, m bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record("SetMigrating %s %v", topic, m)
	return nil
}

// Lag implements Replication.
func (r *memRepl) Lag(topic string) (time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.topics[topic]
	switch {
	case !ok:
		return 0, fmt.Errorf("%w: %s", replication.ErrNotReady, topic)
	case t.lagErr != nil:
		return 0, t.lagErr
	}
	return t.lag, nil
}

// Progress implements Replication.
func (r *memRepl) Progress(topic string) (map[int32]int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.topic(topic).progress), nil
}

// SourceEndOffsets implements Replication.
func (r *memRepl) SourceEndOffsets(_ context.Context, topic string) (map[int32]int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record("SourceEndOffsets %s", topic)
	return maps.Clone(r.topic(topic).ends), nil
}

// Diverged implements Replication: no memRepl destination diverges.
func (r *memRepl) Diverged(string) map[int32]string { return nil }

// OnProgress implements ProgressNotifier.
func (r *memRepl) OnProgress(f func(string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notify = f
}

// memOpts are the options of a control plane on st and r: the Kafka
// harness's, but for the store, the replication and the clusters.
func memOpts(st Store, r Replication, extra ...Opt) []Opt {
	return append([]Opt{WithStore(st), WithReplication(r), LeaseDuration(tLease), ForwardDeadline(tForward),
		CutoverTimeout(tTimeout), Logger(quiet),
		Clusters(&batonv1.Cluster{Name: "source", Bootstrap: []string{"source:9092"}},
			&batonv1.Cluster{Name: "destination", Bootstrap: []string{"destination:9092"}})}, extra...)
}

// startMemPlane is the Kafka harness's plane on st and r: a control
// plane serving the lease and xDS services on addr ("": any port). The
// store outlives it, as etcd does, for a restart to find what it stored.
func startMemPlane(t *testing.T, ctx context.Context, st *MemStore, addr string, r *memRepl, opts ...Opt) *plane {
	t.Helper()
	cp, err := New(ctx, memOpts(st, r, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	cp.Register(g)
	go func() { _ = g.Serve(ln) }()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = cp.Run(rctx) }()
	p := &plane{cp: cp, mem: st, addr: ln.Addr().String()}
	var once sync.Once
	p.stop = func() { once.Do(func() { g.Stop(); cancel(); <-done; cp.Close() }) }
	t.Cleanup(p.stop)
	return p
}

// TestMemRepl pins what the converted tests rely on the double to do as
// the replicator does: copy as produced, stop copying at Stop (and when
// paused) with the last 5 batches a partition copied, copy to the ends
// again at Start, and tell each advance; and it records the calls in
// order.
func TestMemRepl(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newMemRepl()
	var told []string
	r.OnProgress(func(topic string) { told = append(told, topic) })
	if _, err := r.Lag("t"); err == nil {
		t.Error("the lag of a topic never started is measurable")
	}
	_ = r.Start("t")
	r.produce("t", 4)
	if got := r.progressOf("t"); got[0] != 2 || got[1] != 2 {
		t.Errorf("copied %v after 4 records, want 2 a partition", got)
	}
	final, batches, _ := r.Stop(ctx, "t")
	if final[0] != 2 || final[1] != 2 || len(batches) != 4 {
		t.Errorf("Stop: %v with %d batches, want 2 a partition and the 4 batches", final, len(batches))
	}
	r.produceTo("t", 0, 3)
	r.setEnds("t", map[int32]int64{1: 9})
	if got := r.progressOf("t"); got[0] != 2 || got[1] != 2 {
		t.Errorf("copied %v after Stop, want no copy", got)
	}
	_ = r.Start("t")
	if got := r.progressOf("t"); got[0] != 5 || got[1] != 9 {
		t.Errorf("copied %v after Start, want the ends 5 and 9", got)
	}
	r.pause("t")
	r.produce("t", 2)
	if l, err := r.Lag("t"); err != nil || l == 0 || r.progressOf("t")[0] != 5 {
		t.Errorf("paused: lag %v, %v, copied %v; want a lag and no copy", l, err, r.progressOf("t"))
	}
	_ = r.Start("t")
	r.produce("t", 20)
	_, batches, _ = r.Stop(ctx, "t")
	per := map[int32]int{}
	for _, b := range batches {
		per[b.Partition]++
	}
	if per[0] != 5 || per[1] != 5 {
		t.Errorf("Stop returned %v batches a partition, want the last 5 of each", per)
	}
	want := []string{"Start t", "Stop t", "Start t", "Start t", "Stop t"}
	if got := r.called(); !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	if len(told) == 0 {
		t.Error("no advance told")
	}
}
