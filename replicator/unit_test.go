package replicator

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/internal/recordbatch"
)

// testBatch builds a valid v2 batch with n one-byte records.
func testBatch(base int64, n int32, attrs int16, pid int64) []byte {
	b := kmsg.RecordBatch{
		FirstOffset: base, Magic: 2, Attributes: attrs, LastOffsetDelta: n - 1,
		FirstTimestamp: 1000, MaxTimestamp: 1000, ProducerID: pid, ProducerEpoch: 3, FirstSequence: 7,
		NumRecords: n,
	}
	var recs []byte
	for i := range n {
		r := kmsg.Record{OffsetDelta: i, Value: []byte{byte(i)}}
		body := r.AppendTo(nil)
		recs = append(recs, body...)
	}
	b.Records = recs
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[recordbatch.OffLength:], uint32(len(raw)-recordbatch.LogOverhead))
	recordbatch.SetCRC(raw)
	return raw
}

func TestRewriteBatch(t *testing.T) {
	t.Parallel()
	src := testBatch(42, 3, recordbatch.AttrTransactional|1 /* gzip bit, body not compressed: irrelevant here */, 99)
	got := rewriteBatch(src, 12345, 0, 9)
	if len(got) != len(src) {
		t.Fatalf("length changed: %d -> %d", len(src), len(got))
	}
	bs, err := splitBatches(got)
	if err != nil || len(bs) != 1 {
		t.Fatalf("rewritten batch does not parse: %v %d", err, len(bs))
	}
	b := bs[0]
	if b.producerID != 12345 || b.transactional() || b.baseOffset != 0 {
		t.Errorf("fields: pid %d transactional %v base %d", b.producerID, b.transactional(), b.baseOffset)
	}
	if e := int16(binary.BigEndian.Uint16(got[recordbatch.OffEpoch:])); e != 0 {
		t.Errorf("epoch %d", e)
	}
	if s := int32(binary.BigEndian.Uint32(got[recordbatch.OffBaseSeq:])); s != 9 {
		t.Errorf("sequence %d", s)
	}
	if got[recordbatch.OffAttributes+1]&recordbatch.AttrCodec != 1 {
		t.Errorf("compression bits changed: attributes %x", got[recordbatch.OffAttributes:recordbatch.OffAttributes+2])
	}
	// Everything but base offset, CRC, attributes' transactional bit and
	// the producer fields is the source's.
	same := func(from, to int) bool { return bytes.Equal(got[from:to], src[from:to]) }
	if !same(recordbatch.OffNumRecords, len(src)) || !same(recordbatch.OffLength, recordbatch.OffCRC) ||
		!same(recordbatch.OffLastDelta, recordbatch.OffProducerID) {
		t.Error("bytes outside the producer fields changed")
	}
}

func TestSplitBatches(t *testing.T) {
	t.Parallel()
	a, b := testBatch(0, 2, 0, -1), testBatch(2, 5, 0, -1)
	corrupt := append([]byte(nil), a...)
	corrupt[len(corrupt)-1] ^= 0xff
	old := append([]byte(nil), a...)
	old[recordbatch.OffMagic] = 1
	tests := []struct {
		name    string
		raw     []byte
		want    []int64 // base offsets
		wantErr bool
	}{
		{name: "empty", raw: nil},
		{name: "two", raw: append(append([]byte(nil), a...), b...), want: []int64{0, 2}},
		{name: "truncated tail", raw: append(append([]byte(nil), a...), b[:30]...), want: []int64{0}},
		{name: "bad crc", raw: corrupt, wantErr: true},
		{name: "magic 1", raw: old, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := splitBatches(tt.raw)
			if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, ErrBadBatch)) {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d batches, want %d", len(got), len(tt.want))
			}
			for i := range got {
				if got[i].baseOffset != tt.want[i] {
					t.Errorf("batch %d at %d, want %d", i, got[i].baseOffset, tt.want[i])
				}
			}
		})
	}
}

