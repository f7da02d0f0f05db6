package agent

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
)

// Reads addressed to partitions (Fetch, ListOffsets, OffsetForLeaderEpoch)
// are split by the cluster each topic routes to and by that cluster's
// partition leader (shardByLeader), sent to every leader at once, and
// re-assembled in the request's order. splitRead, mergeByPartition and
// joinByTopic do that for all three; each read says only how its topics
// and partitions are built and read.

// partitioned is how a read lists the partitions it asks about: topics of
// type T, each holding partitions of type P.
type partitioned[T, P any] struct {
	topics []T
	// open is a topic's name and partitions.
	open func(T) (string, []P)
	// partition is a partition's number.
	partition func(P) int32
	// unknownEpoch sets a partition's CurrentLeaderEpoch to -1: the client
	// knows only the agent's synthetic epochs, which no broker does.
	unknownEpoch func(*P)
	// topic makes a topic of one leader's request.
	topic func(name string, parts []P) T
}

// split is a read split by leader and sent (splitRead).
type split struct {
	key, ver int16
	// parts are the request's partitions in its order; codes, per part,
	// the error its client sees unless a leader answers for it.
	parts []tp
	codes []int16
	// topics and sizes are the request's topics and how many of parts
	// each holds, to answer in the request's order (joinByTopic).
	topics []string
	sizes  []int
	ss     []sent
}

// splitRead flattens req's partitions, shards them by leader and sends
// each leader the request build makes of its partitions, grouped by topic
// in the request's order.
func splitRead[T, P any](r *router, ctx context.Context, x *filter.Exchange, key, ver int16, req partitioned[T, P],
	build func(topics []T) kmsg.Request) *split {
	sp := &split{key: key, ver: ver}
	var reqParts []P
	for _, t := range req.topics {
		name, ps := req.open(t)
		sp.topics, sp.sizes = append(sp.topics, name), append(sp.sizes, len(ps))
		for _, p := range ps {
			sp.parts = append(sp.parts, tp{name, req.partition(p)})
			reqParts = append(reqParts, p)
		}
	}
	var shards []*shard
	shards, sp.codes = r.shardByLeader(ctx, sp.parts, r.upstreamFor)
	sp.ss = r.sendShards(ctx, shards, key, ver, x.Header.ClientID, func(s *shard) kmsg.Request {
		var topics []T
		var run []P
		for j, i := range s.idx {
			p := reqParts[i]
			req.unknownEpoch(&p)
			run = append(run, p)
			if j == len(s.idx)-1 || sp.parts[s.idx[j+1]].topic != sp.parts[i].topic {
				topics = append(topics, req.topic(sp.parts[i].topic, run))
				run = nil
			}
		}
		return build(topics)
	}, true)
	return sp
}

// mergeByPartition waits for the leaders' answers to sp and returns one
// result per part, in the request's order: the broker's answer where there
// is one, else blank with the error the client should see. each reads one
// answer's partitions, or returns the error the whole answer carries.
func mergeByPartition[P any](r *router, ctx context.Context, sp *split,
	kind func() kmsg.Response, each func(kmsg.Response, func(topic string, partition int32, p P)) error,
	blank func(partition int32, code int16) P, code func(P) int16) []P {
	results := make([]P, len(sp.parts))
	for i := range results {
		results[i] = blank(sp.parts[i].partition, sp.codes[i])
	}
	r.collect(ctx, sp.ss, sp.key, sp.ver, kind, func(s *shard, resp kmsg.Response, err error) {
		got := map[tp]P{}
		if err == nil {
			err = each(resp, func(topic string, partition int32, p P) { got[tp{topic, partition}] = p })
		}
		if err != nil {
			for _, i := range s.idx {
				results[i] = blank(sp.parts[i].partition, errorCode(err))
			}
			return
		}
		for _, i := range s.idx {
			p, ok := got[sp.parts[i]]
			if !ok {
				results[i] = blank(sp.parts[i].partition, retriable)
				continue
			}
			results[i] = p
			if leaderGone(code(p)) {
				s.up.ForgetLeader(sp.parts[i].topic)
			}
		}
	})
	return results
}

