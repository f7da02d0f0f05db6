package replicator

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
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
	binary.BigEndian.PutUint32(raw[8:12], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[offCRC:], crc32.Checksum(raw[offAttributes:], castagnoli))
	return raw
}

func TestRewriteBatch(t *testing.T) {
	t.Parallel()
	src := testBatch(42, 3, attrTransactional|1 /* gzip bit, body not compressed: irrelevant here */, 99)
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
	if e := int16(binary.BigEndian.Uint16(got[offEpoch:])); e != 0 {
		t.Errorf("epoch %d", e)
	}
	if s := int32(binary.BigEndian.Uint32(got[offBaseSeq:])); s != 9 {
		t.Errorf("sequence %d", s)
	}
	if got[offAttributes+1]&0x07 != 1 {
		t.Errorf("compression bits changed: attributes %x", got[offAttributes:offAttributes+2])
	}
	// Everything but base offset, CRC, attributes' transactional bit and
	// the producer fields is the source's.
	if !bytes.Equal(got[offNumRecords:], src[offNumRecords:]) || !bytes.Equal(got[8:offCRC], src[8:offCRC]) ||
		!bytes.Equal(got[offLastDelta:offProducerID], src[offLastDelta:offProducerID]) {
		t.Error("bytes outside the producer fields changed")
	}
}

func TestSplitBatches(t *testing.T) {
	t.Parallel()
	a, b := testBatch(0, 2, 0, -1), testBatch(2, 5, 0, -1)
	corrupt := append([]byte(nil), a...)
	corrupt[len(corrupt)-1] ^= 0xff
	old := append([]byte(nil), a...)
	old[offMagic] = 1
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
		{baseOffset: 0, lastDelta: 1, attributes: attrTransactional, producerID: 1},
		{baseOffset: 2, attributes: attrTransactional | attrControl, producerID: 1},
		{baseOffset: 3, lastDelta: 1, attributes: attrTransactional, producerID: 2},
		{baseOffset: 5, producerID: 3},
		{baseOffset: 6, attributes: attrTransactional | attrControl, producerID: 2},
		{baseOffset: 7, attributes: attrTransactional, producerID: 2},
		{baseOffset: 8, attributes: attrTransactional | attrControl, producerID: 2},
	}
	want := []bool{false, true, true, false, true, false, true}
	f := newAbortedFilter([]abortedTxn{{producerID: 2, firstOffset: 3}})
	for i, b := range bs {
		if got := f.skip(b); got != want[i] {
			t.Errorf("batch at %d: skip %v, want %v", b.baseOffset, got, want[i])
		}
	}
}

func TestNextSeqWraps(t *testing.T) {
	t.Parallel()
	if got := nextSeq(1<<31-2, 3); got != 1 {
		t.Errorf("nextSeq wraps to %d, want 1", got)
	}
	if got := nextSeq(5, 3); got != 8 {
		t.Errorf("nextSeq = %d, want 8", got)
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
