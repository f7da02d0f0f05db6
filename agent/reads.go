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
// re-assembled in the request's order.

// --- Fetch ---

func (r *router) fetch(ctx context.Context, x *filter.Exchange, req *kmsg.FetchRequest) filter.Pending {
	var parts []tp
	var reqParts []kmsg.FetchRequestTopicPartition
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			parts = append(parts, tp{t.Topic, p.Partition})
			reqParts = append(reqParts, p)
		}
	}
	shards, codes := r.shardByLeader(ctx, parts, r.upstreamFor)
	ss := r.sendShards(ctx, shards, 1, req.Version, x.Header.ClientID, func(s *shard) kmsg.Request {
		sub := kmsg.NewPtrFetchRequest()
		sub.Version, sub.ReplicaID, sub.MaxWaitMillis, sub.MinBytes, sub.MaxBytes = req.Version, req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes
		sub.IsolationLevel, sub.Rack = req.IsolationLevel, req.Rack
		// No fetch sessions across a split: every fetch is a full one.
		sub.SessionID, sub.SessionEpoch = 0, -1
		for _, i := range s.idx {
			p := reqParts[i]
			p.CurrentLeaderEpoch = -1 // the client knows only synthetic epochs
			if n := len(sub.Topics); n == 0 || sub.Topics[n-1].Topic != parts[i].topic {
				sub.Topics = append(sub.Topics, kmsg.FetchRequestTopic{Topic: parts[i].topic})
			}
			sub.Topics[len(sub.Topics)-1].Partitions = append(sub.Topics[len(sub.Topics)-1].Partitions, p)
		}
		return sub
	}, true)
	return pendingFunc(func(ctx context.Context) error {
		results := make([]kmsg.FetchResponseTopicPartition, len(parts))
		for i := range results {
			results[i] = kmsg.NewFetchResponseTopicPartition()
			results[i].Partition = parts[i].partition
			results[i].ErrorCode = codes[i]
			results[i].HighWatermark, results[i].LastStableOffset, results[i].LogStartOffset = -1, -1, -1
		}
		var throttle int32
		r.collect(ctx, ss, 1, req.Version, func() kmsg.Response { return kmsg.NewPtrFetchResponse() },
			func(s *shard, resp kmsg.Response, err error) {
				var fr *kmsg.FetchResponse
				if err == nil {
					fr = resp.(*kmsg.FetchResponse)
					if fr.ErrorCode != 0 {
						err = kerr.ErrorForCode(fr.ErrorCode)
					}
				}
				if err != nil {
					for _, i := range s.idx {
						results[i].ErrorCode = errorCode(err)
					}
					return
				}
				throttle = max(throttle, fr.ThrottleMillis)
				got := map[tp]*kmsg.FetchResponseTopicPartition{}
				for ti := range fr.Topics {
					for pi := range fr.Topics[ti].Partitions {
						p := &fr.Topics[ti].Partitions[pi]
						got[tp{fr.Topics[ti].Topic, p.Partition}] = p
					}
				}
				for _, i := range s.idx {
					p, ok := got[parts[i]]
					if !ok {
						results[i].ErrorCode = retriable
						continue
					}
					out := *p
					out.CurrentLeader = kmsg.NewFetchResponseTopicPartitionCurrentLeader()
					out.PreferredReadReplica = -1 // only the agent exists
					results[i] = out
					if leaderGone(p.ErrorCode) {
						s.up.ForgetLeader(parts[i].topic)
					}
				}
			})
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		resp.ThrottleMillis = throttle
		i := 0
		for _, t := range req.Topics {
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic = t.Topic
			rt.Partitions = results[i : i+len(t.Partitions)]
			i += len(t.Partitions)
			resp.Topics = append(resp.Topics, rt)
		}
		x.Resp = resp
		return nil
	})
}

// mergeByPartition waits for the shards of a partitioned request that
// reads (ListOffsets, OffsetForLeaderEpoch) and returns one result per
// part, in the request's order: the broker's answer where there is one,
// else blank with the error the client should see.
func mergeByPartition[P any](r *router, ctx context.Context, ss []sent, key, ver int16, parts []tp, codes []int16,
	kind func() kmsg.Response, each func(kmsg.Response, func(topic string, partition int32, p P)),
	blank func(partition int32, code int16) P, code func(P) int16) []P {
	results := make([]P, len(parts))
	for i := range results {
		results[i] = blank(parts[i].partition, codes[i])
	}
	r.collect(ctx, ss, key, ver, kind, func(s *shard, resp kmsg.Response, err error) {
		if err != nil {
			for _, i := range s.idx {
				results[i] = blank(parts[i].partition, errorCode(err))
			}
			return
		}
		got := map[tp]P{}
		each(resp, func(topic string, partition int32, p P) { got[tp{topic, partition}] = p })
		for _, i := range s.idx {
			p, ok := got[parts[i]]
			if !ok {
				results[i] = blank(parts[i].partition, retriable)
				continue
			}
			results[i] = p
			if leaderGone(code(p)) {
				s.up.ForgetLeader(parts[i].topic)
			}
		}
	})
	return results
}

// --- ListOffsets ---

