package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/agent/internal/bufpool"
	"github.com/baton-kafka/baton/agent/internal/upstream"
	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/internal/recordbatch"
)

// Requests addressed to partitions (Produce, Fetch, ListOffsets,
// OffsetForLeaderEpoch) are split by the cluster each topic routes to and
// by that cluster's partition leader, sent to every leader at once, and
// re-assembled in the request's order.

type tp struct {
	topic     string
	partition int32
}

// shard is the part of a request one broker serves: indexes into the
// request's flattened partition list.
type shard struct {
	up   *upstream.Cluster
	addr string
	idx  []int
	// conn, when set, is the only upstream connection the shard may go on
	// (see pins.onConn); nil: any.
	conn *upstream.Conn
}

// shardByLeader groups parts by leader, or by the broker pinned returns
// (when not nil) for a part. codes[i] is set, and i left out of every
// shard, when part i cannot be sent (no leader known, topic held).
func (r *router) shardByLeader(ctx context.Context, parts []tp, upFor func(topic string) *upstream.Cluster, pinned func(*upstream.Cluster, tp) (string, bool)) ([]*shard, []int16) {
	codes := make([]int16, len(parts))
	var shards []*shard
	byAddr := map[*upstream.Cluster]map[string]*shard{}
	for i, p := range parts {
		up := upFor(p.topic)
		if up == nil {
			codes[i] = retriable
			continue
		}
		addr, ok := "", false
		if pinned != nil {
			addr, ok = pinned(up, p)
		}
		if !ok {
			var err error
			if addr, err = up.LeaderAddr(ctx, p.topic, p.partition); err != nil {
				codes[i] = errorCode(err)
				continue
			}
		}
		m := byAddr[up]
		if m == nil {
			m = map[string]*shard{}
			byAddr[up] = m
		}
		s := m[addr]
		if s == nil {
			s = &shard{up: up, addr: addr}
			m[addr] = s
			shards = append(shards, s)
		}
		s.idx = append(s.idx, i)
	}
	return shards, codes
}

// errorCode turns an error into the Kafka code a client should see: the
// broker's own code when there is one, else the retriable error (the agent
// cannot vouch for the outcome).
func errorCode(err error) int16 {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	return retriable
}

// leaderGone says whether a partition error means our leader cache is stale.
func leaderGone(code int16) bool {
	switch code {
	case kerr.NotLeaderForPartition.Code, kerr.UnknownTopicOrPartition.Code,
		kerr.LeaderNotAvailable.Code, kerr.FencedLeaderEpoch.Code,
		kerr.UnknownLeaderEpoch.Code, kerr.NotEnoughReplicas.Code,
		kerr.KafkaStorageError.Code:
		return true
	}
	return false
}

// sent is one shard's request on the wire.
type sent struct {
	s   *shard
	cl  *upstream.Call
	err error
}

func (r *router) sendShards(ctx context.Context, shards []*shard, key, ver int16, clientID *string, build func(s *shard) kmsg.Request, expect bool) []sent {
	out := make([]sent, len(shards))
	for i, s := range shards {
		req := build(s)
		if pr, ok := req.(*kmsg.ProduceRequest); ok {
			if segs, ok := produceSegments(pr, make([]byte, 0, 256)); ok {
				cl, err := s.up.SendvOn(ctx, s.addr, r.slot, s.conn, key, ver, clientID, segs, expect)
				out[i] = sent{s: s, cl: cl, err: err}
				continue
			}
			body := req.AppendTo(bufpool.Get(encodedSizeHint(req))[:0])
			cl, err := s.up.SendvOn(ctx, s.addr, r.slot, s.conn, key, ver, clientID, [][]byte{body}, expect)
			bufpool.Put(body) // written or failed: not kept
			out[i] = sent{s: s, cl: cl, err: err}
			continue
		}
		body := req.AppendTo(bufpool.Get(encodedSizeHint(req))[:0])
		cl, err := r.sendUp(ctx, s.up, s.addr, key, ver, clientID, body, expect)
		bufpool.Put(body) // send wrote it
		out[i] = sent{s: s, cl: cl, err: err}
	}
	return out
}