// joinByTopic cuts results, one per part of sp, into the request's topics.
func joinByTopic[T, P any](sp *split, results []P, topic func(name string, parts []P) T) []T {
	var out []T
	i := 0
	for k, name := range sp.topics {
		out = append(out, topic(name, results[i:i+sp.sizes[k]]))
		i += sp.sizes[k]
	}
	return out
}

// --- Fetch ---

func (r *router) fetch(ctx context.Context, x *filter.Exchange, req *kmsg.FetchRequest) filter.Pending {
	sp := splitRead(r, ctx, x, 1, req.Version, partitioned[kmsg.FetchRequestTopic, kmsg.FetchRequestTopicPartition]{
		topics: req.Topics,
		open: func(t kmsg.FetchRequestTopic) (string, []kmsg.FetchRequestTopicPartition) {
			return t.Topic, t.Partitions
		},
		partition:    func(p kmsg.FetchRequestTopicPartition) int32 { return p.Partition },
		unknownEpoch: func(p *kmsg.FetchRequestTopicPartition) { p.CurrentLeaderEpoch = -1 },
		topic: func(name string, ps []kmsg.FetchRequestTopicPartition) kmsg.FetchRequestTopic {
			return kmsg.FetchRequestTopic{Topic: name, Partitions: ps}
		},
	}, func(topics []kmsg.FetchRequestTopic) kmsg.Request {
		sub := kmsg.NewPtrFetchRequest()
		sub.Version, sub.ReplicaID, sub.MaxWaitMillis, sub.MinBytes, sub.MaxBytes = req.Version, req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes
		sub.IsolationLevel, sub.Rack = req.IsolationLevel, req.Rack
		// No fetch sessions across a split: every fetch is a full one.
		sub.SessionID, sub.SessionEpoch = 0, -1
		sub.Topics = topics
		return sub
	})
	return pendingFunc(func(ctx context.Context) error {
		var throttle int32
		results := mergeByPartition(r, ctx, sp,
			func() kmsg.Response { return kmsg.NewPtrFetchResponse() },
			func(resp kmsg.Response, yield func(string, int32, kmsg.FetchResponseTopicPartition)) error {
				fr := resp.(*kmsg.FetchResponse)
				if fr.ErrorCode != 0 {
					return kerr.ErrorForCode(fr.ErrorCode)
				}
				throttle = max(throttle, fr.ThrottleMillis)
				for _, t := range fr.Topics {
					for _, p := range t.Partitions {
						p.CurrentLeader = kmsg.NewFetchResponseTopicPartitionCurrentLeader()
						p.PreferredReadReplica = -1 // only the agent exists
						yield(t.Topic, p.Partition, p)
					}
				}
				return nil
			},
			func(partition int32, code int16) kmsg.FetchResponseTopicPartition {
				p := kmsg.NewFetchResponseTopicPartition()
				p.Partition, p.ErrorCode = partition, code
				p.HighWatermark, p.LastStableOffset, p.LogStartOffset = -1, -1, -1
				return p
			},
			func(p kmsg.FetchResponseTopicPartition) int16 { return p.ErrorCode })
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		resp.ThrottleMillis = throttle
		resp.Topics = joinByTopic(sp, results, func(name string, ps []kmsg.FetchResponseTopicPartition) kmsg.FetchResponseTopic {
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic, rt.Partitions = name, ps
			return rt
		})
		x.Resp = resp
		return nil
	})
}

// --- ListOffsets ---

