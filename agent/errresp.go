package agent

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Through the agent a client sees exactly one broker: the agent. Closing
// the client's connection because a cluster behind it failed makes the
// client count that one broker as down (librdkafka then reports "all
// brokers down", and kcat exits). So a request the agent could not get
// answered upstream is answered with an error the client retries, on a
// connection that stays open: what a broker does while its own leader or
// coordinator is unavailable.

// errorResponse answers req with the retriable error a broker gives when
// what req needs is not available now, and the connection stays open.
// ok is false for requests without such an answer (admin requests and
// the rare group requests below), whose connection closes as before.
func (a *Agent) errorResponse(req kmsg.Request) (resp kmsg.Response, ok bool) {
	var (
		leader      = kerr.LeaderNotAvailable.Code        // metadata: retry the topic later
		coordinator = kerr.CoordinatorNotAvailable.Code   // find the coordinator again, retry
		loading     = kerr.CoordinatorLoadInProgress.Code // retry as is
	)
	switch req := req.(type) {
	case *kmsg.MetadataRequest:
		r := req.ResponseKind().(*kmsg.MetadataResponse)
		r.Brokers = []kmsg.MetadataResponseBroker{a.selfBroker()}
		r.ControllerID = a.nodeID
		r.ClusterID = a.src.ClusterID()
		topics := make([]string, 0, len(req.Topics))
		for _, t := range req.Topics {
			if t.Topic != nil {
				topics = append(topics, *t.Topic)
			}
		}
		if req.Topics == nil { // all topics: the ones the agent routes
			routes, _ := a.routes.Snapshot()
			for _, rt := range routes {
				topics = append(topics, rt.Topic)
			}
		}
		for _, t := range topics {
			mt := kmsg.NewMetadataResponseTopic()
			mt.Topic, mt.ErrorCode = kmsg.StringPtr(t), leader
			r.Topics = append(r.Topics, mt)
		}
		return r, true
	case *kmsg.InitProducerIDRequest:
		r := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		r.ProducerID, r.ProducerEpoch = -1, -1
		r.ErrorCode = loading
		if req.TransactionalID != nil {
			r.ErrorCode = coordinator
		}
		return r, true
	case *kmsg.JoinGroupRequest:
		r := req.ResponseKind().(*kmsg.JoinGroupResponse)
		r.ErrorCode, r.Generation, r.MemberID = coordinator, -1, req.MemberID
		return r, true
	case *kmsg.SyncGroupRequest:
		r := req.ResponseKind().(*kmsg.SyncGroupResponse)
		r.ErrorCode = coordinator
		return r, true
	case *kmsg.HeartbeatRequest:
		r := req.ResponseKind().(*kmsg.HeartbeatResponse)
		r.ErrorCode = coordinator
		return r, true
	case *kmsg.LeaveGroupRequest:
		r := req.ResponseKind().(*kmsg.LeaveGroupResponse)
		r.ErrorCode = coordinator
		return r, true
	case *kmsg.ConsumerGroupHeartbeatRequest:
		r := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
		r.ErrorCode = coordinator
		return r, true
	case *kmsg.AddOffsetsToTxnRequest:
		r := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
		r.ErrorCode = coordinator
		return r, true
	case *kmsg.EndTxnRequest:
		r := req.ResponseKind().(*kmsg.EndTxnResponse)
		r.ErrorCode = coordinator
		return r, true
	case *kmsg.OffsetCommitRequest:
		r := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, coordinator
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		return r, true
	case *kmsg.TxnOffsetCommitRequest:
		r := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewTxnOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, coordinator
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		return r, true
	case *kmsg.OffsetFetchRequest:
		r := req.ResponseKind().(*kmsg.OffsetFetchResponse)
		if req.Version >= 8 {
			for _, g := range req.Groups {
				rg := kmsg.NewOffsetFetchResponseGroup()
				rg.Group, rg.ErrorCode = g.Group, coordinator
				r.Groups = append(r.Groups, rg)
			}
			return r, true
		}
		if req.Version < 2 { // no top-level error code before v2
			return nil, false
		}
		r.ErrorCode = coordinator
		return r, true
	case *kmsg.AddPartitionsToTxnRequest:
		r := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
		if req.Version >= 4 {
			r.ErrorCode = coordinator
			return r, true
		}
		for _, t := range req.Topics {
			rt := kmsg.NewAddPartitionsToTxnResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p, coordinator
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		return r, true
	}
	return nil, false
}