// notSentCodes is the retriable error, in the request's flattened order,
// for the parts of every shard whose request never reached the broker; nil
// when every one did (the usual case: nothing allocated).
func notSentCodes(ss []sent, n int) []int16 {
	var codes []int16
	for _, s := range ss {
		if s.err == nil || !errors.Is(s.err, upstream.ErrNotSent) {
			continue
		}
		if codes == nil {
			codes = make([]int16, n)
		}
		for _, i := range s.s.idx {
			codes[i] = retriable
		}
	}
	return codes
}

// encodedSizeHint guesses a request's encoded size so that encoding it does
// not grow the buffer: record bytes dominate produce requests.
func encodedSizeHint(req kmsg.Request) int {
	n := 256
	if pr, ok := req.(*kmsg.ProduceRequest); ok {
		for _, t := range pr.Topics {
			n += len(t.Topic) + 16
			for _, p := range t.Partitions {
				n += len(p.Records) + 16
			}
		}
	}
	return n
}

// collect waits for each shard's answer and decodes it as resp kind. A
// produce waits up to the forward deadline from when it was written
// upstream (not from when the client's request arrived: it may have been
// held, or waited for a lease), each shard on its own.
//
// A produce past its deadline is answered retriable (invariant 5) and left
// on its connection: its answer may still come, and is then read and
// dropped in order. Killing the connection instead would fail every
// request pipelined behind it, from every client sharing it, and each
// would resend at once and meet the same slow broker (a retry storm). The
// connection still dies if its oldest request goes unanswered for the
// stall timeout (see upstream.Conn); until the call settles the source may
// still write it, so settleInflight keeps it counted.
func (r *router) collect(ctx context.Context, ss []sent, key, ver int16, kind func() kmsg.Response, each func(s *shard, resp kmsg.Response, err error)) {
	for _, x := range ss {
		if x.err != nil {
			each(x.s, nil, x.err)
			continue
		}
		body, err := r.waitCall(ctx, x.cl, key)
		r.a.observeUpstream(x.s.up.Name(), key, time.Since(x.cl.Start()), err)
		if err != nil {
			each(x.s, nil, err)
			continue
		}
		resp := kind()
		resp.SetVersion(ver)
		if err := resp.ReadFrom(body); err != nil {
			each(x.s, nil, fmt.Errorf("decoding %s response from %s: %w", kmsg.NameForKey(key), x.s.addr, err))
			continue
		}
		each(x.s, resp, nil)
	}
}

// waitCall waits for cl's answer; for a produce, at most until the forward
// deadline after cl was written.
func (r *router) waitCall(ctx context.Context, cl *upstream.Call, key int16) ([]byte, error) {
	if key != 0 {
		return cl.Wait(ctx)
	}
	ctx, cancel := context.WithDeadline(ctx, cl.Start().Add(r.a.forwardDeadline(nil)))
	defer cancel()
	body, err := cl.Wait(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w: %s: %w", errForwardDeadline, cl.Conn().Addr(), err)
	}
	return body, err
}

// --- Produce ---

