package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/internal/recordbatch"
)

// TestPIDMapRetryBeforeStreamIsRefused: a retry of a batch sent before its
// mapping was evicted arrives after a later batch opened a fresh mapping:
// no destination sequence can hold it, so it is refused (the agent answers
// OUT_OF_ORDER_SEQUENCE_NUMBER), never sent with a sequence wrapped to 2^31.
func TestPIDMapRetryBeforeStreamIsRefused(t *testing.T) {
	t.Parallel()
	var fa fakeAlloc
	now := time.Unix(1e9, 0)
	m := newPIDMap(1, time.Hour, fa.alloc)
	m.now = func() time.Time { return now }
	p := tp{"t", 0}
	get := func(id int64, seq int32) (recordbatch.Producer, error) {
		now = now.Add(time.Millisecond)
		return m.destination(context.Background(), recordbatch.Producer{ID: id, BaseSeq: seq}, p)
	}
	mustGet := func(id int64, seq int32) {
		t.Helper()
		if _, err := get(id, seq); err != nil {
			t.Fatal(err)
		}
	}
	mustGet(7, 0) // A's batch 0..4 goes to D; its answer is lost
	mustGet(8, 0) // producer B: the map is full, A is evicted
	mustGet(7, 5) // A's pipelined batch 5: a fresh mapping, its stream starts here
	if r, err := get(7, 0); !errors.Is(err, errBeforeStream) {
		t.Fatalf("retry of seq 0 after the eviction: %+v, %v; want errBeforeStream", r, err)
	}
	// Sequences at and after the stream's start, across the int32 wrap,
	// still map.
	if r, err := get(7, 10); err != nil || r.BaseSeq != 5 {
		t.Fatalf("seq 10: %+v, %v; want destination seq 5", r, err)
	}
}

// TestGapAfterAnyRetriableError: once a connection was answered a
// retriable error for an idempotent batch (not only NOT_LEADER_OR_FOLLOWER:
// NOT_ENOUGH_REPLICAS too), the producer's later batches for the partition
// are refused until the failed one is resent, so none of them can be
// written (or open the destination's stream) ahead of it.
func TestGapAfterAnyRetriableError(t *testing.T) {
	t.Parallel()
	for _, code := range []int16{kerr.NotLeaderForPartition.Code, kerr.NotEnoughReplicas.Code, kerr.RequestTimedOut.Code} {
		t.Run(kerr.ErrorForCode(code).(*kerr.Error).Message, func(t *testing.T) {
			var ps pins
			req := func(seq int32) *kmsg.ProduceRequest {
				r := kmsg.NewPtrProduceRequest()
				b := pinTestSeqBatch("v", 42, 0, seq)
				r.Topics = []kmsg.ProduceRequestTopic{{Topic: "t", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: b}}}}
				return r
			}
			res := []kmsg.ProduceResponseTopicPartition{{Partition: 0, ErrorCode: code}}
			ps.noteGaps(req(0), res)
			codes := []int16{0}
			shards := []*shard{{idx: []int{0}}}
			if out := ps.dropAfterGap(req(5), shards, codes); len(out) != 0 || codes[0] == 0 {
				t.Fatalf("a batch after the failed one went on (codes %v)", codes)
			}
			codes = []int16{0}
			if out := ps.dropAfterGap(req(0), []*shard{{idx: []int{0}}}, codes); len(out) != 1 || codes[0] != 0 {
				t.Fatalf("the resend of the failed batch was refused (codes %v)", codes)
			}
		})
	}
}
