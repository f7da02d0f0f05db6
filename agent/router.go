package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/agent/internal/upstream"
	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/internal/bufpool"
	"github.com/baton-kafka/baton/internal/recordbatch"
)

// retriable is the error a client gets when the agent cannot vouch for a
// write: every client in the matrix retries it as "not persisted".
var retriable = kerr.NotLeaderForPartition.Code

// pendingFunc adapts a function to filter.Pending.
type pendingFunc func(ctx context.Context) error

func (f pendingFunc) Wait(ctx context.Context) error { return f(ctx) }

// router is the terminal Handler of a connection's chain: it answers what
// the agent owns (ApiVersions, Metadata, FindCoordinator, DescribeCluster:
// answers.go, versions.go) and forwards the rest to the cluster each topic
// routes to; a produce's partitions go where the filters planned (produce,
// below).
type router struct {
	a    *Agent
	slot uint64 // which pooled upstream connection this client uses
	// src and dst are the clusters as this connection reaches them: the
	// agent's own, or, when clients authenticate with their own
	// credentials (SASL forward mode), the client principal's (bound once
	// by its authentication, before any request is forwarded).
	src, dst *upstream.Cluster
	pair     *principalPair // the principal's, in forward mode
	// vias are where this connection's produce went (viaFor); only the
	// request side (dispatch) touches them.
	vias []*via
	// waitTimer times a produce's forward deadline (waitCall); only the
	// response side, which waits for one answer at a time, touches it.
	waitTimer *time.Timer

	// own holds upstream connections of this client connection alone, for
	// the requests a broker may park (see parks). Closed with the client
	// connection.
	ownMu  sync.Mutex
	own    map[ownKey]*upstream.Conn
	closed bool
}

type ownKey struct {
	up   *upstream.Cluster
	addr string
}

// parks says whether a broker may hold a request of this key for long: a
// Fetch up to its MaxWait for data, a JoinGroup until the members have
// joined, a SyncGroup until the leader has assigned. A broker answers one
// connection's requests in order, so on a pooled connection such a request
// would hold up every other client connection sharing it (and their
// produce would pass the forward deadline). These go on an upstream
// connection of their client connection alone, as if the client had dialed
// the broker itself.
func parks(key int16) bool {
	switch key {
	case 1, 11, 14: // Fetch, JoinGroup, SyncGroup
		return true
	}
	return false
}

// sendUp writes a request body to addr: on the pooled upstream connection,
// or on the client connection's own one for requests a broker may park.
func (r *router) sendUp(ctx context.Context, up *upstream.Cluster, addr string, key, ver int16, clientID *string, body []byte, expect bool) (*upstream.Call, error) {
	if !parks(key) {
		return up.Send(ctx, addr, r.slot, key, ver, clientID, body, expect)
	}
	c, err := r.ownConn(ctx, up, addr)
	if err != nil {
		return nil, err
	}
	return c.Send(key, ver, clientID, body, expect)
}

func (r *router) ownConn(ctx context.Context, up *upstream.Cluster, addr string) (*upstream.Conn, error) {
	k := ownKey{up, addr}
	r.ownMu.Lock()
	defer r.ownMu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("%w: %s: the client connection closed", upstream.ErrConnClosed, addr)
	}
	old := r.own[k]
	if old != nil && !old.Dead() && !old.Expiring(time.Now()) {
		return old, nil
	}
	c, err := up.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	if r.own == nil {
		r.own = map[ownKey]*upstream.Conn{}
	}
	r.own[k] = c
	if old != nil {
		old.Retire() // its SASL session ends soon: closed once answered
	}
	return c, nil
}

// close closes the client connection's own upstream connections.
func (r *router) close() {
	r.ownMu.Lock()
	defer r.ownMu.Unlock()
	r.closed = true
	for _, c := range r.own {
		c.Close(errClientGone)
	}
	r.own = nil
}

var _ filter.Handler = (*router)(nil)

// async runs fn now, in its own goroutine, and resolves when it returns.
// fn fills the exchange, so Wait never returns while fn may still write
// it: when ctx ends first, Wait still waits for fn (which sees its own ctx
// end and returns) before the response side reads the exchange.
func async(ctx context.Context, fn func(ctx context.Context) error) filter.Pending {
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	return pendingFunc(func(wctx context.Context) error {
		select {
		case err := <-done:
			return err
		case <-wctx.Done():
			<-done
			return wctx.Err()
		}
	})
}