func (r *router) produce(ctx context.Context, x *filter.Exchange, req *kmsg.ProduceRequest) filter.Pending {
	n := 0
	for _, t := range req.Topics {
		n += len(t.Partitions)
	}
	parts := make([]tp, 0, n)
	records := make([][]byte, 0, n) // per part, for the acked ends (see ackedEnds)
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			parts = append(parts, tp{t.Topic, p.Partition})
			records = append(records, p.Records)
		}
	}
	// Where each topic goes is decided now, after the produce hold (see
	// routeWrite); source-bound topics are counted in flight from here
	// until answered, for the drain the control plane waits on.
	ups := map[string]*upstream.Cluster{}
	var srcTopics []string
	for _, t := range req.Topics {
		if _, ok := ups[t.Topic]; !ok {
			up := r.routeWrite(t.Topic)
			ups[t.Topic] = up
			if up == r.a.src {
				srcTopics = append(srcTopics, t.Topic)
			}
		}
	}
	fwd := r.a.forwardDeadline(srcTopics)
	shards, codes := r.shardByLeader(ctx, parts, func(t string) *upstream.Cluster { return ups[t] }, r.pins.addr)
	shards = r.pins.dropAfterGap(req, shards, codes) // see pin.go
	shards = r.pins.onConn(shards, parts, codes)     // see pin.go
	// Idempotent batches toward the destination go under the destination
	// producer id mapped from the client's (see pidmap.go).
	shards, rewritten, dups := r.mapProducers(ctx, req, shards, codes)
	r.pins.noteRefused(req, codes) // see pin.go
	// Looking up leaders may have taken a while: the lease must still hold
	// when the bytes leave (the control plane counts a silent agent safe
	// from its lease's end plus F, and F starts at the send).
	if len(srcTopics) > 0 && !r.a.leaseValid() {
		shards = dropSource(shards, r.a.src, codes)
	}

	expect := req.Acks != 0
	var ss []sent
	if len(shards) == 1 && len(shards[0].idx) == len(parts) && rewritten == nil {
		// One leader serves the whole request: forward the client's bytes.
		s := shards[0]
		cl, err := s.up.SendvOn(ctx, s.addr, r.slot, s.conn, 0, req.Version, x.Header.ClientID, [][]byte{x.RawReq}, expect)
		ss = []sent{{s: s, cl: cl, err: err}}
	} else {
		ss = r.sendShards(ctx, shards, 0, req.Version, x.Header.ClientID, func(s *shard) kmsg.Request {
			sub := kmsg.NewPtrProduceRequest()
			sub.Version, sub.TransactionID, sub.Acks, sub.TimeoutMillis = req.Version, req.TransactionID, req.Acks, req.TimeoutMillis
			flat := 0
			for _, t := range req.Topics {
				var st *kmsg.ProduceRequestTopic
				for _, p := range t.Partitions {
					if contains(s.idx, flat) {
						if b, ok := rewritten[flat]; ok {
							p.Records = b
						}
						if st == nil {
							sub.Topics = append(sub.Topics, kmsg.ProduceRequestTopic{Topic: t.Topic})
							st = &sub.Topics[len(sub.Topics)-1]
						}
						st.Partitions = append(st.Partitions, p)
					}
					flat++
				}
			}
			return sub
		}, expect)
		for _, b := range rewritten {
			bufpool.Put(b) // sendShards wrote them
		}
	}
	// A batch that was not sent is a gap at once, before the connection's
	// next request is dispatched (see pin.go).
	if notSent := notSentCodes(ss, len(parts)); expect && notSent != nil {
		r.pins.noteRefused(req, notSent)
	}
	// What went to the source stays counted until it is answered (or can
	// no longer be written); what was not sent stops counting now.
	sentTopics := r.a.forwardedTopics(ss, parts)
	r.a.sourceUnsent(srcTopics, sentTopics)
	srcTopics = sentTopics
	if !expect {
		// Written just now, never answered: the source may write it
		// until a forward deadline from now.
		r.a.inflight.done(srcTopics, false, time.Now(), fwd)
		x.NoResponse = true
		for _, s := range ss {
			if s.err != nil {
				return filter.Done{Err: s.err}
			}
		}
		return filter.Done{}
	}

	held := r.pins.hold(ss, parts) // see pin.go
	return pendingFunc(func(ctx context.Context) error {
		defer r.pins.release(held)
		results := make([]kmsg.ProduceResponseTopicPartition, len(parts))
		for i := range results {
			results[i] = kmsg.NewProduceResponseTopicPartition()
			results[i].Partition = parts[i].partition
			results[i].ErrorCode = codes[i]
			if off, ok := dups[i]; ok {
				results[i].BaseOffset = off // already written: see uncertain.go
			}
		}
		var throttle int32
		hinted := false // a KIP-951 hint names the agent: send its endpoint
		defer r.a.settleInflight(srcTopics, ss)
		r.collect(ctx, ss, 0, req.Version, func() kmsg.Response { return kmsg.NewPtrProduceResponse() },
			func(s *shard, resp kmsg.Response, err error) {
				if err != nil {
					if s.up == r.a.src {
						r.a.noteUncertain(req, s.idx) // see uncertain.go
					}
					// Uncertain: it may have been written. Retriable, never success.
					r.a.log.Debug("produce forward failed", "cluster", s.up.Name(), "broker", s.addr, "err", err)
					for _, i := range s.idx {
						results[i].ErrorCode = retriable
					}
					return
				}
				pr := resp.(*kmsg.ProduceResponse)
				throttle = max(throttle, pr.ThrottleMillis)
				got := map[tp]*kmsg.ProduceResponseTopicPartition{}
				for ti := range pr.Topics {
					for pi := range pr.Topics[ti].Partitions {
						p := &pr.Topics[ti].Partitions[pi]
						got[tp{pr.Topics[ti].Topic, p.Partition}] = p
					}
				}
				for _, i := range s.idx {
					p, ok := got[parts[i]]
					if !ok {
						results[i].ErrorCode = retriable
						continue
					}
					out := &results[i]
					out.ErrorCode, out.BaseOffset, out.LogAppendTime, out.LogStartOffset = p.ErrorCode, p.BaseOffset, p.LogAppendTime, p.LogStartOffset
					if s.up == r.a.src && p.ErrorCode == 0 && p.BaseOffset >= 0 {
						if n, ok := recordbatch.OffsetSpan(records[i]); ok {
							r.a.acked.note(parts[i].topic, parts[i].partition, p.BaseOffset+n)
						}
					}
					out.ErrorRecords, out.ErrorMessage = p.ErrorRecords, p.ErrorMessage
					if leaderGone(p.ErrorCode) {
						if r.relayLeaderHint(s.up, pr, p, parts[i], out) {
							hinted = true
						} else {
							s.up.ForgetLeader(parts[i].topic)
						}
					}
				}
			})
		r.pins.noteGaps(req, results) // before the deferred release
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		resp.ThrottleMillis = throttle
		if hinted {
			self := r.a.selfBroker()
			resp.Brokers = []kmsg.ProduceResponseBroker{{NodeID: self.NodeID, Host: self.Host, Port: self.Port}}
		}
		i := 0
		for _, t := range req.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = t.Topic
			rt.Partitions = results[i : i+len(t.Partitions)]
			i += len(t.Partitions)
			resp.Topics = append(resp.Topics, rt)
		}
		x.Resp = resp
		r.a.countProduce(resp)
		return nil
	})
}