func TestAbortedFilter(t *testing.T) {
	t.Parallel()
	// Offsets: 0-1 pid 1 txn (committed), 2 marker pid 1, 3-4 pid 2 txn
	// (aborted), 5 plain, 6 marker pid 2, 7 pid 2 txn (committed), 8 marker.
	bs := []batch{
		{baseOffset: 0, lastDelta: 1, attributes: recordbatch.AttrTransactional, producerID: 1},
		{baseOffset: 2, attributes: recordbatch.AttrTransactional | recordbatch.AttrControl, producerID: 1},
		{baseOffset: 3, lastDelta: 1, attributes: recordbatch.AttrTransactional, producerID: 2},
		{baseOffset: 5, producerID: 3},
		{baseOffset: 6, attributes: recordbatch.AttrTransactional | recordbatch.AttrControl, producerID: 2},
		{baseOffset: 7, attributes: recordbatch.AttrTransactional, producerID: 2},
		{baseOffset: 8, attributes: recordbatch.AttrTransactional | recordbatch.AttrControl, producerID: 2},
	}
	want := []bool{false, true, true, false, true, false, true}
	f := newAbortedFilter([]abortedTxn{{producerID: 2, firstOffset: 3}})
	for i, b := range bs {
		if got := f.skip(b); got != want[i] {
			t.Errorf("batch at %d: skip %v, want %v", b.baseOffset, got, want[i])
		}
	}
}

func TestSchedule(t *testing.T) {
	t.Parallel()
	s := time.Second
	tests := []struct {
		name string
		in   []Candidate
		want []string
	}{
		{
			name: "migrating first, then SJF across topics, then LPT within",
			in: []Candidate{
				{Topic: "big", Partition: 0, Lag: 50 * s}, {Topic: "big", Partition: 1, Lag: 90 * s},
				{Topic: "small", Partition: 0, Lag: 1 * s}, {Topic: "small", Partition: 1, Lag: 3 * s},
				{Topic: "cut", Partition: 0, Lag: 100 * s, Migrating: true}, {Topic: "cut", Partition: 1, Lag: 200 * s, Migrating: true},
				{Topic: "mid", Partition: 2, Lag: 10 * s},
			},
			want: []string{"cut/1", "cut/0", "small/1", "small/0", "mid/2", "big/1", "big/0"},
		},
		{
			name: "ties by name and partition",
			in:   []Candidate{{Topic: "b", Partition: 1}, {Topic: "a", Partition: 1}, {Topic: "a", Partition: 0}},
			want: []string{"a/0", "a/1", "b/1"},
		},
		{name: "empty", in: nil, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := append([]Candidate(nil), tt.in...)
			got := Schedule(tt.in)
			if len(got) != len(tt.want) {
				t.Fatalf("got %v", got)
			}
			for i := range got {
				if s := got[i].Topic + "/" + itoa(got[i].Partition); s != tt.want[i] {
					t.Errorf("position %d: %s, want %s (order %v)", i, s, tt.want[i], got)
				}
			}
			for i := range in {
				if in[i] != tt.in[i] {
					t.Fatal("Schedule modified its input")
				}
			}
		})
	}
}

// TestLagClockPause models a steady producer (one record a second, sampled
// every 250 ms) and a replicator that keeps up, pauses for 10 s, then
// catches up: the lag is ~0, then ~10 s, then 0.
func TestLagClockPause(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	var l lagClock
	end := func(at time.Duration) int64 { return int64(at / time.Second) } // records appended so far
	next := int64(0)
	lagAt := func(at time.Duration) time.Duration { return l.lag(t0.Add(at), next) }
	step := 250 * time.Millisecond
	for at := time.Duration(0); at <= 30*time.Second; at += step {
		l.observe(t0.Add(at), end(at))
		paused := at >= 10*time.Second && at < 20*time.Second
		if at == 20*time.Second {
			if got := lagAt(at); got < 10*time.Second-step || got > 10*time.Second+step {
				t.Errorf("lag after a 10 s pause: %v, want 10 s within one sample interval", got)
			}
		}
		if !paused {
			next = end(at) // copy everything sampled so far
			if got := lagAt(at); got != 0 {
				t.Errorf("at %v caught up: lag %v, want 0", at, got)
			}
		}
	}
	if len(l.samples) > 2 {
		t.Errorf("samples not pruned: %d kept", len(l.samples))
	}
}

