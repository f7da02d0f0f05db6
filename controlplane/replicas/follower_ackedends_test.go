package replicas

import (
	"context"
	"strings"
	"testing"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/migration"
)

// TestFollowerRecordDropsAckedEnds: an agent acked records of a PROXY
// topic above the source high watermark (acks=1) and reported their end to
// the leader; its next heartbeat (the same report) went to a follower,
// and then the agent stopped. As with the leader alone
// (TestCutoverWaitsForRecordsAckedAboveTheHighWatermark), the cutover must
// wait for the destination to hold what the agent acked: the follower
// records the acked ends of every topic, and the leader keeps an agent's
// acked ends of a topic its record does not carry. The agent is silent
// from then on, so the drain also shows that an idle watch of the records
// is asked for its progress.
func TestFollowerRecordDropsAckedEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := startKafka(t, ctx)
	const topic, above = "acks-one", 3
	k.produce(t, ctx, topic, 20)
	ends, err := k.repl.SourceEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	ls, fs := replicaStores(t, ctx)
	p := startPlaneStore(t, ctx, ls, k, controlplane.ReplicaID("L"))
	f, _ := startFollower(t, ctx, fs, k, "F")
	if _, err := p.cp.AddTopic(ctx, controlplane.TopicSpec{Name: topic, State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	v := p.cp.Version()
	eventually(t, ctx, "the follower at the leader's version", func() bool { return f.Version() == v })

	req := &batonv1.HeartbeatRequest{NodeId: "a", AckedVersion: v,
		Topics: []*batonv1.TopicDrain{{Topic: topic, AckedEnds: map[int32]int64{0: ends[0] + above}}}}
	if resp, err := p.cp.Heartbeat(ctx, req); err != nil || !resp.GetGranted() {
		t.Fatalf("leader's answer: %v, %v", resp, err)
	}
	if resp, err := f.Heartbeat(ctx, req); err != nil || !resp.GetGranted() {
		t.Fatalf("follower's answer: %v, %v", resp, err)
	}
	eventually(t, ctx, "the leader merged the follower's record", func() bool { return agentView(p, "a").Replica == "F" })

	migrateWhenGateOpens(t, ctx, p, topic)
	eventually(t, ctx, "the cutover waits for the acked records, or completes", func() bool {
		for _, l := range eventLines(t, ctx, p, topic) {
			if strings.Contains(l, "above the source high watermark") {
				return true
			}
		}
		if top, _ := p.cp.Topic(topic); top.State == migration.Complete {
			t.Fatalf("%s COMPLETE without waiting for %s/0 up to %d, which agent a acked and reported; leader's view of a: %+v",
				topic, topic, ends[0]+above, agentView(p, "a").Agent)
		}
		return false
	})
}
