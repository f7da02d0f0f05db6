package agent_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/migration"
)

// TestPartitionedReadsAnswerInRequestOrder: a Fetch, ListOffsets or
// OffsetForLeaderEpoch naming partitions of two PROXY topics (the
// source), a COMPLETE one (the destination) and a topic neither has,
// interleaved and out of partition order, is split by cluster and partition leader and
// answered in the request's order: each partition's own answer in its
// place, the unknown topic's with an error. Every partition holds a
// different number of records, so an answer from the wrong cluster or
// partition, or in the wrong place, shows.
func TestPartitionedReadsAnswerInRequestOrder(t *testing.T) {
	t.Parallel()
	const here, also, there, nowhere = "here", "also", "there", "nowhere"
	f := startFixture(t, []agent.Route{{Topic: here, State: migration.Proxy}, {Topic: also, State: migration.Proxy},
		{Topic: there, State: migration.Complete}})
	ends := map[string][]int64{here: {1, 2, 3, 4}, also: {9, 10, 11}, there: {5, 6, 7, 8}}
	for topic, bootstrap := range map[string]string{here: f.src.Bootstrap(), also: f.src.Bootstrap(), there: f.dst.Bootstrap()} {
		createTopic(t, bootstrap, topic, int32(len(ends[topic])))
		cl := newClient(t, bootstrap, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		for p, n := range ends[topic] {
			for i := range n {
				r := &kgo.Record{Topic: topic, Partition: int32(p), Value: fmt.Appendf(nil, "%d", i)}
				if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
					t.Fatalf("producing to %s/%d: %v", topic, p, err)
				}
			}
		}
	}
	// The request's topics and partitions, in order.
	type part struct {
		topic     string
		partition int32
	}
	asked := [][]part{
		{{there, 3}, {there, 0}},
		{{here, 2}, {here, 1}, {here, 3}},
		{{nowhere, 0}},
		{{also, 1}, {also, 0}},
		{{there, 1}},
		{{here, 0}},
		{{also, 2}},
	}
	// answered is one partition's answer: its number, error code and end
	// offset (high watermark, listed offset, end offset of the epoch).
	type answered struct {
		partition int32
		code      int16
		end       int64
	}
	for _, tc := range []struct {
		name string
		req  func() kmsg.Request
		// read returns the response's topics and their partitions' answers.
		read func(kmsg.Response) ([]string, [][]answered)
	}{
		{"fetch", func() kmsg.Request {
			req := kmsg.NewPtrFetchRequest()
			req.Version, req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 11, -1, 100, 1, 1<<20
			for _, ps := range asked {
				rt := kmsg.NewFetchRequestTopic()
				rt.Topic = ps[0].topic
				for _, p := range ps {
					rp := kmsg.NewFetchRequestTopicPartition()
					rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p.partition, 0, 1<<20
					rt.Partitions = append(rt.Partitions, rp)
				}
				req.Topics = append(req.Topics, rt)
			}
			return req
		}, func(r kmsg.Response) (names []string, out [][]answered) {
			for _, rt := range r.(*kmsg.FetchResponse).Topics {
				var as []answered
				for _, p := range rt.Partitions {
					as = append(as, answered{p.Partition, p.ErrorCode, p.HighWatermark})
				}
				names, out = append(names, rt.Topic), append(out, as)
			}
			return names, out
		}},
		{"list offsets", func() kmsg.Request {
			req := kmsg.NewPtrListOffsetsRequest()
			req.Version, req.ReplicaID = 4, -1
			for _, ps := range asked {
				rt := kmsg.NewListOffsetsRequestTopic()
				rt.Topic = ps[0].topic
				for _, p := range ps {
					rp := kmsg.NewListOffsetsRequestTopicPartition()
					rp.Partition, rp.Timestamp = p.partition, -1 // latest
					rt.Partitions = append(rt.Partitions, rp)
				}
				req.Topics = append(req.Topics, rt)
			}
			return req
		}, func(r kmsg.Response) (names []string, out [][]answered) {
			for _, rt := range r.(*kmsg.ListOffsetsResponse).Topics {
				var as []answered
				for _, p := range rt.Partitions {
					as = append(as, answered{p.Partition, p.ErrorCode, p.Offset})
				}
				names, out = append(names, rt.Topic), append(out, as)
			}
			return names, out
		}},
		{"offset for leader epoch", func() kmsg.Request {
			req := kmsg.NewPtrOffsetForLeaderEpochRequest()
			req.Version, req.ReplicaID = 3, -1
			for _, ps := range asked {
				rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
				rt.Topic = ps[0].topic
				for _, p := range ps {
					rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
					rp.Partition, rp.LeaderEpoch = p.partition, 0 // every record was written in epoch 0
					rt.Partitions = append(rt.Partitions, rp)
				}
				req.Topics = append(req.Topics, rt)
			}
			return req
		}, func(r kmsg.Response) (names []string, out [][]answered) {
			for _, rt := range r.(*kmsg.OffsetForLeaderEpochResponse).Topics {
				var as []answered
				for _, p := range rt.Partitions {
					as = append(as, answered{p.Partition, p.ErrorCode, p.EndOffset})
				}
				names, out = append(names, rt.Topic), append(out, as)
			}
			return names, out
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := agent.DialRaw(t, f.addr)
			resp, err := c.Request(tc.req())
			if err != nil {
				t.Fatal(err)
			}
			names, got := tc.read(resp)
			if len(names) != len(asked) {
				t.Fatalf("answered topics %v, want %d in the request's order", names, len(asked))
			}
			for i, ps := range asked {
				if names[i] != ps[0].topic || len(got[i]) != len(ps) {
					t.Fatalf("topic %d: answered %s with %d partitions, want %s with %d", i, names[i], len(got[i]), ps[0].topic, len(ps))
				}
				for j, p := range ps {
					a := got[i][j]
					if a.partition != p.partition {
						t.Errorf("%s answer %d is of partition %d, want %d", p.topic, j, a.partition, p.partition)
						continue
					}
					if p.topic == nowhere {
						if a.code == 0 {
							t.Errorf("%s/%d: answered without an error, end %d", p.topic, p.partition, a.end)
						}
						continue
					}
					if want := ends[p.topic][p.partition]; a.code != 0 || a.end != want {
						t.Errorf("%s/%d: code %d, end %d; want 0 and %d", p.topic, p.partition, a.code, a.end, want)
					}
				}
			}
		})
	}
}