// Dispatch routes x; a request the clusters could not answer is answered
// with a retriable error where Kafka has one for it (errorResponse), so the
// client's connection stays open.
func (r *router) Dispatch(ctx context.Context, x *filter.Exchange) filter.Pending {
	p := r.dispatch(ctx, x)
	switch x.Header.APIKey {
	case 0, 1, 2, 23: // Produce, Fetch, ListOffsets, OffsetForLeaderEpoch
		return p // answered per partition already: no wrapper on the hot path
	}
	if _, ok := p.(filter.Done); ok && x.Answered() {
		return p // answered by the agent itself, the common case for ApiVersions
	}
	return pendingFunc(func(wctx context.Context) error {
		err := p.Wait(wctx)
		if err == nil || errors.Is(err, ErrUnsupportedRequest) || ctx.Err() != nil || wctx.Err() != nil {
			return err
		}
		resp, ok := r.a.errorResponse(x.Req)
		if !ok {
			return err
		}
		r.a.log.Debug("answered with a retriable error: the cluster did not answer",
			"request", kmsg.NameForKey(x.Header.APIKey), "err", err)
		x.Resp, x.RawResp = resp, nil
		return nil
	})
}

func (r *router) dispatch(ctx context.Context, x *filter.Exchange) filter.Pending {
	if x.Req == nil {
		if x.Header.APIKey == 18 { // a client newer than kmsg: answer v0
			x.Resp = r.a.apiVersionsResponse(0, kerr.UnsupportedVersion.Code)
			return filter.Done{}
		}
		return filter.Done{Err: fmt.Errorf("%w: key %d (%s) v%d", ErrUnsupportedRequest,
			x.Header.APIKey, kmsg.NameForKey(x.Header.APIKey), x.Header.APIVersion)}
	}
	if !r.a.advertises(x.Header.APIKey, x.Header.APIVersion) {
		// What the agent advertises changes once the destination first
		// answers: the filters may have planned this produce under the
		// older set, and route counted its source topics in flight.
		r.unplan(x.Parts())
		return filter.Done{Err: fmt.Errorf("%w: %s v%d was not advertised", ErrUnsupportedRequest,
			kmsg.NameForKey(x.Header.APIKey), x.Header.APIVersion)}
	}
	switch req := x.Req.(type) {
	case *kmsg.ApiVersionsRequest:
		x.Resp = r.a.apiVersionsResponse(req.Version, 0)
		return filter.Done{}
	case *kmsg.MetadataRequest:
		return async(ctx, func(ctx context.Context) error { return r.metadata(ctx, x, req) })
	case *kmsg.FindCoordinatorRequest:
		return async(ctx, func(ctx context.Context) error { return r.findCoordinator(ctx, x, req) })
	case *kmsg.DescribeClusterRequest:
		x.Resp = r.a.describeCluster(req.Version)
		return filter.Done{}
	case *kmsg.ProduceRequest:
		return r.produce(ctx, x, req)
	case *kmsg.FetchRequest:
		return r.fetch(ctx, x, req)
	case *kmsg.ListOffsetsRequest:
		return r.listOffsets(ctx, x, req)
	case *kmsg.OffsetForLeaderEpochRequest:
		return r.offsetForLeaderEpoch(ctx, x, req)
	case *kmsg.InitProducerIDRequest:
		if req.TransactionalID != nil {
			return r.toCoordinator(ctx, x, 1, *req.TransactionalID)
		}
		return r.toAnyBroker(ctx, x)
	}
	if typ, key, ok := coordinatorOf(x.Req); ok {
		return r.toCoordinator(ctx, x, typ, key)
	}
	if _, ok := x.Req.(kmsg.AdminRequest); ok {
		addr, err := r.src.ControllerAddr(ctx)
		if err != nil {
			return filter.Done{Err: err}
		}
		return r.forwardRaw(ctx, x, r.src, addr)
	}
	return r.toAnyBroker(ctx, x)
}