func TestOffsetMap(t *testing.T) {
	t.Parallel()
	m := OffsetMap{}
	if !m.Exact(0) || m.ToDestination(0, 7) != 7 || m.ToSource(0, 7) != 7 {
		t.Fatal("empty map is not the identity")
	}
	// Source: 0-1 data, 2 marker, 3-4 data, 5-6 aborted+marker, 7.. data.
	m.add(Segment{Partition: 0, Dst: 2, Src: 3})
	m.add(Segment{Partition: 0, Dst: 4, Src: 7})
	m.add(Segment{Partition: 0, Dst: 4, Src: 8}) // rewritten after a resume: latest wins
	m.add(Segment{Partition: 0, Dst: 4, Src: 7})
	tests := []struct{ src, dst int64 }{{0, 0}, {1, 1}, {3, 2}, {4, 3}, {7, 4}, {9, 6}}
	for _, tt := range tests {
		if got := m.ToDestination(0, tt.src); got != tt.dst {
			t.Errorf("ToDestination(%d) = %d, want %d", tt.src, got, tt.dst)
		}
		if got := m.ToSource(0, tt.dst); got != tt.src {
			t.Errorf("ToSource(%d) = %d, want %d", tt.dst, got, tt.src)
		}
	}
	if got := m.ToDestination(0, 5); got != 4 {
		t.Errorf("a skipped source offset maps to the next record: got %d, want 4", got)
	}
	if m.Exact(0) || !m.Exact(1) {
		t.Error("Exact wrong")
	}
}

func TestTranslateGroupOffset(t *testing.T) {
	t.Parallel()
	// Source 0..9 copied to 0..9; a marker at 10; 11..19 aborted; 20.. at
	// destination 10..; copied up to source 25 (destination 15).
	mapped := OffsetMap{}
	mapped.add(Segment{Partition: 0, Dst: 0, Src: 0})
	mapped.add(Segment{Partition: 0, Dst: 10, Src: 20})
	tests := []struct {
		name        string
		m           OffsetMap
		src         int64
		pp          partProgress
		want        int64
		wantClamped bool
	}{
		{"exact inside", nil, 5, partProgress{hold: 10, progress: 10}, 5, false},
		{"exact at progress", nil, 10, partProgress{hold: 10, progress: 10}, 10, false},
		{"exact beyond progress", nil, 12, partProgress{hold: 10, progress: 10}, 10, true},
		{"mapped before gap", mapped, 7, partProgress{hold: 15, progress: 25}, 7, false},
		{"mapped on marker", mapped, 10, partProgress{hold: 15, progress: 25}, 10, false},
		{"mapped in aborted range", mapped, 15, partProgress{hold: 15, progress: 25}, 10, false},
		{"mapped after gap", mapped, 22, partProgress{hold: 15, progress: 25}, 12, false},
		{"mapped at progress", mapped, 25, partProgress{hold: 15, progress: 25}, 15, false},
		{"mapped beyond progress", mapped, 40, partProgress{hold: 15, progress: 25}, 15, true},
		// A trailing marker was read (progress 11) but no segment for it
		// exists yet: the map alone would say 11, D holds 10.
		{"trailing marker", OffsetMap{0: {{Partition: 0}}}, 11, partProgress{hold: 10, progress: 11}, 10, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, clamped := translateOffset(tt.m, 0, tt.src, tt.pp)
			if got != tt.want || clamped != tt.wantClamped {
				t.Errorf("translateOffset(%d) = %d, %v; want %d, %v", tt.src, got, clamped, tt.want, tt.wantClamped)
			}
		})
	}
}

