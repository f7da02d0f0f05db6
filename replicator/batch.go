package replicator

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/internal/recordbatch"
)

// The v2 record batch header (docs/kafka-facts.md): offsets, attribute
// bits, CRC-32C and sequence arithmetic come from internal/recordbatch.

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
func (b batch) control() bool       { return b.attributes&recordbatch.AttrControl != 0 }
func (b batch) transactional() bool { return b.attributes&recordbatch.AttrTransactional != 0 }

// contiguous reports whether the batch's records occupy every offset from
// its base to its last (compaction can leave holes inside a batch).
func (b batch) contiguous() bool { return int64(b.numRecords) == int64(b.lastDelta)+1 }

// srcRun is a run of n consecutive source offsets starting at src, held by
// consecutive records of a batch as written to D.
type srcRun struct {
	src int64
	n   int32
}

// splitBatches splits fetched record bytes into whole v2 batches. A
// truncated batch at the end (fetches may cut one off) is dropped; anything
// that is not magic 2 is an error.
func splitBatches(raw []byte) ([]batch, error) {
	var out []batch
	for len(raw) >= recordbatch.LogOverhead {
		length := int32(binary.BigEndian.Uint32(raw[recordbatch.OffLength:]))
		if length < recordbatch.HeaderLen-recordbatch.LogOverhead {
			return out, fmt.Errorf("%w: length %d", ErrBadBatch, length)
		}
		total := recordbatch.LogOverhead + int(length)
		if total > len(raw) {
			break // truncated by the fetch size limit
		}
		b := raw[:total:total]
		if b[recordbatch.OffMagic] != 2 {
			return out, fmt.Errorf("%w: %w: magic %d (only v2 batches are copied)", ErrUnsupported, ErrBadBatch, b[recordbatch.OffMagic])
		}
		if want, got := binary.BigEndian.Uint32(b[recordbatch.OffCRC:]), recordbatch.CRC(b); want != got {
			return out, fmt.Errorf("%w: crc %08x, computed %08x", ErrBadBatch, want, got)
		}
		out = append(out, batch{
			raw:        b,
			baseOffset: int64(binary.BigEndian.Uint64(b[recordbatch.OffBaseOffset:])),
			lastDelta:  int32(binary.BigEndian.Uint32(b[recordbatch.OffLastDelta:])),
			numRecords: int32(binary.BigEndian.Uint32(b[recordbatch.OffNumRecords:])),
			attributes: int16(binary.BigEndian.Uint16(b[recordbatch.OffAttributes:])),
			producerID: int64(binary.BigEndian.Uint64(b[recordbatch.OffProducerID:])),
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
	binary.BigEndian.PutUint64(b[recordbatch.OffBaseOffset:], 0)
	attrs := binary.BigEndian.Uint16(b[recordbatch.OffAttributes:]) &^ recordbatch.AttrTransactional
	binary.BigEndian.PutUint16(b[recordbatch.OffAttributes:], attrs)
	recordbatch.SetProducer(b, recordbatch.Producer{ID: producerID, Epoch: epoch, BaseSeq: baseSeq})
	return b
}

// decompressor undoes any Kafka codec; kgo's default one is safe for
// concurrent use.
var decompressor = kgo.DefaultDecompressor()

// compressors holds one kgo compressor per codec (index = codec type),
// built on first use; kgo's compressors are safe for concurrent use.
var compressors = sync.OnceValues(func() ([5]kgo.Compressor, error) {
	var out [5]kgo.Compressor
	for i, c := range []kgo.CompressionCodec{kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()} {
		comp, err := kgo.DefaultCompressor(c)
		if err != nil {
			return out, err
		}
		out[i+1] = comp
	}
	return out, nil
})

// reencodeBatch returns a v2 batch holding raw's records at source offsets
// from on, renumbered with contiguous offset deltas 0..n-1, and the runs of
// source offsets they came from. Compaction leaves batches whose records do
// not fill their offset range (the cleaner keeps a batch's base and last
// offset so that producer sequences survive), and a resume can start inside
// a batch; Kafka refuses a produced batch whose deltas have holes. Records
// keep their bytes but the offset delta (key, value, headers, attributes,
// timestamp delta); the batch keeps its codec (decompressed and compressed
// again with kgo's codecs), base timestamp, attributes and producer fields;
// the last offset delta, record count, max timestamp (create time), length
// and CRC-32C are recomputed. No record at or after from returns nil runs.
func reencodeBatch(raw []byte, from int64) ([]byte, []srcRun, error) {
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(raw); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrBadBatch, err)
	}
	codec := rb.Attributes & recordbatch.AttrCodec
	if codec > 4 {
		return nil, nil, fmt.Errorf("%w: compression codec %d", ErrBadBatch, codec)
	}
	body, err := decompressor.Decompress(rb.Records, kgo.CompressionCodecType(codec))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: decompressing: %v", ErrBadBatch, err)
	}
	var (
		recs   []byte
		runs   []srcRun
		n      int32
		maxTS  = rb.FirstTimestamp
		prev   = int32(-1)
		scr    []byte
		record kmsg.Record
	)
	for i := int32(0); i < rb.NumRecords; i++ {
		l, w := binary.Varint(body)
		if w <= 0 || l < 0 || int64(len(body)-w) < l {
			return nil, nil, fmt.Errorf("%w: record %d of the batch at %d is cut short", ErrBadBatch, i, rb.FirstOffset)
		}
		one := body[:w+int(l)]
		body = body[w+int(l):]
		if err := record.ReadFrom(one); err != nil {
			return nil, nil, fmt.Errorf("%w: record %d of the batch at %d: %v", ErrBadBatch, i, rb.FirstOffset, err)
		}
		if record.OffsetDelta <= prev || record.OffsetDelta > rb.LastOffsetDelta {
			return nil, nil, fmt.Errorf("%w: record %d of the batch at %d has offset delta %d after %d (last %d)",
				ErrBadBatch, i, rb.FirstOffset, record.OffsetDelta, prev, rb.LastOffsetDelta)
		}
		prev = record.OffsetDelta
		off := rb.FirstOffset + int64(record.OffsetDelta)
		if off < from {
			continue
		}
		if k := len(runs) - 1; k >= 0 && runs[k].src+int64(runs[k].n) == off {
			runs[k].n++
		} else {
			runs = append(runs, srcRun{src: off, n: 1})
		}
		maxTS = max(maxTS, rb.FirstTimestamp+record.TimestampDelta64)
		record.OffsetDelta = n
		record.Length = 0 // one varint byte, replaced by the real length
		scr = record.AppendTo(scr[:0])
		recs = binary.AppendVarint(recs, int64(len(scr)-1))
		recs = append(recs, scr[1:]...)
		n++
	}
	if len(body) != 0 {
		return nil, nil, fmt.Errorf("%w: %d bytes after the last record of the batch at %d", ErrBadBatch, len(body), rb.FirstOffset)
	}
	if n == 0 {
		return nil, nil, nil
	}
	if codec != 0 {
		comps, err := compressors()
		if err != nil {
			return nil, nil, fmt.Errorf("replicator: compressors: %w", err)
		}
		var buf bytes.Buffer
		out, used := comps[codec].Compress(&buf, recs)
		if used != kgo.CompressionCodecType(codec) {
			return nil, nil, fmt.Errorf("replicator: compressing the batch at %d with codec %d failed", rb.FirstOffset, codec)
		}
		recs = out
	}
	rb.LastOffsetDelta = n - 1
	rb.NumRecords = n
	if rb.Attributes&recordbatch.AttrLogAppendTime == 0 {
		rb.MaxTimestamp = maxTS
	}
	rb.Records = recs
	b := rb.AppendTo(make([]byte, 0, recordbatch.HeaderLen+len(recs)))
	binary.BigEndian.PutUint32(b[recordbatch.OffLength:], uint32(len(b)-recordbatch.LogOverhead))
	recordbatch.SetCRC(b)
	return b, runs, nil
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
