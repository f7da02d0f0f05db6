package pidmap

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-kafka/baton/internal/recordbatch"
)

// fakeAlloc hands out destination ids 1000, 1001, ... and fails while fail
// is set.
type fakeAlloc struct {
	next atomic.Int64
	fail atomic.Bool
}

func (f *fakeAlloc) alloc(context.Context) (int64, int16, error) {
	if f.fail.Load() {
		return 0, 0, errors.New("destination down")
	}
	return 1000 + f.next.Add(1) - 1, 0, nil
}

// allocFunc adapts a function to Allocator.
type allocFunc func(context.Context) (int64, int16, error)

func (f allocFunc) Allocate(ctx context.Context) (int64, int16, error) { return f(ctx) }

func newSessions(max int, idle time.Duration, alloc func(context.Context) (int64, int16, error)) *sessions {
	return &sessions{max: max, idle: idle, alloc: allocFunc(alloc), now: time.Now, m: map[Session]*session{}}
}

// batch is a batch of src on partition p of topic "t".
func batch(src recordbatch.Producer, p int32) Batch {
	return Batch{Topic: "t", Partition: p, ProducerID: src.ID, Epoch: src.Epoch, Seq: src.BaseSeq, Records: 1}
}

func TestPIDMapSequences(t *testing.T) {
	p0, p1 := int32(0), int32(1)
	type step struct {
		src     recordbatch.Producer
		p       int32
		wantID  int64
		wantSeq int32
	}
	src := func(id int64, epoch int16, seq int32) recordbatch.Producer {
		return recordbatch.Producer{ID: id, Epoch: epoch, BaseSeq: seq}
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"first batch is zero, later ones count from it", []step{
			{src(7, 0, 120), p0, 1000, 0},
			{src(7, 0, 130), p0, 1000, 10},
			{src(7, 0, 145), p0, 1000, 25},
		}},
		{"a retry maps to the same sequence", []step{
			{src(7, 0, 120), p0, 1000, 0},
			{src(7, 0, 130), p0, 1000, 10},
			{src(7, 0, 130), p0, 1000, 10},
			{src(7, 0, 120), p0, 1000, 0},
		}},
		{"each partition has its own base, one destination id", []step{
			{src(7, 0, 50), p0, 1000, 0},
			{src(7, 0, 9), p1, 1000, 0},
			{src(7, 0, 60), p0, 1000, 10},
			{src(7, 0, 19), p1, 1000, 10},
		}},
		{"an epoch bump gets a fresh destination producer", []step{
			{src(7, 0, 50), p0, 1000, 0},
			{src(7, 1, 0), p0, 1001, 0},
			{src(7, 1, 10), p0, 1001, 10},
			{src(7, 0, 60), p0, 1000, 10}, // a late batch of the old session keeps its mapping
		}},
		{"producers do not share", []step{
			{src(7, 0, 50), p0, 1000, 0},
			{src(8, 0, 50), p0, 1001, 0},
		}},
		{"the client's sequence wraps past MaxInt32", []step{
			{src(7, 0, math.MaxInt32-9), p0, 1000, 0},
			{src(7, 0, 0), p0, 1000, 10},
			{src(7, 0, 5), p0, 1000, 15},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fa fakeAlloc
			m := newSessions(DefaultMaxProducers, DefaultIdle, fa.alloc)
			for i, s := range tc.steps {
				got, err := m.destination(context.Background(), batch(s.src, s.p))
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got.ID != s.wantID || got.Epoch != 0 || got.BaseSeq != s.wantSeq {
					t.Errorf("step %d: %+v maps to %+v, want id %d seq %d", i, s.src, got, s.wantID, s.wantSeq)
				}
			}
		})
	}
}

func TestPIDMapAllocationFailureIsRetried(t *testing.T) {
	var fa fakeAlloc
	m := newSessions(10, time.Minute, fa.alloc)
	fa.fail.Store(true)
	src := recordbatch.Producer{ID: 7, BaseSeq: 40}
	if _, err := m.destination(context.Background(), batch(src, 0)); !errors.Is(err, ErrAllocate) {
		t.Fatalf("allocation failure: got %v, want ErrAllocate", err)
	}
	fa.fail.Store(false)
	got, err := m.destination(context.Background(), batch(src, 0))
	if err != nil || got.ID != 1000 || got.BaseSeq != 0 {
		t.Fatalf("after the destination came back: %+v, %v", got, err)
	}
}

