package recordbatch_test

import (
	"bytes"
	"testing"

	"github.com/baton-kafka/baton/internal/recordbatch"
)

// FuzzSetProducer rewrites the producer fields of arbitrary bytes that
// BatchLen accepts: the rewrite must read back, leave a valid CRC, change
// nothing but the producer fields and the CRC, and never touch bytes past
// the batch. The readers never panic on any input.
func FuzzSetProducer(f *testing.F) {
	for _, p := range []recordbatch.Producer{{ID: -1, Epoch: -1, BaseSeq: -1}, {ID: 7, Epoch: 2, BaseSeq: 100}} {
		b := batch(&testing.T{}, 3, p, 0)
		f.Add(b, int64(42), int16(1), int32(5))
		f.Add(append(b, 0xee, 0xee), int64(-1), int16(-1), int32(-1))
	}
	f.Add(make([]byte, recordbatch.HeaderLen), int64(0), int16(0), int32(0))
	f.Fuzz(func(t *testing.T, b []byte, id int64, epoch int16, seq int32) {
		recordbatch.ReadProducer(b)
		recordbatch.Transactional(b)
		recordbatch.CRCValid(b)
		n, err := recordbatch.BatchLen(b)
		if err != nil {
			return
		}
		if n < recordbatch.HeaderLen || n > len(b) {
			t.Fatalf("BatchLen %d for %d bytes", n, len(b))
		}
		orig := bytes.Clone(b)
		want := recordbatch.Producer{ID: id, Epoch: epoch, BaseSeq: seq}
		recordbatch.SetProducer(b[:n], want)
		if got, ok := recordbatch.ReadProducer(b[:n]); !ok || got != want {
			t.Fatalf("read back %+v (ok %v), wrote %+v", got, ok, want)
		}
		if !recordbatch.CRCValid(b[:n]) {
			t.Fatal("CRC invalid after SetProducer")
		}
		for i := range b {
			inCRC := i >= recordbatch.OffCRC && i < recordbatch.OffAttributes
			inProducer := i >= recordbatch.OffProducerID && i < recordbatch.OffBaseSeq+4
			if !inCRC && !inProducer && b[i] != orig[i] {
				t.Fatalf("byte %d changed from %#x to %#x", i, orig[i], b[i])
			}
		}
	})
}
