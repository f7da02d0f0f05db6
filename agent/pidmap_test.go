package agent_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/recordbatch"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
)

// An idempotent producer (franz-go's default) writes through the agent
// while its topic is PROXY, through the cutover and after COMPLETE, with no
// error: the agent maps its source producer id to one of the destination's
// and rewrites sequences so that the destination sees streams starting at 0
// (uncapped kfake, like Kafka 4.5, refuses a first sequence above 0 on a
// fresh partition, and the destination's partitions are fresh here: no
// replicator runs).
func TestIdempotentProducerAcrossCutover(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mode migration.HoldMode
	}{
		{"hold", migration.Hold},
		{"retriable", migration.Retriable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topic := "idem-" + tc.name
			const partitions = 3
			reg := prometheus.NewRegistry()
			f := startFixture(t, []agent.Route{{Topic: topic, State: migration.Proxy}}, agent.Registry(reg))
			createTopic(t, f.src.Bootstrap(), topic, partitions)
			createTopic(t, f.dst.Bootstrap(), topic, partitions)
			cl := newClient(t, f.addr, kgo.DefaultProduceTopic(topic), kgo.MetadataMinAge(100*time.Millisecond),
				kgo.ProducerLinger(5*time.Millisecond),
				// franz-go takes OUT_OF_ORDER_SEQUENCE_NUMBER and
				// UNKNOWN_PRODUCER_ID quietly (it bumps its epoch and
				// carries on); librdkafka fails. Any of them is a failure.
				kgo.ProducerOnDataLossDetected(func(topic string, p int32) {
					t.Errorf("the client detected data loss on %s/%d", topic, p)
				}))

			// PROXY: on the source, under the source's producer id.
			before := produceRange(t, cl, topic, 0, 300)
			srcPID, srcEpoch, err := cl.ProducerID(context.Background())
			if err != nil {
				t.Fatal(err)
			}

			// MIGRATING: produce is held (or refused) until COMPLETE.
			f.agent.Routes().Replace([]agent.Route{{Topic: topic, State: migration.Migrating, Mode: tc.mode, HoldMax: 30 * time.Second}})
			var during []acked
			done := make(chan struct{})
			go func() {
				defer close(done)
				during = produceRange(t, cl, topic, 300, 300)
			}()
			waitMetric(t, reg, func() bool {
				if tc.mode == migration.Hold {
					return gathered(t, reg, "baton_agent_held_requests") > 0
				}
				return gathered(t, reg, "baton_agent_produce_partitions_total", kerr.NotLeaderForPartition.Error()) > 0
			})
			f.agent.Routes().Replace([]agent.Route{{Topic: topic, State: migration.Complete}})
			<-done

			// COMPLETE: on the destination.
			after := produceRange(t, cl, topic, 600, 300)
			if pid, epoch, err := cl.ProducerID(context.Background()); err != nil || pid != srcPID || epoch != srcEpoch {
				t.Errorf("the client's producer id went from %d/%d to %d/%d (%v): it met a sequence error", srcPID, srcEpoch, pid, epoch, err)
			}
			if n := gathered(t, reg, "baton_agent_producer_ids"); n != 1 {
				t.Errorf("%v producers mapped, want 1", n)
			}

			checkAcked(t, before, readAll(t, f.src.Bootstrap(), topic, len(before)))
			onDst := append(during, after...)
			checkAcked(t, onDst, readAll(t, f.dst.Bootstrap(), topic, len(onDst)))
			if n := endSum(t, f.dst.Bootstrap(), topic); n != int64(len(onDst)) {
				t.Errorf("destination holds %d records, want the %d acked after the cutover", n, len(onDst))
			}

			dstPIDs := map[int64]bool{}
			for p := range int32(partitions) {
				bs := fetchBatches(t, f.dst, topic, p)
				next := int32(0)
				for _, b := range bs {
					dstPIDs[b.ProducerID] = true
					if b.ProducerID == srcPID {
						t.Errorf("partition %d: batch at %d carries the source producer id %d", p, b.FirstOffset, srcPID)
					}
					if b.FirstSequence != next {
						t.Errorf("partition %d: batch at %d has sequence %d, want %d", p, b.FirstOffset, b.FirstSequence, next)
					}
					next = b.FirstSequence + b.NumRecords
				}
				for _, b := range fetchBatches(t, f.src, topic, p) {
					if b.ProducerID != srcPID {
						t.Errorf("source partition %d: batch at %d has producer id %d, want the client's %d", p, b.FirstOffset, b.ProducerID, srcPID)
					}
				}
			}
			if len(dstPIDs) != 1 {
				t.Errorf("destination batches carry producer ids %v, want one", keys(dstPIDs))
			}
		})
	}
}

// gathered returns the value of a gauge or counter whose labels start with
// labels, 0 when absent.
func gathered(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i, want := range labels {
				if i >= len(m.GetLabel()) || m.GetLabel()[i].GetValue() != want {
					continue metrics
				}
			}
			sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return sum
}

// waitMetric polls cond; a state the test waits for, not a timing bound.
func waitMetric(t *testing.T, reg *prometheus.Registry, cond func() bool) {
	t.Helper()
	wait.For(t, 30*time.Second, "the agent to hold or refuse a produce for the MIGRATING topic", func() string {
		if cond() {
			return ""
		}
		return "neither yet"
	})
}

// fetchBatches reads every record batch of topic/partition from its leader.
func fetchBatches(t *testing.T, c *embedded.Cluster, topic string, partition int32) []kmsg.RecordBatch {
	t.Helper()
	cl := newClient(t, c.Bootstrap())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tds, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	id := tds[topic].ID
	var out []kmsg.RecordBatch
	for offset := int64(0); ; {
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis = 0
		req.MaxBytes = 64 << 20
		req.SessionEpoch = -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, id
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = partition
		rp.FetchOffset = offset
		rp.PartitionMaxBytes = 64 << 20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := cl.Broker(int(c.Kfake().LeaderFor(topic, partition))).Request(ctx, req)
		if err != nil {
			t.Fatalf("fetching %s/%d: %v", topic, partition, err)
		}
		fp := resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(fp.ErrorCode); err != nil {
			t.Fatalf("fetching %s/%d: %v", topic, partition, err)
		}
		raw := fp.RecordBatches
		got := 0
		for len(raw) >= 12 {
			n, err := recordbatch.BatchLen(raw)
			if err != nil {
				break // cut off by the fetch size
			}
			if !recordbatch.CRCValid(raw[:n]) {
				t.Errorf("%s/%d: batch with a bad CRC", topic, partition)
			}
			var b kmsg.RecordBatch
			if err := b.ReadFrom(raw[:n]); err != nil {
				t.Fatalf("decoding a batch of %s/%d: %v", topic, partition, err)
			}
			out = append(out, b)
			offset = b.FirstOffset + int64(b.LastOffsetDelta) + 1
			raw = raw[n:]
			got++
		}
		if got == 0 || offset >= fp.HighWatermark {
			return out
		}
	}
}

func keys(m map[int64]bool) []string {
	var out []string
	for k := range m {
		out = append(out, fmt.Sprint(k))
	}
	sort.Strings(out)
	return out
}
