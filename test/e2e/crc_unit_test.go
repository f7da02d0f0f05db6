package e2e

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
)

// The CRC check must be able to fail: these cover its parts without a
// cluster.

// testBatch is a v2 batch header of n bytes in all (n >= 61) with a valid
// CRC; fill varies its content.
func testBatch(baseOffset int64, lastDelta int32, fill byte, n int) []byte {
	b := make([]byte, n)
	binary.BigEndian.PutUint64(b, uint64(baseOffset))
	binary.BigEndian.PutUint32(b[batchLengthAt:], uint32(n-12))
	b[batchMagicAt] = 2
	binary.BigEndian.PutUint32(b[batchLastDAt:], uint32(lastDelta))
	for i := batchHeadLen; i < n; i++ {
		b[i] = fill
	}
	binary.BigEndian.PutUint32(b[batchCRCAt:], crc32.Checksum(b[batchAttrsAt:], castagnoli))
	return b
}

func TestWalkBatches(t *testing.T) {
	a, b := testBatch(0, 2, 'a', 70), testBatch(3, 0, 'b', 64)
	var got []batchHead
	if err := walkBatches(append(append([]byte(nil), a...), b...), false, func(h batchHead) { got = append(got, h) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].baseOffset != 0 || got[0].lastDelta != 2 || got[1].baseOffset != 3 ||
		got[0].crc != binary.BigEndian.Uint32(a[batchCRCAt:]) || got[1].crc != binary.BigEndian.Uint32(b[batchCRCAt:]) {
		t.Fatalf("walked %+v", got)
	}
	// A fetch cut inside the second batch: fine when partial batches are.
	cut := append(append([]byte(nil), a...), b[:20]...)
	got = nil
	if err := walkBatches(cut, true, func(h batchHead) { got = append(got, h) }); err != nil || len(got) != 1 {
		t.Fatalf("partial: %d batches, %v", len(got), err)
	}
	if err := walkBatches(cut, false, func(batchHead) {}); err == nil {
		t.Fatal("a cut batch at the agent walked without error")
	}
	// A rewritten byte without a new CRC.
	bad := append([]byte(nil), a...)
	bad[batchHeadLen] ^= 1
	if err := walkBatches(bad, false, func(batchHead) {}); err == nil || !strings.Contains(err.Error(), "CRC") {
		t.Fatalf("a corrupted batch: %v", err)
	}
}

func TestCompareCRCs(t *testing.T) {
	// CRC 4 arrived and failed: its records were resent in batch 5.
	seen := map[int32]map[uint32]crcCount{
		0: {1: {1, 1}, 2: {2, 1}, 4: {1, 0}, 5: {1, 1}},
		1: {3: {1, 1}},
	}
	for name, tc := range map[string]struct {
		stored   map[int32][]uint32
		want     []string // substrings, one per problem; none means fine
		unstored int
	}{
		"same":                          {stored: map[int32][]uint32{0: {1, 2, 5}, 1: {3}}, unstored: 1},
		"failed one stored after all":   {stored: map[int32][]uint32{0: {1, 2, 4, 5}, 1: {3}}},
		"retry sent twice stored twice": {stored: map[int32][]uint32{0: {1, 2, 2, 5}, 1: {3}}, unstored: 1},
		"rewritten":                     {stored: map[int32][]uint32{0: {1, 9, 5}, 1: {3}}, want: []string{"never arrived", "2 acked by the agent 1 times (arrived 2) and not stored"}, unstored: 1},
		"lost":                          {stored: map[int32][]uint32{0: {1, 2, 5}}, want: []string{"3 acked"}, unstored: 1},
		"duplicated":                    {stored: map[int32][]uint32{0: {1, 1, 2, 5}, 1: {3}}, want: []string{"stored 2 times but arrived 1 times"}, unstored: 1},
		"wrong partition":               {stored: map[int32][]uint32{0: {1, 2, 3, 5}}, want: []string{"never arrived", "3 acked"}, unstored: 1},
	} {
		got, unstored := compareCRCs(seen, tc.stored)
		if unstored != tc.unstored {
			t.Errorf("%s: %d failed batches not stored, want %d", name, unstored, tc.unstored)
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s: problems %q, want %d", name, got, len(tc.want))
			continue
		}
		for _, w := range tc.want {
			found := false
			for _, g := range got {
				found = found || strings.Contains(g, w)
			}
			if !found {
				t.Errorf("%s: no problem mentions %q in %q", name, w, got)
			}
		}
	}
}

func TestCRCRecorder(t *testing.T) {
	r := newCRCRecorder()
	f := r.New(filter.ConnInfo{})
	a, b := testBatch(0, 0, 'a', 61), testBatch(0, 0, 'b', 62)
	req := kmsg.NewPtrProduceRequest()
	req.Topics = []kmsg.ProduceRequestTopic{{Topic: "t", Partitions: []kmsg.ProduceRequestTopicPartition{
		{Partition: 0, Records: append(append([]byte(nil), a...), b...)},
		{Partition: 1, Records: a[:30]},
	}}}
	failed := kmsg.NewPtrProduceResponse()
	failed.Topics = []kmsg.ProduceResponseTopic{{Topic: "t", Partitions: []kmsg.ProduceResponseTopicPartition{{Partition: 0, ErrorCode: 6}, {Partition: 1}}}}
	acked := kmsg.NewPtrProduceResponse()
	acked.Topics = []kmsg.ProduceResponseTopic{{Topic: "t", Partitions: []kmsg.ProduceResponseTopicPartition{{Partition: 0}, {Partition: 1}}}}
	for _, resp := range []*kmsg.ProduceResponse{failed, acked} { // a failure, then its retry
		x := &filter.Exchange{Req: req}
		if st := f.(filter.RequestFilter).OnRequest(context.Background(), x); st != filter.Continue {
			t.Fatalf("the recorder stopped the chain: %v", st)
		}
		x.Resp = resp
		f.(filter.ResponseFilter).OnResponse(context.Background(), x)
	}
	got, bad := r.snapshot("t")
	ca, cb := binary.BigEndian.Uint32(a[batchCRCAt:]), binary.BigEndian.Uint32(b[batchCRCAt:])
	if want := (crcCount{arrived: 2, acked: 1}); got[0][ca] != want || got[0][cb] != want || len(got[0]) != 2 {
		t.Errorf("partition 0 recorded %v, want %08x and %08x arrived twice, acked once", got[0], ca, cb)
	}
	if len(bad) != 2 || !strings.Contains(bad[0], "partition 1") { // once per arrival
		t.Errorf("malformed batches recorded as %q", bad)
	}
}