// coordinatorOf returns the coordinator a request must go to: type 0 with a
// group id, or type 1 with a transactional id.
func coordinatorOf(req kmsg.Request) (int8, string, bool) {
	switch r := req.(type) {
	case *kmsg.OffsetCommitRequest:
		return 0, r.Group, true
	case *kmsg.OffsetFetchRequest:
		if len(r.Groups) > 0 {
			return 0, r.Groups[0].Group, true
		}
		return 0, r.Group, true
	case *kmsg.JoinGroupRequest:
		return 0, r.Group, true
	case *kmsg.HeartbeatRequest:
		return 0, r.Group, true
	case *kmsg.LeaveGroupRequest:
		return 0, r.Group, true
	case *kmsg.SyncGroupRequest:
		return 0, r.Group, true
	case *kmsg.DescribeGroupsRequest:
		if len(r.Groups) > 0 {
			return 0, r.Groups[0], true
		}
	case *kmsg.DeleteGroupsRequest:
		if len(r.Groups) > 0 {
			return 0, r.Groups[0], true
		}
	case *kmsg.OffsetDeleteRequest:
		return 0, r.Group, true
	case *kmsg.TxnOffsetCommitRequest:
		return 0, r.Group, true
	case *kmsg.ConsumerGroupHeartbeatRequest:
		return 0, r.Group, true
	case *kmsg.ConsumerGroupDescribeRequest:
		if len(r.Groups) > 0 {
			return 0, r.Groups[0], true
		}
	case *kmsg.AddPartitionsToTxnRequest:
		return 1, r.TransactionalID, true
	case *kmsg.AddOffsetsToTxnRequest:
		return 1, r.TransactionalID, true
	case *kmsg.EndTxnRequest:
		return 1, r.TransactionalID, true
	}
	return 0, "", false
}

// forwardRaw sends the client's request body unchanged to addr and answers
// with the broker's response body unchanged.
func (r *router) forwardRaw(ctx context.Context, x *filter.Exchange, up *upstream.Cluster, addr string) filter.Pending {
	start := time.Now()
	cl, err := r.sendUp(ctx, up, addr, x.Header.APIKey, x.Header.APIVersion, x.Header.ClientID, x.RawReq, true)
	if err != nil {
		return filter.Done{Err: err}
	}
	return pendingFunc(func(ctx context.Context) error {
		body, err := cl.Wait(ctx)
		r.a.observeUpstream(up.Name(), x.Header.APIKey, time.Since(start), err)
		if err != nil {
			return err
		}
		x.RawResp = body
		return nil
	})
}

func (r *router) toAnyBroker(ctx context.Context, x *filter.Exchange) filter.Pending {
	up := r.src
	addrs := up.AnyBrokers()
	if len(addrs) == 0 {
		return filter.Done{Err: upstream.ErrNoBrokers}
	}
	return r.forwardRaw(ctx, x, up, addrs[0])
}

func (r *router) toCoordinator(ctx context.Context, x *filter.Exchange, typ int8, key string) filter.Pending {
	up := r.src
	addr, err := up.CoordinatorAddr(ctx, typ, key, false)
	if err != nil {
		// Let the client see a coordinator error it knows to retry.
		return filter.Done{Err: fmt.Errorf("finding coordinator for %q: %w", key, err)}
	}
	p := r.forwardRaw(ctx, x, up, addr)
	return pendingFunc(func(ctx context.Context) error {
		err := p.Wait(ctx)
		if err != nil {
			up.ForgetCoordinator(typ, key)
		}
		return err
	})
}

// upstreamFor returns the cluster a topic's reads and metadata come from.
func (r *router) upstreamFor(topic string) *upstream.Cluster {
	if r.a.routes.Target(topic) == filter.Destination {
		return r.dst
	}
	return r.src
}

// --- Shards ---
//
// Requests addressed to partitions (Produce below; Fetch, ListOffsets,
// OffsetForLeaderEpoch in reads.go) are split by the cluster each
// partition goes to and by that cluster's partition leader, sent to every
// leader at once, and re-assembled in the request's order.

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
	// (a produce partition's outstanding requests went on it: see
	// filter/route); nil: any.
	conn *upstream.Conn
}

