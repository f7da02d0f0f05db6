package replicator_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/replicator"
)

// A rollback after Stop restarts the topic's copy (Start), and its fresh
// partition state reads its record of recent batches back from S. One
// failed fetch there (rollbacks often come with source trouble) must not
// cost the record for good: the next start reads it again, and the next
// Stop hands over the same batches.
func TestRecentBatchesSurviveAFailedReadBack(t *testing.T) {
	t.Parallel()
	s, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	d, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	const topic = "seedfail"
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Addrs()...), kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation(),
		kgo.MaxBufferedRecords(1)) // one record per batch
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()

	rn := run(t, s.Addrs(), d.Addrs(), replicator.Topics(topic))
	defer rn.stop(t)
	waitCaughtUp(t, rn, s.Addrs(), topic)
	first, err := rn.r.Stop(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Recent) != 5 {
		t.Fatalf("first Stop handed over %d batches, want the producer's last 5", len(first.Recent))
	}

	// One transient error on the next read_committed fetch from S.
	if true { // one NOT_LEADER on a source Fetch during the read-back
		s.Kfake().ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
			req := kr.(*kmsg.FetchRequest)
			if req.IsolationLevel != 1 || len(req.Topics) != 1 {
				return nil, nil, false
			}
			resp := req.ResponseKind().(*kmsg.FetchResponse)
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic, rt.TopicID = req.Topics[0].Topic, req.Topics[0].TopicID
			for _, p := range req.Topics[0].Partitions {
				rp := kmsg.NewFetchResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.NotLeaderForPartition.Code
				rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
			return resp, nil, true
		})
	}
	rn.r.Start(topic) // the cutover rolled back
	waitCaughtUp(t, rn, s.Addrs(), topic)
	time.Sleep(200 * time.Millisecond)
	second, err := rn.r.Stop(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(second.Recent) != len(first.Recent) {
		t.Fatalf("after a rollback and one failed source fetch, Stop handed over %d batches, want the same %d (nothing was written since)",
			len(second.Recent), len(first.Recent))
	}
}