func TestConfigDiff(t *testing.T) {
	src := map[string]string{"retention.ms": "2", "cleanup.policy": "delete"}
	dst := map[string]string{"retention.ms": "1", "cleanup.policy": "delete", "segment.bytes": "9", "max.message.bytes": "5"}
	prev := map[string]string{"retention.ms": "1", "max.message.bytes": "5"}
	got := configDiff("t", src, dst, prev)
	want := []ConfigChange{
		{Topic: "t", Key: "max.message.bytes", Old: "5", HadOld: true, Deleted: true},
		{Topic: "t", Key: "retention.ms", Old: "1", HadOld: true, New: "2"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("configDiff = %+v, want %+v", got, want)
	}
	if mirrored("min.insync.replicas") || mirrored("leader.replication.throttled.replicas") || !mirrored("retention.ms") {
		t.Error("controlled configs")
	}
}

// holeyRecord is one record of a batch built by holeyBatch.
type holeyRecord struct {
	delta   int32
	tsDelta int64
	key     []byte
	value   []byte
	headers []kmsg.Header
}

// holeyBatch builds a v2 batch as Kafka's log cleaner leaves it: base
// offset and last offset delta of the original batch, records at the given
// deltas only, the body compressed with codec (kgo's codecs).
func holeyBatch(t *testing.T, codec kgo.CompressionCodec, base int64, lastDelta int32, recs []holeyRecord) []byte {
	t.Helper()
	var body []byte
	maxTS := int64(0)
	for _, r := range recs {
		maxTS = max(maxTS, r.tsDelta)
		rec := kmsg.Record{TimestampDelta64: r.tsDelta, OffsetDelta: r.delta, Key: r.key, Value: r.value, Headers: r.headers}
		enc := rec.AppendTo(nil) // Length 0: one varint byte, replaced below
		body = binary.AppendVarint(body, int64(len(enc)-1))
		body = append(body, enc[1:]...)
	}
	attrs := int16(0)
	if comp, err := kgo.DefaultCompressor(codec); err != nil {
		t.Fatal(err)
	} else if comp != nil {
		var buf bytes.Buffer
		out, used := comp.Compress(&buf, body)
		if used <= 0 {
			t.Fatalf("compressing with %v: codec %d", codec, used)
		}
		body, attrs = append([]byte(nil), out...), int16(used)
	}
	b := kmsg.RecordBatch{
		FirstOffset: base, PartitionLeaderEpoch: 4, Magic: 2, Attributes: attrs | recordbatch.AttrTransactional, LastOffsetDelta: lastDelta,
		FirstTimestamp: 1_700_000_000_000, MaxTimestamp: 1_700_000_000_000 + maxTS, ProducerID: 77, ProducerEpoch: 2, FirstSequence: 40,
		NumRecords: int32(len(recs)), Records: body,
	}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[recordbatch.OffLength:], uint32(len(raw)-recordbatch.LogOverhead))
	recordbatch.SetCRC(raw)
	return raw
}

// decodeRecords reads a batch's records back, decompressing its body.
func decodeRecords(t *testing.T, raw []byte) (kmsg.RecordBatch, []kmsg.Record) {
	t.Helper()
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(raw); err != nil {
		t.Fatal(err)
	}
	body, err := kgo.DefaultDecompressor().Decompress(rb.Records, kgo.CompressionCodecType(rb.Attributes&recordbatch.AttrCodec))
	if err != nil {
		t.Fatalf("decompressing the re-encoded batch: %v", err)
	}
	var out []kmsg.Record
	for len(body) > 0 {
		l, w := binary.Varint(body)
		if w <= 0 || int(l)+w > len(body) {
			t.Fatalf("record cut short")
		}
		var r kmsg.Record
		if err := r.ReadFrom(body[:w+int(l)]); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
		body = body[w+int(l):]
	}
	return rb, out
}