// addTo adds part i to the shard for (up, addr, conn) in shards, or to a
// new one. A part that may go on any connection joins any shard of its
// broker; one that must go on conn joins a shard on conn, or one that
// may go on any (which then goes on conn).
func addTo(shards []*shard, up *upstream.Cluster, addr string, conn *upstream.Conn, i int) []*shard {
	for _, s := range shards {
		if s.up != up || s.addr != addr {
			continue
		}
		if conn == nil || s.conn == conn || s.conn == nil {
			if conn != nil {
				s.conn = conn
			}
			s.idx = append(s.idx, i)
			return shards
		}
	}
	return append(shards, &shard{up: up, addr: addr, conn: conn, idx: []int{i}})
}

// shardByLeader groups parts by the leader of the cluster upFor names for
// their topic. codes[i] is set, and i left out of every shard, when part i
// has no leader known.
func (r *router) shardByLeader(ctx context.Context, parts []tp, upFor func(topic string) *upstream.Cluster) ([]*shard, []int16) {
	codes := make([]int16, len(parts))
	var shards []*shard
	for i, p := range parts {
		up := upFor(p.topic)
		addr, err := up.LeaderAddr(ctx, p.topic, p.partition)
		if err != nil {
			codes[i] = errorCode(err)
			continue
		}
		shards = addTo(shards, up, addr, nil, i)
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
	if r.waitTimer == nil {
		r.waitTimer = time.NewTimer(time.Hour)
		r.waitTimer.Stop()
	}
	body, err := cl.WaitUntil(ctx, cl.Start().Add(r.a.forwardDeadline(nil)), r.waitTimer)
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w: %s: %w", errForwardDeadline, cl.Conn().Addr(), err)
	}
	return body, err
}

// --- Produce ---

// via is where the router sent a produce part (filter.Via): the route
// filter sends the partition's next request the same way while this one is
// outstanding.
type via struct {
	to   filter.Cluster
	addr string
	conn *upstream.Conn
}

var _ filter.Via = (*via)(nil)

func (v *via) Cluster() filter.Cluster { return v.to }
func (v *via) Dead() bool              { return v.conn.Dead() }

// viaFor is the connection's one *via for (to, addr, conn): equal parts
// compare equal (filter.Via), and a produce allocates none.
func (r *router) viaFor(to filter.Cluster, addr string, conn *upstream.Conn) *via {
	for i, v := range r.vias {
		if v.conn == conn && v.to == to && v.addr == addr {
			return v
		}
		if v.conn.Dead() {
			// A dead connection's via is not handed out again: drop it.
			r.vias[i] = r.vias[len(r.vias)-1]
			r.vias = r.vias[:len(r.vias)-1]
			return r.viaFor(to, addr, conn)
		}
	}
	v := &via{to: to, addr: addr, conn: conn}
	r.vias = append(r.vias, v)
	return v
}

// cluster is the upstream of a route target; nil for filter.Nowhere.
func (r *router) cluster(c filter.Cluster) *upstream.Cluster {
	switch c {
	case filter.Source:
		return r.src
	case filter.Destination:
		return r.dst
	}
	return nil
}

