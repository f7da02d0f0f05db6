package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/agent/internal/upstream"
	"github.com/baton-kafka/baton/filter"
)

// retriable is the error a client gets when the agent cannot vouch for a
// write: every client in the matrix retries it as "not persisted".
var retriable = kerr.NotLeaderForPartition.Code

// pendingFunc adapts a function to filter.Pending.
type pendingFunc func(ctx context.Context) error

func (f pendingFunc) Wait(ctx context.Context) error { return f(ctx) }

// router is the terminal Handler of a connection's chain: it answers what
// the agent owns (ApiVersions, Metadata, FindCoordinator, DescribeCluster)
// and forwards the rest to the cluster each topic routes to.
type router struct {
	a    *Agent
	slot uint64 // which pooled upstream connection this client uses

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
		addr, err := r.a.src.ControllerAddr(ctx)
		if err != nil {
			return filter.Done{Err: err}
		}
		return r.forwardRaw(ctx, x, r.a.src, addr)
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
	up := r.a.src
	addrs := up.AnyBrokers()
	if len(addrs) == 0 {
		return filter.Done{Err: upstream.ErrNoBrokers}
	}
	return r.forwardRaw(ctx, x, up, addrs[0])
}

func (r *router) toCoordinator(ctx context.Context, x *filter.Exchange, typ int8, key string) filter.Pending {
	up := r.a.src
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
		return r.a.dst
	}
	return r.a.src
}

// --- agent-owned answers ---

func (r *router) metadata(ctx context.Context, x *filter.Exchange, req *kmsg.MetadataRequest) error {
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	resp.Brokers = []kmsg.MetadataResponseBroker{r.a.selfBroker()}
	resp.ControllerID = r.a.nodeID
	all := req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0)

	// Ask each cluster for the topics that route to it.
	var srcTopics, dstTopics []string
	if all {
		srcTopics = nil
		if routes, _ := r.a.routes.Snapshot(); len(routes) > 0 {
			for _, rt := range routes {
				if rt.Target() == filter.Destination {
					dstTopics = append(dstTopics, rt.Topic)
				}
			}
		}
	} else {
		srcTopics = []string{}
		for _, t := range req.Topics {
			if t.Topic == nil {
				continue // topic ids are not routed; the client gets no entry
			}
			if r.upstreamFor(*t.Topic) == r.a.dst {
				dstTopics = append(dstTopics, *t.Topic)
			} else {
				srcTopics = append(srcTopics, *t.Topic)
			}
		}
	}
	add := func(up *upstream.Cluster, topics []string, keep func(string) bool) error {
		if topics != nil && len(topics) == 0 {
			return nil
		}
		md, err := up.Metadata(ctx, topics, req.AllowAutoTopicCreation)
		if err != nil {
			return err
		}
		if resp.ClusterID == nil {
			resp.ClusterID = md.ClusterID // unless the source's is known, below
		}
		for _, t := range md.Topics {
			if t.Topic == nil || !keep(*t.Topic) {
				continue
			}
			t.Partitions = r.a.rewritePartitions(up, *t.Topic, t.Partitions)
			if t.TopicID != ([16]byte{}) {
				t.TopicID = topicID(*t.Topic)
			}
			resp.Topics = append(resp.Topics, t)
		}
		return nil
	}
	srcKeep := func(t string) bool { return !all || r.upstreamFor(t) == r.a.src }
	if err := add(r.a.src, srcTopics, srcKeep); err != nil {
		return err
	}
	// The destination only for the topics that route there: asked for
	// none (nil), it would answer all of its topics.
	if len(dstTopics) > 0 {
		if err := add(r.a.dst, dstTopics, func(string) bool { return true }); err != nil {
			return err
		}
	}
	// One cluster id whichever cluster answered: through the agent a
	// client sees one cluster, and librdkafka warns when its id changes.
	if id := r.a.src.ClusterID(); id != nil {
		resp.ClusterID = id
	}
	x.Resp = resp
	return nil
}

func (r *router) findCoordinator(ctx context.Context, x *filter.Exchange, req *kmsg.FindCoordinatorRequest) error {
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	self := r.a.selfBroker()
	answer := func(key string) (int16, *string) {
		if _, err := r.a.src.CoordinatorAddr(ctx, req.CoordinatorType, key, true); err != nil {
			var ke *kerr.Error
			if errors.As(err, &ke) {
				return ke.Code, nil
			}
			msg := err.Error()
			return kerr.CoordinatorNotAvailable.Code, &msg
		}
		return 0, nil
	}
	if req.Version < 4 {
		code, msg := answer(req.CoordinatorKey)
		resp.ErrorCode, resp.ErrorMessage = code, msg
		if code == 0 {
			resp.NodeID, resp.Host, resp.Port = self.NodeID, self.Host, self.Port
		} else {
			resp.NodeID = -1
		}
		x.Resp = resp
		return nil
	}
	for _, key := range req.CoordinatorKeys {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key = key
		c.ErrorCode, c.ErrorMessage = answer(key)
		if c.ErrorCode == 0 {
			c.NodeID, c.Host, c.Port = self.NodeID, self.Host, self.Port
		} else {
			c.NodeID = -1
		}
		resp.Coordinators = append(resp.Coordinators, c)
	}
	x.Resp = resp
	return nil
}
