package agent

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

func TestPIDMapSequences(t *testing.T) {
	p0, p1 := tp{"t", 0}, tp{"t", 1}
	type step struct {
		src     recordbatch.Producer
		p       tp
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
			m := newPIDMap(DefaultProducerIDs, DefaultProducerIDIdle, fa.alloc)
			for i, s := range tc.steps {
				got, err := m.destination(context.Background(), s.src, s.p)
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
	m := newPIDMap(10, time.Minute, fa.alloc)
	fa.fail.Store(true)
	src := recordbatch.Producer{ID: 7, BaseSeq: 40}
	if _, err := m.destination(context.Background(), src, tp{"t", 0}); !errors.Is(err, errPIDAlloc) {
		t.Fatalf("allocation failure: got %v, want errPIDAlloc", err)
	}
	fa.fail.Store(false)
	got, err := m.destination(context.Background(), src, tp{"t", 0})
	if err != nil || got.ID != 1000 || got.BaseSeq != 0 {
		t.Fatalf("after the destination came back: %+v, %v", got, err)
	}
}

func TestPIDMapOneAllocationPerProducer(t *testing.T) {
	var calls atomic.Int64
	release := make(chan struct{})
	m := newPIDMap(10, time.Minute, func(context.Context) (int64, int16, error) {
		calls.Add(1)
		<-release
		return 42, 3, nil
	})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := m.destination(context.Background(), recordbatch.Producer{ID: 7, BaseSeq: int32(i)}, tp{"t", int32(i)})
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
	m := newPIDMap(3, time.Minute, fa.alloc)
	m.now = func() time.Time { return now }
	use := func(id int64, seq int32) int64 {
		t.Helper()
		got, err := m.destination(context.Background(), recordbatch.Producer{ID: id, BaseSeq: seq}, tp{"t", 0})
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
