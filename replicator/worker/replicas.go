package worker

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
)

// Replicas is a Replication client for control-plane replicas, one client
// per replica: only the leader grants partition leases, and a follower
// answers Unavailable. A call goes to the replica that answered last; on
// Unavailable (a follower, or a replica out of reach) it goes on to the
// next, once round all of them, and the first other answer is returned.
func Replicas(clients ...batonv1.ReplicationClient) batonv1.ReplicationClient {
	if len(clients) == 1 {
		return clients[0]
	}
	return &replicas{clients: clients}
}

type replicas struct {
	clients []batonv1.ReplicationClient
	mu      sync.Mutex
	cur     int
}

var _ batonv1.ReplicationClient = (*replicas)(nil)

func (r *replicas) Work(ctx context.Context, req *batonv1.WorkRequest, opts ...grpc.CallOption) (*batonv1.WorkResponse, error) {
	r.mu.Lock()
	first := r.cur
	r.mu.Unlock()
	var err error
	for i := range r.clients {
		n := (first + i) % len(r.clients)
		var resp *batonv1.WorkResponse
		resp, err = r.clients[n].Work(ctx, req, opts...)
		if status.Code(err) != codes.Unavailable {
			r.mu.Lock()
			r.cur = n
			r.mu.Unlock()
			return resp, err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, err
}
