package replicator_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/replicator"
)

// TestPartitionErrorGaugeFollowsTheError: a step fails (fetch:
// NOT_LEADER_FOR_PARTITION, gauge set for that kind); the next step's
// produce is retried once (noteRetry replaces the error with
// NOT_ENOUGH_REPLICAS) and succeeds. No kind may stay at 1 on the healthy
// partition (the gauge once kept NOT_LEADER there).
func TestPartitionErrorGaugeFollowsTheError(t *testing.T) {
	s, err := embedded.Start(embedded.Brokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	d, err := embedded.Start(embedded.Brokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	const topic = "gauge"
	ctx := context.Background()
	scl, err := kgo.NewClient(kgo.SeedBrokers(s.Addrs()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer scl.Close()
	if _, err := kadm.NewClient(scl).CreateTopic(ctx, 1, -1, nil, topic); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := scl.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var fetchFailed, produceFailed atomic.Bool
	s.Kfake().ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		s.Kfake().KeepControl()
		fr := req.(*kmsg.FetchRequest)
		if fetchFailed.Load() || len(fr.Topics) != 1 {
			return nil, nil, false
		}
		fetchFailed.Store(true)
		resp := fr.ResponseKind().(*kmsg.FetchResponse)
		resp.SetVersion(fr.Version)
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = fr.Topics[0].Topic, fr.Topics[0].TopicID
		rp := kmsg.NewFetchResponseTopicPartition()
		rp.Partition = fr.Topics[0].Partitions[0].Partition
		rp.ErrorCode = kerr.NotLeaderForPartition.Code
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
	d.Kfake().ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		d.Kfake().KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		if produceFailed.Load() || !fetchFailed.Load() || len(pr.Topics) != 1 || pr.Topics[0].Topic != topic {
			return nil, nil, false
		}
		produceFailed.Store(true)
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		resp.SetVersion(pr.Version)
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = topic
		rp := kmsg.NewProduceResponseTopicPartition()
		rp.Partition = pr.Topics[0].Partitions[0].Partition
		rp.ErrorCode = kerr.NotEnoughReplicas.Code
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})

	reg := prometheus.NewRegistry()
	rn := run(t, s.Addrs(), d.Addrs(), replicator.Topics(topic), replicator.MaxBackoff(100*time.Millisecond), replicator.Registry(reg))
	defer rn.stop(t)
	waitCaughtUp(t, rn, s.Addrs(), topic)
	// The worker settles a partition's status after the step that
	// succeeded: wait for both faults and a clean status.
	wait.For(t, 30*time.Second, "both faults injected and every partition healthy", func() string {
		if !fetchFailed.Load() || !produceFailed.Load() {
			return fmt.Sprintf("faults injected: fetch %v produce %v", fetchFailed.Load(), produceFailed.Load())
		}
		for _, ps := range rn.r.Status()[0].Partitions {
			if ps.Err != nil {
				return fmt.Sprintf("partition %d: %v", ps.Partition, ps.Err)
			}
		}
		return ""
	})
	for _, ps := range rn.r.Status()[0].Partitions {
		t.Logf("partition %d: err %v", ps.Partition, ps.Err)
	}
	for _, kind := range []string{kerr.NotLeaderForPartition.Message, kerr.NotEnoughReplicas.Message} {
		if v, ok := gaugeValue(t, reg, "baton_replicator_partition_error", map[string]string{"topic": topic, "partition": "0", "kind": kind}); ok {
			t.Errorf("baton_replicator_partition_error{kind=%q} = %v on a caught-up partition with no error", kind, v)
		}
	}
}