func TestReencodeBatch(t *testing.T) {
	t.Parallel()
	rec := func(delta int32) holeyRecord {
		r := holeyRecord{delta: delta, tsDelta: int64(delta) * 3, key: []byte(fmt.Sprint("k", delta)), value: bytes.Repeat([]byte{byte(delta)}, 50+int(delta))}
		switch delta % 4 {
		case 1:
			r.key = nil // null key
		case 2:
			r.value = nil // tombstone
			r.headers = []kmsg.Header{{Key: "h", Value: []byte("v")}, {Key: "null"}}
		case 3:
			r.value = []byte{} // empty, not null
		}
		return r
	}
	recs := func(deltas ...int32) []holeyRecord {
		out := make([]holeyRecord, len(deltas))
		for i, d := range deltas {
			out[i] = rec(d)
		}
		return out
	}
	const base = 1000
	shapes := []struct {
		name      string
		lastDelta int32
		recs      []holeyRecord
		from      int64
		wantRuns  []srcRun
	}{
		{"hole at start", 9, recs(3, 4, 5, 6, 7, 8, 9), base, []srcRun{{base + 3, 7}}},
		{"holes in the middle", 9, recs(0, 1, 4, 7, 8, 9), base, []srcRun{{base, 2}, {base + 4, 1}, {base + 7, 3}}},
		{"hole at end", 9, recs(0, 1, 2, 3), base, []srcRun{{base, 4}}},
		{"one record", 9, recs(5), base, []srcRun{{base + 5, 1}}},
		{"no hole", 4, recs(0, 1, 2, 3, 4), base, []srcRun{{base, 5}}},
		{"resume inside", 9, recs(0, 1, 4, 7, 8, 9), base + 5, []srcRun{{base + 7, 3}}},
		{"resume past the last record", 9, recs(0, 1, 4), base + 5, nil},
	}
	codecs := []struct {
		name  string
		codec kgo.CompressionCodec
	}{
		{"none", kgo.NoCompression()}, {"gzip", kgo.GzipCompression()}, {"snappy", kgo.SnappyCompression()},
		{"lz4", kgo.Lz4Compression()}, {"zstd", kgo.ZstdCompression()},
	}
	for _, c := range codecs {
		for _, sh := range shapes {
			t.Run(c.name+"/"+sh.name, func(t *testing.T) {
				t.Parallel()
				src := holeyBatch(t, c.codec, base, sh.lastDelta, sh.recs)
				got, runs, err := reencodeBatch(src, sh.from)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(runs, sh.wantRuns) {
					t.Fatalf("runs %v, want %v", runs, sh.wantRuns)
				}
				if sh.wantRuns == nil {
					if got != nil {
						t.Fatal("a batch with nothing to copy was re-encoded")
					}
					return
				}
				bs, err := splitBatches(got) // checks length, magic and CRC-32C
				if err != nil || len(bs) != 1 {
					t.Fatalf("re-encoded batch does not parse: %v (%d batches)", err, len(bs))
				}
				if !bs[0].contiguous() {
					t.Errorf("re-encoded batch: %d records over %d offsets", bs[0].numRecords, bs[0].lastDelta+1)
				}
				srb, _ := decodeRecords(t, src)
				grb, grecs := decodeRecords(t, got)
				if grb.Attributes != srb.Attributes || grb.FirstTimestamp != srb.FirstTimestamp || grb.ProducerID != srb.ProducerID ||
					grb.ProducerEpoch != srb.ProducerEpoch || grb.FirstSequence != srb.FirstSequence ||
					grb.PartitionLeaderEpoch != srb.PartitionLeaderEpoch || grb.FirstOffset != srb.FirstOffset {
					t.Errorf("batch header changed: %+v -> %+v", srb, grb)
				}
				var want []holeyRecord
				for _, r := range sh.recs {
					if base+int64(r.delta) >= sh.from {
						want = append(want, r)
					}
				}
				if len(grecs) != len(want) || grb.NumRecords != int32(len(want)) || grb.LastOffsetDelta != int32(len(want)-1) {
					t.Fatalf("%d records (header: %d, last delta %d), want %d", len(grecs), grb.NumRecords, grb.LastOffsetDelta, len(want))
				}
				maxTS := int64(0)
				for i, r := range grecs {
					w := want[i]
					if r.OffsetDelta != int32(i) {
						t.Errorf("record %d: offset delta %d", i, r.OffsetDelta)
					}
					if r.TimestampDelta64 != w.tsDelta || !bytes.Equal(r.Key, w.key) || (r.Key == nil) != (w.key == nil) ||
						!bytes.Equal(r.Value, w.value) || (r.Value == nil) != (w.value == nil) || len(r.Headers) != len(w.headers) {
						t.Errorf("record %d differs: %+v, want %+v", i, r, w)
					}
					for j := range r.Headers {
						if r.Headers[j].Key != w.headers[j].Key || !bytes.Equal(r.Headers[j].Value, w.headers[j].Value) ||
							(r.Headers[j].Value == nil) != (w.headers[j].Value == nil) {
							t.Errorf("record %d header %d: %+v, want %+v", i, j, r.Headers[j], w.headers[j])
						}
					}
					maxTS = max(maxTS, w.tsDelta)
				}
				if grb.MaxTimestamp != grb.FirstTimestamp+maxTS {
					t.Errorf("max timestamp %d, want %d", grb.MaxTimestamp, grb.FirstTimestamp+maxTS)
				}
				if c.name == "none" && sh.name == "no hole" && !bytes.Equal(got, src) {
					t.Error("re-encoding an uncompressed batch without holes changed its bytes")
				}
			})
		}
	}
}

