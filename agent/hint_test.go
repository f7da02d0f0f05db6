package agent_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestLeaderMoveHintNamesTheAgent: when a partition's leader moves, the old
// leader answers NOT_LEADER_OR_FOLLOWER with a KIP-951 hint naming the new
// one. The agent relays a hint that names itself at a bumped synthetic
// epoch, with its own endpoint, so the client retries at once instead of
// waiting for a metadata refresh (franz-go: its 5 s minimum age), routes
// the partition to the new leader, and reports the same epoch in later
// metadata (never backwards).
func TestLeaderMoveHintNamesTheAgent(t *testing.T) {
	t.Parallel()
	f := startFixture(t, nil)
	const topic = "hinted"
	createTopic(t, f.addr, topic, 1)
	cl := newClient(t, f.addr)
	ctx := context.Background()

	epochOf := func() int32 {
		t.Helper()
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("metadata for %s: %+v", topic, resp.Topics)
		}
		return resp.Topics[0].Partitions[0].LeaderEpoch
	}
	produce := func() kmsg.ProduceResponse {
		t.Helper()
		req := kmsg.NewPtrProduceRequest()
		req.Acks = -1
		req.TimeoutMillis = 10000
		req.Topics = []kmsg.ProduceRequestTopic{{Topic: topic, Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: rawBatch("v")}}}}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return *resp
	}

	if p := produce().Topics[0].Partitions[0]; p.ErrorCode != 0 {
		t.Fatalf("first produce: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	before := epochOf()

	kc := f.src.Kfake()
	if err := kc.MoveTopicPartition(topic, 0, (kc.LeaderFor(topic, 0)+1)%3); err != nil {
		t.Fatal(err)
	}
	// The agent still routes to the old leader: it answers with a hint.
	resp := produce()
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Fatalf("produce after the move: %v, want NOT_LEADER_OR_FOLLOWER from the old leader", kerr.ErrorForCode(p.ErrorCode))
	}
	self := f.agent.Addr()
	if p.CurrentLeader.LeaderID < 0 || p.CurrentLeader.LeaderEpoch <= before {
		t.Fatalf("hint %+v, want the agent at an epoch above %d", p.CurrentLeader, before)
	}
	if len(resp.Brokers) != 1 || resp.Brokers[0].NodeID != p.CurrentLeader.LeaderID ||
		net.JoinHostPort(resp.Brokers[0].Host, strconv.Itoa(int(resp.Brokers[0].Port))) != self {
		t.Fatalf("hint endpoints %+v, want only the agent (%s) as node %d", resp.Brokers, self, p.CurrentLeader.LeaderID)
	}

	// The client's immediate retry goes to the new leader.
	if p := produce().Topics[0].Partitions[0]; p.ErrorCode != 0 {
		t.Fatalf("retry after the hint: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	if after := epochOf(); after < p.CurrentLeader.LeaderEpoch {
		t.Fatalf("metadata epoch %d after a hint at %d: epochs went backwards", after, p.CurrentLeader.LeaderEpoch)
	}

	// A real client follows the hint: franz-go with its default 5 s
	// metadata minimum age keeps producing across a move (how long the
	// retry took is logged, not asserted).
	pcl := newClient(t, f.addr, kgo.DefaultProduceTopic(topic))
	if err := pcl.ProduceSync(ctx, &kgo.Record{Value: []byte("warm")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := kc.MoveTopicPartition(topic, 0, (kc.LeaderFor(topic, 0)+1)%3); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := pcl.ProduceSync(ctx, &kgo.Record{Value: []byte("after the move")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	t.Logf("franz-go's produce across a leader move took %v", time.Since(start))
}
