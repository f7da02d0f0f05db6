package agent

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/agent/internal/upstream"
	"github.com/baton-kafka/baton/filter"
)

// The requests the agent answers itself from what the clusters tell it:
// through the agent a client sees one broker, the agent.

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
			if r.upstreamFor(*t.Topic) == r.dst {
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
	srcKeep := func(t string) bool { return !all || r.upstreamFor(t) == r.src }
	if err := add(r.src, srcTopics, srcKeep); err != nil {
		return err
	}
	// The destination only for the topics that route there: asked for
	// none (nil), it would answer all of its topics.
	if len(dstTopics) > 0 {
		if err := add(r.dst, dstTopics, func(string) bool { return true }); err != nil {
			return err
		}
	}
	// One cluster id whichever cluster answered: through the agent a
	// client sees one cluster, and librdkafka warns when its id changes.
	if id := r.src.ClusterID(); id != nil {
		resp.ClusterID = id
	}
	x.Resp = resp
	return nil
}

func (r *router) findCoordinator(ctx context.Context, x *filter.Exchange, req *kmsg.FindCoordinatorRequest) error {
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	self := r.a.selfBroker()
	answer := func(key string) (int16, *string) {
		if _, err := r.src.CoordinatorAddr(ctx, req.CoordinatorType, key, true); err != nil {
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