func (r *router) listOffsets(ctx context.Context, x *filter.Exchange, req *kmsg.ListOffsetsRequest) filter.Pending {
	sp := splitRead(r, ctx, x, 2, req.Version, partitioned[kmsg.ListOffsetsRequestTopic, kmsg.ListOffsetsRequestTopicPartition]{
		topics: req.Topics,
		open: func(t kmsg.ListOffsetsRequestTopic) (string, []kmsg.ListOffsetsRequestTopicPartition) {
			return t.Topic, t.Partitions
		},
		partition:    func(p kmsg.ListOffsetsRequestTopicPartition) int32 { return p.Partition },
		unknownEpoch: func(p *kmsg.ListOffsetsRequestTopicPartition) { p.CurrentLeaderEpoch = -1 },
		topic: func(name string, ps []kmsg.ListOffsetsRequestTopicPartition) kmsg.ListOffsetsRequestTopic {
			return kmsg.ListOffsetsRequestTopic{Topic: name, Partitions: ps}
		},
	}, func(topics []kmsg.ListOffsetsRequestTopic) kmsg.Request {
		sub := kmsg.NewPtrListOffsetsRequest()
		sub.Version, sub.ReplicaID, sub.IsolationLevel, sub.TimeoutMillis = req.Version, req.ReplicaID, req.IsolationLevel, req.TimeoutMillis
		sub.Topics = topics
		return sub
	})
	return pendingFunc(func(ctx context.Context) error {
		results := mergeByPartition(r, ctx, sp,
			func() kmsg.Response { return kmsg.NewPtrListOffsetsResponse() },
			func(resp kmsg.Response, yield func(string, int32, kmsg.ListOffsetsResponseTopicPartition)) error {
				for _, t := range resp.(*kmsg.ListOffsetsResponse).Topics {
					for _, p := range t.Partitions {
						yield(t.Topic, p.Partition, p)
					}
				}
				return nil
			},
			func(partition int32, code int16) kmsg.ListOffsetsResponseTopicPartition {
				p := kmsg.NewListOffsetsResponseTopicPartition()
				p.Partition, p.ErrorCode = partition, code
				return p
			},
			func(p kmsg.ListOffsetsResponseTopicPartition) int16 { return p.ErrorCode })
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		resp.Topics = joinByTopic(sp, results, func(name string, ps []kmsg.ListOffsetsResponseTopicPartition) kmsg.ListOffsetsResponseTopic {
			rt := kmsg.NewListOffsetsResponseTopic()
			rt.Topic, rt.Partitions = name, ps
			return rt
		})
		x.Resp = resp
		return nil
	})
}

// --- OffsetForLeaderEpoch ---

func (r *router) offsetForLeaderEpoch(ctx context.Context, x *filter.Exchange, req *kmsg.OffsetForLeaderEpochRequest) filter.Pending {
	sp := splitRead(r, ctx, x, 23, req.Version, partitioned[kmsg.OffsetForLeaderEpochRequestTopic, kmsg.OffsetForLeaderEpochRequestTopicPartition]{
		topics: req.Topics,
		open: func(t kmsg.OffsetForLeaderEpochRequestTopic) (string, []kmsg.OffsetForLeaderEpochRequestTopicPartition) {
			return t.Topic, t.Partitions
		},
		partition:    func(p kmsg.OffsetForLeaderEpochRequestTopicPartition) int32 { return p.Partition },
		unknownEpoch: func(p *kmsg.OffsetForLeaderEpochRequestTopicPartition) { p.CurrentLeaderEpoch = -1 },
		topic: func(name string, ps []kmsg.OffsetForLeaderEpochRequestTopicPartition) kmsg.OffsetForLeaderEpochRequestTopic {
			return kmsg.OffsetForLeaderEpochRequestTopic{Topic: name, Partitions: ps}
		},
	}, func(topics []kmsg.OffsetForLeaderEpochRequestTopic) kmsg.Request {
		sub := kmsg.NewPtrOffsetForLeaderEpochRequest()
		sub.Version, sub.ReplicaID = req.Version, req.ReplicaID
		sub.Topics = topics
		return sub
	})
	return pendingFunc(func(ctx context.Context) error {
		results := mergeByPartition(r, ctx, sp,
			func() kmsg.Response { return kmsg.NewPtrOffsetForLeaderEpochResponse() },
			func(resp kmsg.Response, yield func(string, int32, kmsg.OffsetForLeaderEpochResponseTopicPartition)) error {
				for _, t := range resp.(*kmsg.OffsetForLeaderEpochResponse).Topics {
					for _, p := range t.Partitions {
						yield(t.Topic, p.Partition, p)
					}
				}
				return nil
			},
			func(partition int32, code int16) kmsg.OffsetForLeaderEpochResponseTopicPartition {
				p := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
				p.Partition, p.ErrorCode = partition, code
				return p
			},
			func(p kmsg.OffsetForLeaderEpochResponseTopicPartition) int16 { return p.ErrorCode })
		resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
		resp.Topics = joinByTopic(sp, results,
			func(name string, ps []kmsg.OffsetForLeaderEpochResponseTopicPartition) kmsg.OffsetForLeaderEpochResponseTopic {
				rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
				rt.Topic, rt.Partitions = name, ps
				return rt
			})
		x.Resp = resp
		return nil
	})
}
