// Package recordbatch is the Kafka v2 record batch header (magic 2, Kafka
// 0.11+) as the agent and the replicator both use it: the byte offsets and
// attribute bits, the CRC rule, idempotent sequence arithmetic, and reading
// and rewriting the producer fields (producer id, producer epoch and base
// sequence). Both write batches under a producer id the destination
// cluster allocated, so both need the same few bytes of layout; nothing
// here decodes records.
//
// The CRC-32C (Castagnoli) at bytes 17..21 covers Attributes (byte 21) to
// the end of the batch, and so covers the producer fields: rewriting any of
// them means recomputing it. Length does not change.
package recordbatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
)

// Byte offsets in a v2 batch header.
const (
	HeaderLen     = 61
	OffBaseOffset = 0
	OffLength     = 8
	LogOverhead   = 12 // base offset and length: the bytes Length does not count
	OffMagic      = 16
	OffCRC        = 17
	OffAttributes = 21
	OffLastDelta  = 23 // last offset delta: records in the batch minus one
	OffBaseTime   = 27 // the first record's timestamp, Unix milliseconds
	OffProducerID = 43
	OffEpoch      = 51
	OffBaseSeq    = 53
	OffNumRecords = 57
)

// Bits of the attributes field (two bytes at OffAttributes).
const (
	AttrCodec         = 0x07 // compression codec: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd
	AttrLogAppendTime = 0x08 // timestamps are the broker's append time
	AttrTransactional = 0x10 // the batch is part of a transaction
	AttrControl       = 0x20 // a control batch (transaction marker)
)

// ErrBadBatch is returned for bytes that do not start with a whole v2 batch.
var ErrBadBatch = errors.New("recordbatch: not a whole v2 record batch")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Producer is the producer identity a batch carries: Kafka's (producer id,
// epoch) and the sequence of the batch's first record. ID -1 means the
// batch is not idempotent.
type Producer struct {
	ID      int64
	Epoch   int16
	BaseSeq int32
}

// ReadProducer returns the producer fields of the batch that starts b.
// ok is false if b is shorter than a v2 header or not magic 2.
func ReadProducer(b []byte) (p Producer, ok bool) {
	if len(b) < HeaderLen || b[OffMagic] != 2 {
		return Producer{}, false
	}
	return Producer{
		ID:      int64(binary.BigEndian.Uint64(b[OffProducerID:])),
		Epoch:   int16(binary.BigEndian.Uint16(b[OffEpoch:])),
		BaseSeq: int32(binary.BigEndian.Uint32(b[OffBaseSeq:])),
	}, true
}

// BaseTimestamp returns the timestamp of the first record of the v2 batch
// that starts b (Unix milliseconds), and whether it is one the producer
// set: ok is false for a short or non-v2 header, and for a batch whose
// timestamps are the broker's append time.
func BaseTimestamp(b []byte) (ms int64, ok bool) {
	if len(b) < HeaderLen || b[OffMagic] != 2 || binary.BigEndian.Uint16(b[OffAttributes:])&AttrLogAppendTime != 0 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(b[OffBaseTime:])), true
}

// Transactional says whether the v2 batch that starts b is transactional.
func Transactional(b []byte) bool {
	return len(b) >= HeaderLen && binary.BigEndian.Uint16(b[OffAttributes:])&AttrTransactional != 0
}

// BatchLen returns the size of the v2 batch that starts b, checking that
// b holds all of it.
func BatchLen(b []byte) (int, error) {
	if len(b) < HeaderLen || b[OffMagic] != 2 {
		return 0, fmt.Errorf("%w: %d bytes", ErrBadBatch, len(b))
	}
	n := LogOverhead + int(int32(binary.BigEndian.Uint32(b[OffLength:])))
	if n < HeaderLen || n > len(b) {
		return 0, fmt.Errorf("%w: length field says %d bytes, have %d", ErrBadBatch, n, len(b))
	}
	return n, nil
}

// OffsetSpan returns how many offsets the v2 batches in b take once
// written: the sum of each batch's last offset delta plus one. ok is false
// if b is not a sequence of whole v2 batches.
func OffsetSpan(b []byte) (n int64, ok bool) {
	for len(b) > 0 {
		l, err := BatchLen(b)
		if err != nil {
			return 0, false
		}
		n += int64(int32(binary.BigEndian.Uint32(b[OffLastDelta:]))) + 1
		b = b[l:]
	}
	return n, true
}

// SetProducer writes p's fields into the batch header at the start of b,
// in place, and recomputes the CRC-32C over Attributes to the end of b.
// b must be exactly one batch (see BatchLen); nothing else changes.
func SetProducer(b []byte, p Producer) {
	binary.BigEndian.PutUint64(b[OffProducerID:], uint64(p.ID))
	binary.BigEndian.PutUint16(b[OffEpoch:], uint16(p.Epoch))
	binary.BigEndian.PutUint32(b[OffBaseSeq:], uint32(p.BaseSeq))
	SetCRC(b)
}

// CRC returns the CRC-32C the batch b (exactly one batch) should carry:
// the checksum of Attributes to the end.
func CRC(b []byte) uint32 {
	return crc32.Checksum(b[OffAttributes:], castagnoli)
}

// SetCRC recomputes the CRC-32C of the batch b (exactly one batch).
func SetCRC(b []byte) {
	binary.BigEndian.PutUint32(b[OffCRC:], CRC(b))
}

// CRCValid says whether the CRC-32C of the batch b (exactly one batch)
// matches its bytes.
func CRCValid(b []byte) bool {
	return len(b) >= HeaderLen && binary.BigEndian.Uint32(b[OffCRC:]) == CRC(b)
}

// SeqDistance returns how far sequence seq is past from, the way Kafka
// counts: sequences run from 0 to math.MaxInt32 and then wrap to 0, so the
// distance is taken modulo 2^31 and is never negative.
func SeqDistance(from, seq int32) int32 {
	d := int64(seq) - int64(from)
	if d < 0 {
		d += 1 << 31
	}
	return int32(d)
}

// NextSeq returns the sequence n records after seq, the way Kafka counts:
// past math.MaxInt32 it wraps to 0. It undoes SeqDistance:
// SeqDistance(seq, NextSeq(seq, n)) is n for 0 <= n <= math.MaxInt32.
func NextSeq(seq, n int32) int32 {
	s := int64(seq) + int64(n)
	if s > math.MaxInt32 {
		s -= 1 << 31
	}
	return int32(s)
}
