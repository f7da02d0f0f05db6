package replicator

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/baton-kafka/baton/internal/recordbatch"
)

// recentBatches keeps the last five batches per producer session, none of
// transactional or non-idempotent producers, and newest applies the window
// and the bound (the newest kept).
func TestRecentBatches(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	mk := func(pid int64, seq int32, attrs int16) batch {
		raw := testBatch(0, 2, attrs, pid)
		binary.BigEndian.PutUint32(raw[recordbatch.OffBaseSeq:], uint32(seq))
		recordbatch.SetCRC(raw)
		bs, err := splitBatches(raw)
		if err != nil || len(bs) != 1 {
			t.Fatalf("test batch: %v", err)
		}
		return bs[0]
	}
	r := recentBatches{}
	for i := range int32(7) {
		r.note(1, mk(10, 2*i, 0), int64(100+2*i), t0.Add(time.Duration(i)*time.Second), time.Minute)
	}
	r.note(1, mk(11, 0, recordbatch.AttrTransactional), 200, t0, time.Minute)
	r.note(1, mk(-1, -1, 0), 201, t0, time.Minute)
	r.note(1, mk(12, 0, 0), 202, t0.Add(-time.Hour), time.Minute)

	tests := []struct {
		name    string
		since   time.Time
		limit   int
		offsets []int64
		dropped int
	}{
		{"all five of each session", t0.Add(-2 * time.Hour), 0, []int64{104, 106, 108, 110, 112, 202}, 0},
		{"window", t0.Add(3 * time.Second), 0, []int64{106, 108, 110, 112}, 0},
		{"bound keeps the newest", t0.Add(-2 * time.Hour), 2, []int64{110, 112}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, dropped := newest([]recentBatches{r}, tt.since, tt.limit)
			var offs []int64
			for _, b := range got {
				offs = append(offs, b.Offset)
				if b.Partition != 1 || b.Records != 2 {
					t.Errorf("batch at %d: partition %d, %d records", b.Offset, b.Partition, b.Records)
				}
			}
			if len(offs) != len(tt.offsets) || dropped != tt.dropped {
				t.Fatalf("offsets %v (left out %d), want %v (left out %d)", offs, dropped, tt.offsets, tt.dropped)
			}
			for i := range offs {
				if offs[i] != tt.offsets[i] {
					t.Fatalf("offsets %v, want %v", offs, tt.offsets)
				}
			}
		})
	}
	if b, _ := newest([]recentBatches{r}, t0.Add(6*time.Second), 0); len(b) != 1 || b[0].BaseSeq != 12 || b[0].ProducerID != 10 || b[0].Epoch != 3 {
		t.Fatalf("newest batch %+v, want producer 10 epoch 3 sequence 12", b)
	}
	r.expire(t0.Add(-time.Minute))
	if _, ok := r[sessionKey{12, 3}]; ok || len(r) != 1 {
		t.Fatalf("expire kept %d sessions, want only producer 10's", len(r))
	}
}
