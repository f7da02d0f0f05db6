package replicator

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Record batch v2 layout (KAFKA-FACTS.md): the CRC-32C at bytes 17..21
// covers Attributes (byte 21) to the end of the batch.
const (
	batchHeaderLen = 61
	offMagic       = 16
	offCRC         = 17
	offAttributes  = 21
	offLastDelta   = 23
	offProducerID  = 43
	offEpoch       = 51
	offBaseSeq     = 53
	offNumRecords  = 57

	attrTransactional = 0x10
	attrControl       = 0x20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrBadBatch is returned for bytes that are not a well-formed v2 record batch.
var ErrBadBatch = errors.New("replicator: bad record batch")

// batch is one v2 record batch as fetched, aliasing the fetch response.
type batch struct {
	raw        []byte
	baseOffset int64
	lastDelta  int32
	numRecords int32
	attributes int16
	producerID int64
}

func (b batch) lastOffset() int64   { return b.baseOffset + int64(b.lastDelta) }
func (b batch) control() bool       { return b.attributes&attrControl != 0 }
func (b batch) transactional() bool { return b.attributes&attrTransactional != 0 }

// contiguous reports whether the batch's records occupy every offset from
// its base to its last (compaction can leave holes inside a batch).
func (b batch) contiguous() bool { return int64(b.numRecords) == int64(b.lastDelta)+1 }

// splitBatches splits fetched record bytes into whole v2 batches. A
// truncated batch at the end (fetches may cut one off) is dropped; anything
// that is not magic 2 is an error.
func splitBatches(raw []byte) ([]batch, error) {
	var out []batch
	for len(raw) >= 12 {
		length := int32(binary.BigEndian.Uint32(raw[8:12]))
		if length < batchHeaderLen-12 {
			return out, fmt.Errorf("%w: length %d", ErrBadBatch, length)
		}
		total := 12 + int(length)
		if total > len(raw) {
			break // truncated by the fetch size limit
		}
		b := raw[:total:total]
		if b[offMagic] != 2 {
			return out, fmt.Errorf("%w: magic %d (only v2 batches are copied)", ErrBadBatch, b[offMagic])
		}
		if want, got := binary.BigEndian.Uint32(b[offCRC:]), crc32.Checksum(b[offAttributes:], castagnoli); want != got {
			return out, fmt.Errorf("%w: crc %08x, computed %08x", ErrBadBatch, want, got)
		}
		out = append(out, batch{
			raw:        b,
			baseOffset: int64(binary.BigEndian.Uint64(b[0:8])),
			lastDelta:  int32(binary.BigEndian.Uint32(b[offLastDelta:])),
			numRecords: int32(binary.BigEndian.Uint32(b[offNumRecords:])),
			attributes: int16(binary.BigEndian.Uint16(b[offAttributes:])),
			producerID: int64(binary.BigEndian.Uint64(b[offProducerID:])),
		})
		raw = raw[total:]
	}
	return out, nil
}

// rewriteBatch returns a copy of raw with the producer fields set to the
// replicator's own idempotent producer, the transactional bit cleared (D
// sees committed data as plain idempotent data), base offset zeroed and
// the CRC-32C recomputed. Everything else (records, compression,
// timestamps, headers) is byte for byte the source's.
func rewriteBatch(raw []byte, producerID int64, epoch int16, baseSeq int32) []byte {
	b := append([]byte(nil), raw...)
	binary.BigEndian.PutUint64(b[0:8], 0)
	attrs := binary.BigEndian.Uint16(b[offAttributes:]) &^ attrTransactional
	binary.BigEndian.PutUint16(b[offAttributes:], attrs)
	binary.BigEndian.PutUint64(b[offProducerID:], uint64(producerID))
	binary.BigEndian.PutUint16(b[offEpoch:], uint16(epoch))
	binary.BigEndian.PutUint32(b[offBaseSeq:], uint32(baseSeq))
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
	return b
}

// nextSeq advances an idempotent sequence past a batch of n offsets,
// wrapping at math.MaxInt32 as Kafka does.
func nextSeq(seq int32, n int32) int32 {
	s := int64(seq) + int64(n)
	if s > 1<<31-1 {
		s -= 1 << 31
	}
	return int32(s)
}

// abortedFilter tracks, over one fetch response in offset order, which
// producers are inside an aborted transaction, the way Kafka's consumer
// does for read_committed.
type abortedFilter struct {
	pending []abortedTxn // sorted by first offset
	active  map[int64]bool
}

type abortedTxn struct {
	producerID  int64
	firstOffset int64
}

func newAbortedFilter(txns []abortedTxn) *abortedFilter {
	// The broker returns them in offset order; sort defensively.
	for i := 1; i < len(txns); i++ {
		for j := i; j > 0 && txns[j].firstOffset < txns[j-1].firstOffset; j-- {
			txns[j], txns[j-1] = txns[j-1], txns[j]
		}
	}
	return &abortedFilter{pending: txns, active: map[int64]bool{}}
}

// skip reports whether b must not be copied: control batches (markers,
// which a client cannot produce) and data of aborted transactions.
func (f *abortedFilter) skip(b batch) bool {
	for len(f.pending) > 0 && f.pending[0].firstOffset <= b.lastOffset() {
		f.active[f.pending[0].producerID] = true
		f.pending = f.pending[1:]
	}
	if b.control() {
		delete(f.active, b.producerID) // the transaction ends here
		return true
	}
	return b.transactional() && f.active[b.producerID]
}