func TestPIDMapOneAllocationPerProducer(t *testing.T) {
	var calls atomic.Int64
	release := make(chan struct{})
	m := newSessions(10, time.Minute, func(context.Context) (int64, int16, error) {
		calls.Add(1)
		<-release
		return 42, 3, nil
	})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := m.destination(context.Background(), batch(recordbatch.Producer{ID: 7, BaseSeq: int32(i)}, int32(i)))
			if err != nil || got.ID != 42 || got.Epoch != 3 || got.BaseSeq != 0 {
				t.Errorf("goroutine %d: %+v, %v", i, got, err)
			}
		}()
	}
	close(release)
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Errorf("%d InitProducerId calls for one producer, want 1", n)
	}
}

func TestPIDMapBound(t *testing.T) {
	var fa fakeAlloc
	now := time.Unix(1e9, 0)
	m := newSessions(3, time.Minute, fa.alloc)
	m.now = func() time.Time { return now }
	use := func(id int64, seq int32) int64 {
		t.Helper()
		got, err := m.destination(context.Background(), batch(recordbatch.Producer{ID: id, BaseSeq: seq}, 0))
		if err != nil {
			t.Fatal(err)
		}
		return got.ID
	}
	for id := int64(1); id <= 3; id++ {
		use(id, 0)
		now = now.Add(time.Second)
	}
	use(1, 5) // 1 is now the most recently used; 2 the least
	now = now.Add(time.Second)
	use(4, 0) // full: evicts 2
	if n := m.len(); n != 3 {
		t.Fatalf("%d producers mapped, want the bound 3", n)
	}
	if id := use(1, 6); id != 1000 {
		t.Errorf("producer 1 lost its mapping (now %d)", id)
	}
	if id := use(2, 9); id == 1001 {
		t.Error("producer 2, least recently used, kept its mapping past the bound")
	}
	// Idle mappings go first, whatever the bound.
	now = now.Add(2 * time.Minute)
	use(9, 0)
	if n := m.len(); n != 1 {
		t.Errorf("%d producers mapped after the others idled out, want 1", n)
	}
}

// TestPIDMapRetryBeforeStreamIsRefused: a retry of a batch sent before its
// mapping was evicted arrives after a later batch opened a fresh mapping:
// no destination sequence can hold it, so it is refused (the agent answers
// OUT_OF_ORDER_SEQUENCE_NUMBER), never sent with a sequence wrapped to 2^31.
func TestPIDMapRetryBeforeStreamIsRefused(t *testing.T) {
	t.Parallel()
	var fa fakeAlloc
	now := time.Unix(1e9, 0)
	m := newSessions(1, time.Hour, fa.alloc)
	m.now = func() time.Time { return now }
	get := func(id int64, seq int32) (recordbatch.Producer, error) {
		now = now.Add(time.Millisecond)
		return m.destination(context.Background(), batch(recordbatch.Producer{ID: id, BaseSeq: seq}, 0))
	}
	mustGet := func(id int64, seq int32) {
		t.Helper()
		if _, err := get(id, seq); err != nil {
			t.Fatal(err)
		}
	}
	mustGet(7, 0) // A's batch 0..4 goes to D; its answer is lost
	mustGet(8, 0) // producer B: the map is full, A is evicted
	mustGet(7, 5) // A's pipelined batch 5: a fresh mapping, its stream starts here
	if r, err := get(7, 0); !errors.Is(err, ErrBeforeStream) {
		t.Fatalf("retry of seq 0 after the eviction: %+v, %v; want ErrBeforeStream", r, err)
	}
	// Sequences at and after the stream's start, across the int32 wrap,
	// still map.
	if r, err := get(7, 10); err != nil || r.BaseSeq != 5 {
		t.Fatalf("seq 10: %+v, %v; want destination seq 5", r, err)
	}
}
