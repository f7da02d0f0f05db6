package pidmap

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-kafka/baton/internal/recordbatch"
)

// memJournal records mappings in memory, fails while fail is set, and
// holds each Record until release is closed when it is set.
type memJournal struct {
	mu      sync.Mutex
	got     []Mapping
	fail    bool
	release chan struct{}
}

func (j *memJournal) Record(m Mapping) error {
	j.mu.Lock()
	release, fail := j.release, j.fail
	j.mu.Unlock()
	if release != nil {
		<-release
	}
	if fail {
		return errors.New("disk full")
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.got = append(j.got, m)
	return nil
}

func (j *memJournal) RecordUncertain(Uncertain) error { return nil }

func (j *memJournal) recorded() []Mapping {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.got)
}

func journaled(j Journal, alloc *fakeAlloc, restored ...Mapping) *sessions {
	s := newSessions(10, time.Hour, alloc.alloc)
	s.journal = j
	s.restore(restored)
	return s
}

// Each partition's first batch is recorded before it is mapped; later
// batches of the partition are not recorded again.
func TestJournalRecordsEachPartitionOnce(t *testing.T) {
	t.Parallel()
	j := &memJournal{}
	s := journaled(j, &fakeAlloc{})
	ctx := context.Background()
	for _, b := range []Batch{
		batch(recordbatch.Producer{ID: 7, BaseSeq: 40}, 0),
		batch(recordbatch.Producer{ID: 7, BaseSeq: 41}, 0),
		batch(recordbatch.Producer{ID: 7, BaseSeq: 3}, 1),
		batch(recordbatch.Producer{ID: 7, BaseSeq: 42}, 0),
	} {
		if _, err := s.destination(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	want := []Mapping{
		{Source: Session{7, 0}, Destination: Session{1000, 0}, Topic: "t", Partition: 0, Base: 40},
		{Source: Session{7, 0}, Destination: Session{1000, 0}, Topic: "t", Partition: 1, Base: 3},
	}
	if got := j.recorded(); !slices.Equal(got, want) {
		t.Fatalf("recorded %+v, want %+v", got, want)
	}
}

// A restored mapping maps a retry to the destination producer and sequence
// its first send carried, and a later batch goes on from there; a source
// session mapped twice takes the later destination producer.
func TestJournalRestoredMappings(t *testing.T) {
	t.Parallel()
	restored := []Mapping{
		{Source: Session{7, 0}, Destination: Session{500, 0}, Topic: "t", Partition: 0, Base: 40},
		{Source: Session{8, 2}, Destination: Session{501, 0}, Topic: "t", Partition: 0, Base: 5},
		{Source: Session{8, 2}, Destination: Session{502, 1}, Topic: "t", Partition: 1, Base: 9}, // mapped again after an eviction
	}
	j := &memJournal{}
	s := journaled(j, &fakeAlloc{}, restored...)
	for _, tc := range []struct {
		b    Batch
		want recordbatch.Producer
	}{
		{batch(recordbatch.Producer{ID: 7, BaseSeq: 42}, 0), recordbatch.Producer{ID: 500, BaseSeq: 2}},
		{batch(recordbatch.Producer{ID: 8, Epoch: 2, BaseSeq: 11}, 1), recordbatch.Producer{ID: 502, Epoch: 1, BaseSeq: 2}},
		// The older mapping of session 8 is gone with it: partition 0
		// starts afresh under 502.
		{batch(recordbatch.Producer{ID: 8, Epoch: 2, BaseSeq: 6}, 0), recordbatch.Producer{ID: 502, Epoch: 1, BaseSeq: 0}},
	} {
		got, err := s.destination(context.Background(), tc.b)
		if err != nil || got != tc.want {
			t.Errorf("%+v: %+v, %v; want %+v", tc.b, got, err, tc.want)
		}
	}
	if got := j.recorded(); len(got) != 1 || got[0].Partition != 0 || got[0].Source != (Session{8, 2}) {
		t.Errorf("recorded %+v, want only session 8's new partition 0", got)
	}
}

// Restoring more sessions than the bound keeps the newest.
func TestJournalRestoreKeepsTheNewest(t *testing.T) {
	t.Parallel()
	var restored []Mapping
	for id := range int64(15) {
		restored = append(restored, Mapping{Source: Session{ID: id}, Destination: Session{ID: 100 + id}, Topic: "t"})
	}
	s := journaled(&memJournal{}, &fakeAlloc{}, restored...) // bound 10
	if n := s.len(); n != 10 {
		t.Fatalf("%d sessions restored, want 10", n)
	}
	for id := range int64(15) {
		_, ok := s.m[Session{ID: id}]
		if ok != (id >= 5) {
			t.Errorf("session %d restored: %v", id, ok)
		}
	}
}

// A mapping the journal could not record is not used: the batch is refused
// (ErrJournal) and the next one records it again. Batches that come while
// it is being recorded wait for it and share its outcome.
func TestJournalFailureRefusesTheBatch(t *testing.T) {
	t.Parallel()
	j := &memJournal{fail: true, release: make(chan struct{})}
	s := journaled(j, &fakeAlloc{})
	ctx := context.Background()
	first := batch(recordbatch.Producer{ID: 7, BaseSeq: 40}, 0)
	errs := make(chan error, 2)
	go func() { _, err := s.destination(ctx, first); errs <- err }()
	// Wait until the first batch is recording, then send a second one.
	for {
		s.mu.Lock()
		e := s.m[Session{7, 0}]
		recording := e != nil && allocated(e) && e.bases[partKey{"t", 0}] != nil
		s.mu.Unlock()
		if recording {
			break
		}
		time.Sleep(time.Millisecond)
	}
	go func() { _, err := s.destination(ctx, batch(recordbatch.Producer{ID: 7, BaseSeq: 41}, 0)); errs <- err }()
	close(j.release)
	for range 2 {
		if err := <-errs; !errors.Is(err, ErrJournal) {
			t.Fatalf("while the journal fails: %v, want ErrJournal", err)
		}
	}
	j.mu.Lock()
	j.fail, j.release = false, nil
	j.mu.Unlock()
	got, err := s.destination(ctx, batch(recordbatch.Producer{ID: 7, BaseSeq: 41}, 0))
	if err != nil || got.BaseSeq != 0 {
		t.Fatalf("once the journal works: %+v, %v; want the stream to start at this batch", got, err)
	}
	if rec := j.recorded(); len(rec) != 1 || rec[0].Base != 41 {
		t.Fatalf("recorded %+v, want one mapping based at 41", rec)
	}
}

// Mappings returns what a journal rewritten from it must hold.
func TestMappingsSnapshot(t *testing.T) {
	t.Parallel()
	s := journaled(&memJournal{}, &fakeAlloc{})
	for _, b := range []Batch{
		batch(recordbatch.Producer{ID: 7, BaseSeq: 40}, 0),
		batch(recordbatch.Producer{ID: 9, BaseSeq: 1}, 2),
	} {
		if _, err := s.destination(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	got := s.mappings()
	slices.SortFunc(got, func(a, b Mapping) int { return int(a.Source.ID - b.Source.ID) })
	want := []Mapping{
		{Source: Session{7, 0}, Destination: Session{1000, 0}, Topic: "t", Partition: 0, Base: 40},
		{Source: Session{9, 0}, Destination: Session{1001, 0}, Topic: "t", Partition: 2, Base: 1},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("mappings %+v, want %+v", got, want)
	}
}
