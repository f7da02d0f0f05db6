package replicas

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
)

// LeaseSwitch is a replica's Lease service: a follower's until the replica
// is elected, the leader's after (Set). While it holds none it answers
// Unavailable, and the agent asks again.
type LeaseSwitch struct {
	batonv1.UnimplementedLeaseServer
	cur atomic.Pointer[batonv1.LeaseServer]
}

var _ batonv1.LeaseServer = (*LeaseSwitch)(nil)

// Set makes s answer with l (nil: with Unavailable).
func (s *LeaseSwitch) Set(l batonv1.LeaseServer) {
	if l == nil {
		s.cur.Store(nil)
		return
	}
	s.cur.Store(&l)
}

// Heartbeat implements the Lease service.
func (s *LeaseSwitch) Heartbeat(ctx context.Context, req *batonv1.HeartbeatRequest) (*batonv1.HeartbeatResponse, error) {
	l := s.cur.Load()
	if l == nil {
		return nil, status.Error(codes.Unavailable, "this control-plane replica is taking over as leader: ask again")
	}
	return (*l).Heartbeat(ctx, req)
}

// ReplicationSwitch is a replica's Replication service: the leader's
// replication.WorkerPool once the replica is elected (Set), and until then
// an answer that names this replica a follower (Unavailable): workers ask
// the next replica they were given.
type ReplicationSwitch struct {
	batonv1.UnimplementedReplicationServer
	cur atomic.Pointer[batonv1.ReplicationServer]
}

var _ batonv1.ReplicationServer = (*ReplicationSwitch)(nil)

// Set makes s answer with r.
func (s *ReplicationSwitch) Set(r batonv1.ReplicationServer) { s.cur.Store(&r) }

// Work implements the Replication service.
func (s *ReplicationSwitch) Work(ctx context.Context, req *batonv1.WorkRequest) (*batonv1.WorkResponse, error) {
	r := s.cur.Load()
	if r == nil {
		return nil, status.Error(codes.Unavailable, NotLeaderMessage)
	}
	return (*r).Work(ctx, req)
}

// NotLeaderMessage is how a follower answers a worker's Work: workers move
// to the next replica on it.
const NotLeaderMessage = "this control-plane replica is a follower: partition leases are granted by the leader"
