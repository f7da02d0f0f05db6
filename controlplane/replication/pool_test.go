package replication

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
)

// poolClock is a WorkerPool's clock, moved by the test.
type poolClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *poolClock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *poolClock) set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }
func (c *poolClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// testPool returns a pool on a kfake source holding topic "t" (parts
// partitions, read already) and its clock, past the start's quiet period
// unless quiet.
func testPool(t *testing.T, parts int32, quiet bool) (*WorkerPool, *poolClock) {
	t.Helper()
	c, err := embedded.Start(embedded.Brokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(context.Background(), parts, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	p, err := NewWorkerPool(adm, 3*time.Second, time.Second, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	clock := &poolClock{t: time.Now()}
	p.now = clock.now
	p.quiet = clock.now().Add(p.lease + p.flight)
	if err := p.Start("t"); err != nil {
		t.Fatal(err)
	}
	p.readPartitions(context.Background(), []string{"t"})
	if !quiet {
		clock.add(p.lease + p.flight)
	}
	return p, clock
}

// work is one Work call of worker id reporting it holds report (with next
// offsets 0) and answering stop if given.
func work(t *testing.T, p *WorkerPool, id string, report []int32, stopped ...*batonv1.StoppedTopic) *batonv1.WorkResponse {
	t.Helper()
	req := &batonv1.WorkRequest{NodeId: id, Incarnation: 1, SentAt: timestamppb.Now(), Stopped: stopped}
	for _, i := range report {
		req.Partitions = append(req.Partitions, &batonv1.CopyState{Topic: "t", Partition: i})
	}
	resp, err := p.Work(context.Background(), req)
	if err != nil {
		t.Fatalf("Work(%s): %v", id, err)
	}
	return resp
}

// askedToStop waits until id's Work answer (reporting held) asks it to
// stop "t", and returns the stop id.
func askedToStop(t *testing.T, p *WorkerPool, id string, held []int32) uint64 {
	t.Helper()
	var stopID uint64
	wait.For(t, 10*time.Second, id+" asked to stop", func() string {
		for _, s := range work(t, p, id, held).GetStop() {
			stopID = s.GetStopId()
			return ""
		}
		return "not yet"
	})
	return stopID
}

func leasedTo(resp *batonv1.WorkResponse) []int32 {
	var out []int32
	for _, l := range resp.GetLeases() {
		out = append(out, l.GetPartition())
	}
	slices.Sort(out)
	return out
}

func TestWorkerPoolLeases(t *testing.T) {
	t.Parallel()
	t.Run("a new pool grants nothing during its quiet period but keeps what workers report", func(t *testing.T) {
		t.Parallel()
		p, clock := testPool(t, 4, true)
		if got := leasedTo(work(t, p, "w1", []int32{2})); !slices.Equal(got, []int32{2}) {
			t.Fatalf("in the quiet period w1 holds %v, want only the partition it reported, [2]", got)
		}
		if got := leasedTo(work(t, p, "w2", nil)); len(got) != 0 {
			t.Fatalf("in the quiet period w2 was granted %v: a previous leader's lease may cover them", got)
		}
		// Both renew every lease/2 past the quiet period: then they share.
		w1, w2 := []int32{2}, []int32(nil)
		for range 4 {
			clock.add(p.lease / 2)
			w1 = leasedTo(work(t, p, "w1", w1))
			w2 = leasedTo(work(t, p, "w2", w2))
		}
		if len(w1) != 2 || len(w2) != 2 || !slices.Contains(w1, 2) {
			t.Fatalf("after the quiet period: w1 %v, w2 %v; want two each, 2 staying with w1", w1, w2)
		}
	})
	t.Run("a dead worker's partitions go to another only after its lease and flight", func(t *testing.T) {
		t.Parallel()
		p, clock := testPool(t, 4, false)
		w1 := leasedTo(work(t, p, "w1", nil))
		if len(w1) != 4 {
			t.Fatalf("the only worker holds %v, want all four", w1)
		}
		clock.add(time.Second)
		if got := leasedTo(work(t, p, "w2", nil)); len(got) != 0 {
			// w1 holds more than its share now but keeps it until it asks.
			t.Fatalf("w2 was granted %v while w1's lease runs", got)
		}
		// w1 dies: w2 waits out w1's lease + flight.
		clock.add(p.lease + p.flight - time.Second - time.Millisecond)
		if got := leasedTo(work(t, p, "w2", nil)); len(got) != 0 {
			t.Fatalf("w2 was granted %v a millisecond before w1's lease + flight ended", got)
		}
		clock.add(time.Millisecond)
		if got := leasedTo(work(t, p, "w2", nil)); len(got) != 4 {
			t.Fatalf("w2 holds %v once w1's lease + flight ended, want all four", got)
		}
	})
	t.Run("a worker over its share gives the rest back, to others after its lease", func(t *testing.T) {
		t.Parallel()
		p, clock := testPool(t, 4, false)
		work(t, p, "w1", nil)
		work(t, p, "w2", nil) // joins: the share is 2
		w1 := leasedTo(work(t, p, "w1", []int32{0, 1, 2, 3}))
		if len(w1) != 2 {
			t.Fatalf("w1 keeps %v, want two of four", w1)
		}
		if got := leasedTo(work(t, p, "w2", nil)); len(got) != 0 {
			t.Fatalf("w2 was granted %v while w1's lease on them runs", got)
		}
		var w2 []int32
		for range 3 { // both renew every lease/2
			clock.add(p.lease / 2)
			work(t, p, "w1", w1)
			w2 = leasedTo(work(t, p, "w2", w2))
		}
		if len(w2) != 2 || slices.ContainsFunc(w2, func(i int32) bool { return slices.Contains(w1, i) }) {
			t.Fatalf("w1 %v, w2 %v: want the other two for w2", w1, w2)
		}
	})
	t.Run("one worker id in two processes is refused while the first's lease runs", func(t *testing.T) {
		t.Parallel()
		p, clock := testPool(t, 2, false)
		work(t, p, "w1", nil)
		req := &batonv1.WorkRequest{NodeId: "w1", Incarnation: 2, SentAt: timestamppb.Now()}
		if _, err := p.Work(context.Background(), req); err == nil || !strings.Contains(err.Error(), "--worker-id") {
			t.Fatalf("a second process as w1: %v, want a refusal naming --worker-id", err)
		}
		clock.add(p.lease + p.flight)
		resp, err := p.Work(context.Background(), req)
		if err != nil || len(resp.GetLeases()) != 2 {
			t.Fatalf("the second process once the first's lease ended: %v, %v", resp, err)
		}
	})
}

// stoppedAnswer is a worker's answer to stop id for parts of "t", each
// stopped at 100 + its number with one recent batch.
func stoppedAnswer(id uint64, parts ...int32) *batonv1.StoppedTopic {
	s := &batonv1.StoppedTopic{Topic: "t", StopId: id}
	for _, i := range parts {
		s.Partitions = append(s.Partitions, &batonv1.CopyState{Topic: "t", Partition: i, Next: 100 + int64(i)})
		s.Recent = append(s.Recent, &batonv1.SourceBatch{Partition: i, ProducerId: 7, Offset: 90 + int64(i)})
	}
	return s
}

// stopResult is what a Stop of "t" returned; n counts its recent batches.
type stopResult struct {
	next map[int32]int64
	n    int
	err  error
}

// startStop stops "t" in the background.
func startStop(p *WorkerPool, ctx context.Context) <-chan stopResult {
	out := make(chan stopResult, 1)
	go func() {
		next, recent, err := p.Stop(ctx, "t")
		out <- stopResult{next, len(recent), err}
	}()
	return out
}

// twoWorkerPool returns a pool whose four partitions of "t" w1 and w2
// hold two each, and what each holds.
func twoWorkerPool(t *testing.T) (*WorkerPool, *poolClock, []int32, []int32) {
	p, clock := testPool(t, 4, false)
	work(t, p, "w1", nil)
	work(t, p, "w2", nil)
	w1 := leasedTo(work(t, p, "w1", []int32{0, 1, 2, 3}))
	var w2 []int32
	// Both renew every lease/2 until w1's lease on what it gave
	// back has ended.
	for range 3 {
		clock.add(p.lease / 2)
		work(t, p, "w1", w1)
		w2 = leasedTo(work(t, p, "w2", w2))
	}
	if len(w1) != 2 || len(w2) != 2 {
		t.Fatalf("w1 %v, w2 %v", w1, w2)
	}
	return p, clock, w1, w2
}

func TestWorkerPoolStop(t *testing.T) {
	t.Parallel()
	t.Run("every holder answers: the merged answer", func(t *testing.T) {
		t.Parallel()
		p, _, w1, w2 := twoWorkerPool(t)
		res := startStop(p, context.Background())
		id := askedToStop(t, p, "w1", w1)
		work(t, p, "w1", nil, stoppedAnswer(id, w1...))
		select {
		case r := <-res:
			t.Fatalf("Stop returned %+v before w2 answered", r)
		case <-time.After(50 * time.Millisecond):
		}
		work(t, p, "w2", w2, stoppedAnswer(askedToStop(t, p, "w2", w2), w2...))
		r := <-res
		if r.err != nil || len(r.next) != 4 || r.n != 4 {
			t.Fatalf("Stop: %+v", r)
		}
		for i, n := range r.next {
			if n != 100+int64(i) {
				t.Errorf("partition %d stopped at %d, want %d", i, n, 100+i)
			}
		}
		if _, err := p.Lag("t"); err == nil {
			t.Error("the topic is still replicated after Stop")
		}
	})
	t.Run("a holder answering for fewer partitions fails the stop", func(t *testing.T) {
		t.Parallel()
		p, _, w1, _ := twoWorkerPool(t)
		res := startStop(p, context.Background())
		work(t, p, "w1", nil, stoppedAnswer(askedToStop(t, p, "w1", w1), w1[0]))
		if r := <-res; r.err == nil || !strings.Contains(r.err.Error(), "did not say where") {
			t.Fatalf("Stop: %+v, want a failure naming the partition not answered", r)
		}
		if _, err := p.Progress("t"); err != nil {
			t.Fatalf("the copy does not go on after a failed stop: %v", err)
		}
	})
	t.Run("a holder whose lease runs out fails the stop", func(t *testing.T) {
		t.Parallel()
		p, clock, w1, w2 := twoWorkerPool(t)
		res := startStop(p, context.Background())
		work(t, p, "w1", nil, stoppedAnswer(askedToStop(t, p, "w1", w1), w1...))
		clock.add(p.lease + p.flight) // w2 never answers
		work(t, p, "w1", nil)
		if r := <-res; r.err == nil || !strings.Contains(r.err.Error(), "ran out") {
			t.Fatalf("Stop: %+v, want a failure for w2's lease (%v)", r, w2)
		}
	})
	t.Run("a stop ended by its context lets the copy go on", func(t *testing.T) {
		t.Parallel()
		p, _, w1, _ := twoWorkerPool(t)
		ctx, cancel := context.WithCancel(context.Background())
		res := startStop(p, ctx)
		askedToStop(t, p, "w1", w1)
		cancel()
		if r := <-res; !errors.Is(r.err, context.Canceled) {
			t.Fatalf("Stop: %+v, want context.Canceled", r)
		}
		if s := work(t, p, "w1", w1).GetStop(); len(s) != 0 {
			t.Fatalf("w1 still asked to stop after the stop ended: %v", s)
		}
	})
	t.Run("a partition without a worker refuses the stop", func(t *testing.T) {
		t.Parallel()
		p, _ := testPool(t, 2, false)
		work(t, p, "w1", nil)
		p.mu.Lock()
		p.topics["t"].parts[1].holder = ""
		p.mu.Unlock()
		if _, _, err := p.Stop(context.Background(), "t"); !errors.Is(err, ErrNotReady) {
			t.Fatalf("Stop: %v, want ErrNotReady", err)
		}
	})
}

func TestWorkerPoolLagNeedsEveryPartitionReported(t *testing.T) {
	t.Parallel()
	p, _ := testPool(t, 2, false)
	if _, err := p.Lag("t"); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Lag with no worker: %v, want ErrNotReady", err)
	}
	work(t, p, "w1", nil)
	if _, err := p.Lag("t"); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Lag before the worker reported: %v, want ErrNotReady", err)
	}
	resp, err := p.Work(context.Background(), &batonv1.WorkRequest{NodeId: "w1", Incarnation: 1, Partitions: []*batonv1.CopyState{
		{Topic: "t", Partition: 0, Next: 5}, {Topic: "t", Partition: 1, Next: -1, Error: "leader not available"}}})
	if err != nil || len(resp.GetLeases()) != 2 {
		t.Fatal(resp, err)
	}
	if _, err := p.Lag("t"); err == nil || !strings.Contains(err.Error(), "leader not available") {
		t.Fatalf("Lag with partition 1 not resumed: %v, want its error", err)
	}
	if _, err := p.Work(context.Background(), &batonv1.WorkRequest{NodeId: "w1", Incarnation: 1, Partitions: []*batonv1.CopyState{
		{Topic: "t", Partition: 0, Next: 5}, {Topic: "t", Partition: 1, Next: 9}}}); err != nil {
		t.Fatal(err)
	}
	if lag, err := p.Lag("t"); err != nil {
		t.Fatalf("Lag with both reported: %v, %v", lag, err)
	}
}

// TestWorkerPoolLatency: the destination latency of a topic several workers
// copy is their p50s weighted by samples and the largest p99; a worker
// gone takes its report with it.
func TestWorkerPoolLatency(t *testing.T) {
	t.Parallel()
	p, clock := testPool(t, 2, false)
	report := func(id string, p50, p99 time.Duration, n int64) {
		t.Helper()
		if _, err := p.Work(context.Background(), &batonv1.WorkRequest{NodeId: id, Incarnation: 1,
			Latency: []*batonv1.TopicLatency{{Topic: "t", P50: durationpb.New(p50), P99: durationpb.New(p99), Samples: n}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := p.DestinationLatency("t"); ok {
		t.Fatal("a latency before any report")
	}
	report("w1", 10*time.Millisecond, 40*time.Millisecond, 300)
	report("w2", 20*time.Millisecond, 30*time.Millisecond, 100)
	l, ok := p.DestinationLatency("t")
	if !ok || l.P50 != 12500*time.Microsecond || l.P99 != 40*time.Millisecond || l.Samples != 400 {
		t.Fatalf("merged: %+v, %v; want p50 12.5ms, p99 40ms, 400 samples", l, ok)
	}
	clock.add(p.lease + p.flight)
	report("w2", 20*time.Millisecond, 30*time.Millisecond, 100) // w1 is gone
	if l, _ := p.DestinationLatency("t"); l.P50 != 20*time.Millisecond || l.Samples != 100 {
		t.Fatalf("after w1's lease ran out: %+v, want w2's alone", l)
	}
}

// TestWorkerPoolDivergedOutlivesStop: a divergence a worker reported stays
// with the topic after Stop and Start, as the replicator's does.
func TestWorkerPoolDivergedOutlivesStop(t *testing.T) {
	t.Parallel()
	p, _ := testPool(t, 1, false)
	work(t, p, "w1", nil)
	if _, err := p.Work(context.Background(), &batonv1.WorkRequest{NodeId: "w1", Incarnation: 1, Partitions: []*batonv1.CopyState{
		{Topic: "t", Partition: 0, Next: 5, Diverged: "batch landed at 7, expected 5"}}}); err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() { _, _, err := p.Stop(context.Background(), "t"); res <- err }()
	id := askedToStop(t, p, "w1", []int32{0})
	work(t, p, "w1", nil, &batonv1.StoppedTopic{Topic: "t", StopId: id, Partitions: []*batonv1.CopyState{{Topic: "t", Partition: 0, Next: 5}}})
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	if err := p.Start("t"); err != nil {
		t.Fatal(err)
	}
	if d := p.Diverged("t"); d[0] == "" {
		t.Fatalf("Diverged after Stop and Start: %v, want partition 0's", d)
	}
}

// OnProgress tells the topic when a worker reports a partition's copy
// further on (or for the first time), not when it reports the same.
func TestWorkerPoolTellsProgress(t *testing.T) {
	t.Parallel()
	p, _ := testPool(t, 2, false)
	var told []string
	p.OnProgress(func(topic string) { told = append(told, topic) }) // called under p.mu, from this goroutine's Work calls
	report := func(next0, next1 int64) {
		t.Helper()
		if _, err := p.Work(context.Background(), &batonv1.WorkRequest{NodeId: "w1", Incarnation: 1, Partitions: []*batonv1.CopyState{
			{Topic: "t", Partition: 0, Next: next0}, {Topic: "t", Partition: 1, Next: next1}}}); err != nil {
			t.Fatal(err)
		}
	}
	work(t, p, "w1", nil) // leases both partitions to w1
	for _, tc := range []struct {
		next0, next1 int64
		want         int // told in all so far
	}{
		{5, 0, 2}, // both reported for the first time
		{5, 0, 2}, // the same again
		{7, 0, 3}, // partition 0 further on
		{7, 3, 4}, // partition 1 further on
		{7, 3, 4}, // the same again
	} {
		report(tc.next0, tc.next1)
		if len(told) != tc.want {
			t.Fatalf("after reporting next %d and %d: told %d times, want %d", tc.next0, tc.next1, len(told), tc.want)
		}
	}
	for _, topic := range told {
		if topic != "t" {
			t.Errorf("told %q, want t", topic)
		}
	}
}
