package recordbatch_test

import (
	"bytes"
	"math"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/internal/recordbatch"
)

// batch encodes a v2 batch of n records with the given producer fields
// and a valid CRC.
func batch(t *testing.T, n int, p recordbatch.Producer, attrs int16) []byte {
	t.Helper()
	var recs []byte
	for i := range n {
		r := kmsg.NewRecord()
		r.OffsetDelta = int32(i)
		r.Value = []byte("value")
		r.Key = []byte{byte(i)}
		enc := r.AppendTo(nil)
		recs = append(recs, enc...)
	}
	rb := kmsg.NewRecordBatch()
	rb.Magic = 2
	rb.Attributes = attrs
	rb.LastOffsetDelta = int32(n - 1)
	rb.FirstTimestamp, rb.MaxTimestamp = 1700000000000, 1700000000000
	rb.ProducerID, rb.ProducerEpoch, rb.FirstSequence = p.ID, p.Epoch, p.BaseSeq
	rb.NumRecords = int32(n)
	rb.Records = recs
	b := rb.AppendTo(nil)
	// kmsg leaves Length and CRC to the caller.
	rb.Length = int32(len(b) - 12)
	b = rb.AppendTo(nil)
	recordbatch.SetCRC(b)
	if !recordbatch.CRCValid(b) {
		t.Fatal("test batch has a bad CRC")
	}
	return b
}

func TestSetProducerChangesOnlyProducerFieldsAndCRC(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to recordbatch.Producer
		attrs    int16
	}{
		{"plain", recordbatch.Producer{ID: 7, Epoch: 0, BaseSeq: 120}, recordbatch.Producer{ID: 9000, Epoch: 3, BaseSeq: 0}, 0},
		{"compressed attrs", recordbatch.Producer{ID: 1, Epoch: 2, BaseSeq: 5}, recordbatch.Producer{ID: math.MaxInt64, Epoch: math.MaxInt16, BaseSeq: math.MaxInt32}, 4},
		{"to non-idempotent", recordbatch.Producer{ID: 1, Epoch: 2, BaseSeq: 5}, recordbatch.Producer{ID: -1, Epoch: -1, BaseSeq: -1}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := batch(t, 3, tc.from, tc.attrs)
			n, err := recordbatch.BatchLen(orig)
			if err != nil || n != len(orig) {
				t.Fatalf("BatchLen = %d, %v; want %d", n, err, len(orig))
			}
			if got, ok := recordbatch.ReadProducer(orig); !ok || got != tc.from {
				t.Fatalf("ReadProducer = %+v %v, want %+v", got, ok, tc.from)
			}
			b := bytes.Clone(orig)
			recordbatch.SetProducer(b, tc.to)
			if !recordbatch.CRCValid(b) {
				t.Error("CRC invalid after SetProducer")
			}
			if got, _ := recordbatch.ReadProducer(b); got != tc.to {
				t.Errorf("ReadProducer after SetProducer = %+v, want %+v", got, tc.to)
			}
			for i := range b {
				inCRC := i >= recordbatch.OffCRC && i < recordbatch.OffAttributes
				inProducer := i >= recordbatch.OffProducerID && i < recordbatch.OffBaseSeq+4
				if b[i] != orig[i] && !inCRC && !inProducer {
					t.Errorf("byte %d changed from %#x to %#x, outside the producer fields and CRC", i, orig[i], b[i])
				}
			}
			// kmsg decodes it, with the records untouched.
			var rb, ob kmsg.RecordBatch
			if err := rb.ReadFrom(b); err != nil {
				t.Fatal(err)
			}
			if err := ob.ReadFrom(orig); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(rb.Records, ob.Records) || rb.ProducerID != tc.to.ID || rb.FirstSequence != tc.to.BaseSeq {
				t.Errorf("decoded batch differs: %+v", rb)
			}
		})
	}
}

func TestBatchLenRejectsPartialBatches(t *testing.T) {
	b := batch(t, 2, recordbatch.Producer{ID: 1}, 0)
	for _, cut := range []int{0, 20, recordbatch.HeaderLen, len(b) - 1} {
		if _, err := recordbatch.BatchLen(b[:cut]); err == nil {
			t.Errorf("BatchLen of %d of %d bytes: no error", cut, len(b))
		}
	}
}

func TestSeqDistanceWraps(t *testing.T) {
	for _, tc := range []struct{ from, seq, want int32 }{
		{0, 0, 0},
		{100, 100, 0},
		{100, 150, 50},
		{math.MaxInt32 - 4, math.MaxInt32, 4},
		{math.MaxInt32 - 4, 0, 5}, // the client wrapped past MaxInt32
		{math.MaxInt32, 10, 11},
		{100, 99, math.MaxInt32}, // before the first: far ahead, never a small number
	} {
		if got := recordbatch.SeqDistance(tc.from, tc.seq); got != tc.want {
			t.Errorf("SeqDistance(%d, %d) = %d, want %d", tc.from, tc.seq, got, tc.want)
		}
	}
}

func TestNextSeqWraps(t *testing.T) {
	for _, tc := range []struct{ seq, n, want int32 }{
		{0, 0, 0},
		{0, 1, 1},
		{5, 3, 8},
		{100, 50, 150},
		{math.MaxInt32 - 4, 4, math.MaxInt32}, // up to MaxInt32, not past it
		{math.MaxInt32 - 4, 5, 0},             // one past MaxInt32 is 0
		{math.MaxInt32 - 1, 3, 1},
		{math.MaxInt32, 1, 0},
		{math.MaxInt32, 11, 10},
		{math.MaxInt32, math.MaxInt32, math.MaxInt32 - 1},
	} {
		got := recordbatch.NextSeq(tc.seq, tc.n)
		if got != tc.want {
			t.Errorf("NextSeq(%d, %d) = %d, want %d", tc.seq, tc.n, got, tc.want)
		}
		if d := recordbatch.SeqDistance(tc.seq, got); d != tc.n {
			t.Errorf("SeqDistance(%d, NextSeq(%d, %d)) = %d, want %d", tc.seq, tc.seq, tc.n, d, tc.n)
		}
	}
}

func TestOffsetSpanCountsEveryBatch(t *testing.T) {
	t.Parallel()
	one, three := batch(t, 1, recordbatch.Producer{ID: -1}, 0), batch(t, 3, recordbatch.Producer{ID: -1}, 0)
	for _, tc := range []struct {
		name   string
		b      []byte
		want   int64
		wantOK bool
	}{
		{"one batch of three", three, 3, true},
		{"two batches", append(append([]byte{}, one...), three...), 4, true},
		{"empty", nil, 0, true},
		{"a batch and a partial one", append(append([]byte{}, three...), one[:20]...), 0, false},
	} {
		if n, ok := recordbatch.OffsetSpan(tc.b); n != tc.want || ok != tc.wantOK {
			t.Errorf("%s: OffsetSpan = %d, %v; want %d, %v", tc.name, n, ok, tc.want, tc.wantOK)
		}
	}
}