// produce sends a produce's parts where the filters planned (Exchange.Parts:
// filter/route chose each part's cluster, and the connection a part must
// follow; filter/pidmap rewrote or answered idempotent parts bound for the
// destination), each to its partition's leader, and answers the parts the
// plan answered, or that cannot be sent, without sending them.
func (r *router) produce(ctx context.Context, x *filter.Exchange, req *kmsg.ProduceRequest) filter.Pending {
	parts := x.Parts()
	// The topics the route filter counted in flight count until the source
	// can no longer write what was sent (settleInflight), or end at once
	// if nothing was.
	srcTopics := sourceTopics(parts)
	fwd := r.a.forwardDeadline(srcTopics)
	shards := r.produceShards(ctx, parts)
	// Looking up leaders may have taken a while: the lease must still hold
	// when the bytes leave (the control plane counts a silent agent safe
	// from its lease's end plus F, and F starts at the send), unless every
	// source-bound topic is one the source fences at the cutover. A
	// request mixing those with others is refused whole for the source:
	// retriable, and rare (a lease ran out during the lookup).
	if len(srcTopics) > 0 && !r.a.leaseValid() && !r.a.mayForwardAll(srcTopics) {
		shards = dropSource(shards, r.src, parts)
	}

	expect := req.Acks != 0
	var ss []sent
	if len(shards) == 1 && len(shards[0].idx) == len(parts) && !anySend(parts) {
		// One leader serves the whole request: forward the client's bytes.
		s := shards[0]
		cl, err := s.up.SendvOn(ctx, s.addr, r.slot, s.conn, 0, req.Version, x.Header.ClientID, [][]byte{x.RawReq}, expect)
		ss = []sent{{s: s, cl: cl, err: err}}
	} else {
		ss = r.sendShards(ctx, shards, 0, req.Version, x.Header.ClientID, func(s *shard) kmsg.Request {
			return subProduce(req, parts, s.idx)
		}, expect)
	}
	for i := range parts {
		if parts[i].Send != nil {
			bufpool.Put(parts[i].Send) // written, or never will be
			parts[i].Send = nil
		}
	}
	if expect {
		// Where each part went, and what never left, before the
		// connection's next request is dispatched: the route filter folds
		// it in then (its pins and gaps).
		for _, s := range ss {
			switch {
			case s.err == nil:
				to := filter.Destination
				if s.s.up == r.src {
					to = filter.Source
				}
				v := r.viaFor(to, s.s.addr, s.cl.Conn())
				for _, i := range s.s.idx {
					parts[i].Via = v
				}
			case errors.Is(s.err, upstream.ErrNotSent):
				s.s.up.BrokerDown(s.s.addr)
				for _, i := range s.s.idx {
					parts[i].Answer(retriable)
				}
			}
		}
	}
	// What went to the source stays counted until it is answered (or can
	// no longer be written); what was not sent stops counting now.
	sentTopics := forwardedTopics(ss, parts)
	r.a.sourceUnsent(srcTopics, sentTopics)
	srcTopics = sentTopics
	if !expect {
		// Written just now, never answered: the source may write it
		// until a forward deadline from now.
		r.a.inflight.done(srcTopics, false, time.Now(), fwd)
		x.NoResponse = true
		// acks=0: the source names no offsets; the control plane's
		// attribution of these partitions is incomplete for this while.
		now := time.Now()
		for _, s := range ss {
			if s.err == nil && s.s.up == r.src {
				for _, i := range s.s.idx {
					r.a.writes.unknown(parts[i].Topic, parts[i].Partition, now)
				}
			}
		}
		for _, s := range ss {
			if s.err != nil {
				return filter.Done{Err: s.err}
			}
		}
		return filter.Done{}
	}

	return pendingFunc(func(ctx context.Context) error {
		results := make([]kmsg.ProduceResponseTopicPartition, len(parts))
		for i := range results {
			results[i] = kmsg.NewProduceResponseTopicPartition()
			results[i].Partition = parts[i].Partition
			if parts[i].Answered {
				results[i].ErrorCode = parts[i].Code
				if parts[i].Code == 0 {
					results[i].BaseOffset = parts[i].Offset // already written (filter/pidmap)
				}
			}
		}
		var throttle int32
		hinted := false // a KIP-951 hint names the agent: send its endpoint
		// A write given up on may still be appended until its call
		// settles: its partition's attribution stays unknown until then
		// (bypass detection).
		defer r.a.settleInflight(srcTopics, ss, r.src, func(i int, at time.Time) {
			for _, pi := range ss[i].s.idx {
				if parts[pi].Uncertain {
					r.a.writes.unknownSpan(parts[pi].Topic, parts[pi].Partition, ss[i].cl.Start(), at)
				}
			}
		})
		r.collect(ctx, ss, 0, req.Version, func() kmsg.Response { return kmsg.NewPtrProduceResponse() },
			func(s *shard, resp kmsg.Response, err error) {
				if err != nil {
					// Uncertain: it may have been written. Retriable, never success.
					r.a.log.Debug("produce forward failed", "cluster", s.up.Name(), "broker", s.addr, "err", err)
					if !errors.Is(err, context.Canceled) {
						s.up.BrokerDown(s.addr) // dead, cut off or too slow: ask who leads now
					}
					for _, i := range s.idx {
						results[i].ErrorCode = retriable
						if errors.Is(err, upstream.ErrNotSent) {
							continue
						}
						parts[i].Uncertain = true // see filter/pidmap
						if s.up == r.src {
							// Maybe written, offset unknown: not a bypass.
							r.a.writes.unknown(parts[i].Topic, parts[i].Partition, time.Now())
						}
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
					part := tp{parts[i].Topic, parts[i].Partition}
					p, ok := got[part]
					if !ok {
						results[i].ErrorCode = retriable
						continue
					}
					out := &results[i]
					out.ErrorCode, out.BaseOffset, out.LogAppendTime, out.LogStartOffset = p.ErrorCode, p.BaseOffset, p.LogAppendTime, p.LogStartOffset
					if s.up == r.src {
						out.ErrorCode = r.a.sourceFenceRefused(part.topic, out.ErrorCode)
					}
					if s.up == r.src && p.ErrorCode == 0 {
						if n, ok := recordbatch.OffsetSpan(parts[i].Records); ok && p.BaseOffset >= 0 {
							r.a.acked.note(part.topic, part.partition, p.BaseOffset+n)
							r.a.writes.acked(part.topic, part.partition, p.BaseOffset, p.BaseOffset+n)
						} else {
							r.a.writes.unknown(part.topic, part.partition, time.Now()) // written, offsets not known
						}
					}
					out.ErrorRecords, out.ErrorMessage = p.ErrorRecords, p.ErrorMessage
					if leaderGone(p.ErrorCode) {
						if r.relayLeaderHint(s.up, pr, p, part, out) {
							hinted = true
						} else {
							s.up.ForgetLeader(part.topic)
						}
					}
				}
			})
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

// unplan undoes the plan of a produce refused whole before it was sent:
// the in-flight counts of its source topics end, and pidmap's copies go
// back to the pool.
func (r *router) unplan(parts []filter.Part) {
	r.a.sourceUnsent(sourceTopics(parts), nil)
	for i := range parts {
		if parts[i].Send != nil {
			bufpool.Put(parts[i].Send)
			parts[i].Send = nil
		}
	}
}

// sourceTopics are the topics route counted in flight for a produce: those
// with a part bound for the source.
func sourceTopics(parts []filter.Part) []string {
	var out []string
	for i := range parts {
		if parts[i].To == filter.Source && !slices.Contains(out, parts[i].Topic) {
			out = append(out, parts[i].Topic)
		}
	}
	return out
}

// produceShards groups the parts the plan leaves unanswered by the broker
// each goes to: the one its Via names (the connection its partition's
// outstanding requests went on), else its cluster's partition leader. A
// part with no cluster, or no leader known, is answered here.
func (r *router) produceShards(ctx context.Context, parts []filter.Part) []*shard {
	var shards []*shard
	for i := range parts {
		p := &parts[i]
		if p.Answered {
			continue
		}
		up := r.cluster(p.To)
		if up == nil {
			p.Answer(retriable)
			continue
		}
		if v, ok := p.Via.(*via); ok && v.to == p.To {
			shards = addTo(shards, up, v.addr, v.conn, i)
			continue
		}
		addr, err := up.LeaderAddr(ctx, p.Topic, p.Partition)
		if err != nil {
			p.Answer(errorCode(err))
			continue
		}
		shards = addTo(shards, up, addr, nil, i)
	}
	return shards
}

// dropSource takes the shards bound for src out of shards, and answers
// their parts with the retriable error: nothing of them was sent.
func dropSource(shards []*shard, src *upstream.Cluster, parts []filter.Part) []*shard {
	kept := shards[:0]
	for _, s := range shards {
		if s.up != src {
			kept = append(kept, s)
			continue
		}
		for _, i := range s.idx {
			parts[i].Answer(retriable)
		}
	}
	return kept
}

// anySend reports whether a part goes upstream with bytes of the plan's
// instead of the client's.
func anySend(parts []filter.Part) bool {
	for i := range parts {
		if parts[i].Send != nil {
			return true
		}
	}
	return false
}

// subProduce is the part of req that one shard serves (the parts idx, in
// the request's order), with the plan's bytes where it has them.
func subProduce(req *kmsg.ProduceRequest, parts []filter.Part, idx []int) *kmsg.ProduceRequest {
	sub := kmsg.NewPtrProduceRequest()
	sub.Version, sub.TransactionID, sub.Acks, sub.TimeoutMillis = req.Version, req.TransactionID, req.Acks, req.TimeoutMillis
	flat, next := 0, 0
	for _, t := range req.Topics {
		var st *kmsg.ProduceRequestTopic
		for _, p := range t.Partitions {
			if next < len(idx) && idx[next] == flat {
				next++
				if b := parts[flat].Send; b != nil {
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