func TestReencodeBatchRejectsBadRecords(t *testing.T) {
	t.Parallel()
	good := holeyBatch(t, kgo.NoCompression(), 0, 3, []holeyRecord{{delta: 0}, {delta: 2}})
	backwards := holeyBatch(t, kgo.NoCompression(), 0, 3, []holeyRecord{{delta: 2}, {delta: 1}})
	beyond := holeyBatch(t, kgo.NoCompression(), 0, 3, []holeyRecord{{delta: 0}, {delta: 4}})
	short := append([]byte(nil), good...)
	binary.BigEndian.PutUint32(short[recordbatch.OffNumRecords:], 3) // claims a third record
	for name, raw := range map[string][]byte{"deltas go backwards": backwards, "delta beyond the last": beyond, "record count": short} {
		if _, _, err := reencodeBatch(raw, 0); !errors.Is(err, ErrBadBatch) {
			t.Errorf("%s: err %v, want ErrBadBatch", name, err)
		}
	}
}

func TestSegmentsForHoles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		dstEnd    int64
		delta     int64
		runs      []srcRun
		want      []Segment
		wantDelta int64
	}{
		{"contiguous, exact", 10, 0, []srcRun{{10, 5}}, nil, 0},
		{"contiguous after a gap", 10, 0, []srcRun{{13, 5}}, []Segment{{Dst: 10, Src: 13}}, 3},
		{"holes inside", 10, 3, []srcRun{{13, 2}, {17, 1}, {20, 3}},
			[]Segment{{Dst: 12, Src: 17}, {Dst: 13, Src: 20}}, 7},
		{"hole at start and inside", 0, 0, []srcRun{{2, 1}, {5, 1}},
			[]Segment{{Dst: 0, Src: 2}, {Dst: 1, Src: 5}}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			segs, delta, n := segmentsFor("", 0, tt.dstEnd, tt.delta, tt.runs)
			if !reflect.DeepEqual(segs, tt.want) || delta != tt.wantDelta {
				t.Fatalf("segments %+v delta %d, want %+v delta %d", segs, delta, tt.want, tt.wantDelta)
			}
			// The map built from these segments translates every copied
			// source offset to its destination and back, and a source
			// offset in a hole to the next copied record.
			m := OffsetMap{}
			if tt.delta != 0 {
				m.add(Segment{Dst: 0, Src: tt.delta})
			}
			for _, s := range segs {
				m.add(s)
			}
			d := tt.dstEnd
			var total int64
			for _, run := range tt.runs {
				for i := range int64(run.n) {
					if got := m.ToDestination(0, run.src+i); got != d {
						t.Errorf("ToDestination(%d) = %d, want %d", run.src+i, got, d)
					}
					if got := m.ToSource(0, d); got != run.src+i {
						t.Errorf("ToSource(%d) = %d, want %d", d, got, run.src+i)
					}
					d++
				}
				total += int64(run.n)
			}
			if n != total {
				t.Errorf("n %d, want %d", n, total)
			}
			for i := 1; i < len(tt.runs); i++ {
				prevEnd := tt.runs[i-1].src + int64(tt.runs[i-1].n)
				for src := prevEnd; src < tt.runs[i].src; src++ {
					if got, want := m.ToDestination(0, src), m.ToDestination(0, tt.runs[i].src); got != want {
						t.Errorf("hole offset %d -> %d, want the next record's %d", src, got, want)
					}
				}
			}
		})
	}
}

func TestOffsetMapRemoveAndKeys(t *testing.T) {
	t.Parallel()
	m := OffsetMap{}
	s := Segment{Topic: "orders.v2", Partition: 3, Dst: 40, Src: 44}
	m.add(Segment{Topic: "orders.v2", Partition: 3, Dst: 10, Src: 12})
	m.add(s)
	topic, p, dst, ok := parseSegmentKey(s.key())
	if !ok || topic != s.Topic || p != s.Partition || dst != s.Dst {
		t.Fatalf("parseSegmentKey(%q) = %q %d %d %v", s.key(), topic, p, dst, ok)
	}
	for _, bad := range []string{"", "a/b", "t/x/1", "t/1/y", "a/b/c/d"} {
		if _, _, _, ok := parseSegmentKey([]byte(bad)); ok {
			t.Errorf("parseSegmentKey(%q) accepted", bad)
		}
	}
	m.remove(3, 41) // no such segment
	m.remove(3, 40)
	if len(m[3]) != 1 || m[3][0].Dst != 10 || m.ToDestination(3, 50) != 48 {
		t.Errorf("after remove: %+v", m[3])
	}
}
