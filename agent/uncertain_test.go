package agent_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/internal/recordbatch"
)

// rawBatch builds an uncompressed, non-idempotent v2 record batch holding
// values, with a correct CRC-32C.
func rawBatch(values ...string) []byte {
	var recs []byte
	for i, v := range values {
		var r []byte
		r = append(r, 0)                          // attributes
		r = binary.AppendVarint(r, 0)             // timestamp delta
		r = binary.AppendVarint(r, int64(i))      // offset delta
		r = binary.AppendVarint(r, -1)            // null key
		r = binary.AppendVarint(r, int64(len(v))) // value
		r = append(r, v...)                       //
		r = binary.AppendVarint(r, 0)             // no headers
		recs = binary.AppendVarint(recs, int64(len(r)))
		recs = append(recs, r...)
	}
	now := time.Now().UnixMilli()
	b := binary.BigEndian.AppendUint64(nil, 0)       // base offset
	b = binary.BigEndian.AppendUint32(b, 0)          // length, below
	b = binary.BigEndian.AppendUint32(b, 0xffffffff) // partition leader epoch
	b = append(b, 2)                                 // magic
	b = binary.BigEndian.AppendUint32(b, 0)          // crc, below
	b = binary.BigEndian.AppendUint16(b, 0)          // attributes
	b = binary.BigEndian.AppendUint32(b, uint32(len(values)-1))
	b = binary.BigEndian.AppendUint64(b, uint64(now)) // first timestamp
	b = binary.BigEndian.AppendUint64(b, uint64(now)) // max timestamp
	b = binary.BigEndian.AppendUint64(b, ^uint64(0))  // producer id -1
	b = binary.BigEndian.AppendUint16(b, 0xffff)      // producer epoch -1
	b = binary.BigEndian.AppendUint32(b, 0xffffffff)  // base sequence -1
	b = binary.BigEndian.AppendUint32(b, uint32(len(values)))
	b = append(b, recs...)
	binary.BigEndian.PutUint32(b[recordbatch.OffLength:], uint32(len(b)-recordbatch.LogOverhead))
	recordbatch.SetCRC(b)
	return b
}

// produceRaw sends one produce request for topic/0 through the agent and
// returns the partition's error code.
func produceRaw(t *testing.T, addr, topic string, values ...string) int16 {
	t.Helper()
	code, err := produceOnce(context.Background(), newClient(t, addr), topic, values...)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// produceOnce sends one produce request for topic/0 on cl, without the
// client's retries, and returns the partition's error code. It does not
// touch t: tests call it from goroutines.
func produceOnce(ctx context.Context, cl *kgo.Client, topic string, values ...string) (int16, error) {
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 10000
	req.Topics = []kmsg.ProduceRequestTopic{{Topic: topic, Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: rawBatch(values...)}}}}
	resp, err := cl.Request(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("produce through the agent: %w", err)
	}
	pr := resp.(*kmsg.ProduceResponse)
	if len(pr.Topics) != 1 || len(pr.Topics[0].Partitions) != 1 {
		return 0, fmt.Errorf("produce response has %d topics", len(pr.Topics))
	}
	p := pr.Topics[0].Partitions[0]
	if p.CurrentLeader.LeaderID != -1 || p.CurrentLeader.LeaderEpoch != -1 {
		return 0, fmt.Errorf("response carries a leader hint %+v; the agent must strip it", p.CurrentLeader)
	}
	return p.ErrorCode, nil
}

// Invariant 5: a forwarded write whose outcome is unknown within the
// forward deadline is answered with a retriable error, never success.
func TestUncertainWritesAreRetriable(t *testing.T) {
	t.Parallel()
	notLeader := kerr.NotLeaderForPartition.Code

	t.Run("source slower than the forward deadline", func(t *testing.T) {
		t.Parallel()
		f := startFixture(t, nil, agent.ForwardDeadline(200*time.Millisecond))
		topic := "slow"
		createTopic(t, f.src.Bootstrap(), topic, 1)
		if code := produceRaw(t, f.addr, topic, "warm-up"); code != 0 {
			t.Fatalf("warm-up produce: %v", kerr.ErrorForCode(code))
		}
		kc := f.src.Kfake()
		release := make(chan struct{})
		kc.ControlKey(0, func(kmsg.Request) (kmsg.Response, error, bool) {
			kc.SleepControl(func() { <-release })
			return nil, nil, false // then let the broker write it
		})
		code := produceRaw(t, f.addr, topic, "slow")
		close(release)
		if code != notLeader {
			t.Fatalf("a produce stuck upstream past the deadline got %v, want NOT_LEADER_OR_FOLLOWER", kerr.ErrorForCode(code))
		}
	})

	t.Run("source connection dies mid-request", func(t *testing.T) {
		t.Parallel()
		f := startFixture(t, nil)
		topic := "dropped"
		createTopic(t, f.src.Bootstrap(), topic, 1)
		if code := produceRaw(t, f.addr, topic, "warm-up"); code != 0 {
			t.Fatalf("warm-up produce: %v", kerr.ErrorForCode(code))
		}
		f.src.Kfake().ControlKey(0, func(kmsg.Request) (kmsg.Response, error, bool) {
			return nil, errors.New("test: drop the connection"), true
		})
		if code := produceRaw(t, f.addr, topic, "lost?"); code != notLeader {
			t.Fatalf("a produce whose upstream connection died got %v, want NOT_LEADER_OR_FOLLOWER", kerr.ErrorForCode(code))
		}
		// The agent redials; the next produce lands.
		if code := produceRaw(t, f.addr, topic, "again"); code != 0 {
			t.Fatalf("produce after the upstream came back: %v", kerr.ErrorForCode(code))
		}
	})
}