func (r *router) listOffsets(ctx context.Context, x *filter.Exchange, req *kmsg.ListOffsetsRequest) filter.Pending {
	var parts []tp
	var reqParts []kmsg.ListOffsetsRequestTopicPartition
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			parts = append(parts, tp{t.Topic, p.Partition})
			reqParts = append(reqParts, p)
		}
	}
	shards, codes := r.shardByLeader(ctx, parts, r.upstreamFor)
	ss := r.sendShards(ctx, shards, 2, req.Version, x.Header.ClientID, func(s *shard) kmsg.Request {
		sub := kmsg.NewPtrListOffsetsRequest()
		sub.Version, sub.ReplicaID, sub.IsolationLevel, sub.TimeoutMillis = req.Version, req.ReplicaID, req.IsolationLevel, req.TimeoutMillis
		for _, i := range s.idx {
			p := reqParts[i]
			p.CurrentLeaderEpoch = -1 // the client knows only synthetic epochs
			if n := len(sub.Topics); n == 0 || sub.Topics[n-1].Topic != parts[i].topic {
				sub.Topics = append(sub.Topics, kmsg.ListOffsetsRequestTopic{Topic: parts[i].topic})
			}
			sub.Topics[len(sub.Topics)-1].Partitions = append(sub.Topics[len(sub.Topics)-1].Partitions, p)
		}
		return sub
	}, true)
	return pendingFunc(func(ctx context.Context) error {
		results := mergeByPartition(r, ctx, ss, 2, req.Version, parts, codes,
			func() kmsg.Response { return kmsg.NewPtrListOffsetsResponse() },
			func(resp kmsg.Response, yield func(string, int32, kmsg.ListOffsetsResponseTopicPartition)) {
				for _, t := range resp.(*kmsg.ListOffsetsResponse).Topics {
					for _, p := range t.Partitions {
						yield(t.Topic, p.Partition, p)
					}
				}
			},
			func(partition int32, code int16) kmsg.ListOffsetsResponseTopicPartition {
				p := kmsg.NewListOffsetsResponseTopicPartition()
				p.Partition, p.ErrorCode = partition, code
				return p
			},
			func(p kmsg.ListOffsetsResponseTopicPartition) int16 { return p.ErrorCode })
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		i := 0
		for _, t := range req.Topics {
			rt := kmsg.NewListOffsetsResponseTopic()
			rt.Topic = t.Topic
			rt.Partitions = results[i : i+len(t.Partitions)]
			i += len(t.Partitions)
			resp.Topics = append(resp.Topics, rt)
		}
		x.Resp = resp
		return nil
	})
}

// --- OffsetForLeaderEpoch ---

func (r *router) offsetForLeaderEpoch(ctx context.Context, x *filter.Exchange, req *kmsg.OffsetForLeaderEpochRequest) filter.Pending {
	var parts []tp
	var reqParts []kmsg.OffsetForLeaderEpochRequestTopicPartition
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			parts = append(parts, tp{t.Topic, p.Partition})
			reqParts = append(reqParts, p)
		}
	}
	shards, codes := r.shardByLeader(ctx, parts, r.upstreamFor)
	ss := r.sendShards(ctx, shards, 23, req.Version, x.Header.ClientID, func(s *shard) kmsg.Request {
		sub := kmsg.NewPtrOffsetForLeaderEpochRequest()
		sub.Version, sub.ReplicaID = req.Version, req.ReplicaID
		for _, i := range s.idx {
			p := reqParts[i]
			p.CurrentLeaderEpoch = -1
			if n := len(sub.Topics); n == 0 || sub.Topics[n-1].Topic != parts[i].topic {
				sub.Topics = append(sub.Topics, kmsg.OffsetForLeaderEpochRequestTopic{Topic: parts[i].topic})
			}
			sub.Topics[len(sub.Topics)-1].Partitions = append(sub.Topics[len(sub.Topics)-1].Partitions, p)
		}
		return sub
	}, true)
	return pendingFunc(func(ctx context.Context) error {
		results := mergeByPartition(r, ctx, ss, 23, req.Version, parts, codes,
			func() kmsg.Response { return kmsg.NewPtrOffsetForLeaderEpochResponse() },
			func(resp kmsg.Response, yield func(string, int32, kmsg.OffsetForLeaderEpochResponseTopicPartition)) {
				for _, t := range resp.(*kmsg.OffsetForLeaderEpochResponse).Topics {
					for _, p := range t.Partitions {
						yield(t.Topic, p.Partition, p)
					}
				}
			},
			func(partition int32, code int16) kmsg.OffsetForLeaderEpochResponseTopicPartition {
				p := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
				p.Partition, p.ErrorCode = partition, code
				return p
			},
			func(p kmsg.OffsetForLeaderEpochResponseTopicPartition) int16 { return p.ErrorCode })
		resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
		i := 0
		for _, t := range req.Topics {
			rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
			rt.Topic = t.Topic
			rt.Partitions = results[i : i+len(t.Partitions)]
			i += len(t.Partitions)
			resp.Topics = append(resp.Topics, rt)
		}
		x.Resp = resp
		return nil
	})
}