// relayLeaderHint turns a broker's KIP-951 hint (NOT_LEADER_OR_FOLLOWER
// naming the new leader and its epoch) into one the client can follow: the
// agent stays the leader, at a synthetic epoch bumped for the new upstream
// leader, and the agent routes the partition to that leader from now on.
// Without a hint franz-go waits for its metadata minimum age (5 s) before
// it retries; with one it retries at once (Java and librdkafka follow hints
// too). A hint naming a real broker would send the client around the agent,
// so none is relayed when the upstream gave none: the client then refreshes
// metadata as it would directly. It reports whether out got a hint.
func (r *router) relayLeaderHint(up *upstream.Cluster, pr *kmsg.ProduceResponse, p *kmsg.ProduceResponseTopicPartition, part tp, out *kmsg.ProduceResponseTopicPartition) bool {
	h := p.CurrentLeader
	if p.ErrorCode != kerr.NotLeaderForPartition.Code || h.LeaderID < 0 || h.LeaderEpoch < 0 {
		return false
	}
	addr := ""
	for _, b := range pr.Brokers {
		if b.NodeID == h.LeaderID {
			addr = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
		}
	}
	if !up.MoveLeader(part.topic, part.partition, h.LeaderID, addr) {
		return false
	}
	out.CurrentLeader.LeaderID = r.a.nodeID
	out.CurrentLeader.LeaderEpoch = r.a.epochs.get(up, part.topic, part.partition, h.LeaderID, h.LeaderEpoch)
	return true
}

func contains(idx []int, i int) bool {
	// idx is ascending: built in flattened order.
	lo, hi := 0, len(idx)
	for lo < hi {
		m := (lo + hi) / 2
		switch {
		case idx[m] == i:
			return true
		case idx[m] < i:
			lo = m + 1
		default:
			hi = m
		}
	}
	return false
}

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
	shards, codes := r.shardByLeader(ctx, parts, r.upstreamFor, nil)
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
	shards, codes := r.shardByLeader(ctx, parts, r.upstreamFor, nil)
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
	shards, codes := r.shardByLeader(ctx, parts, r.upstreamFor, nil)
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
