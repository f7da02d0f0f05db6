package controlplane

import (
	"context"
	"sort"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane/cutover"
)

// The Lease service: agents' heartbeats, the leases granted on them
// (cutover.GrantLease), and the agents' lease state flushed to the store.

// Heartbeat implements the Lease service: it records the agent's report
// and grants a lease if the agent applied the current config version.
func (cp *ControlPlane) Heartbeat(ctx context.Context, req *batonv1.HeartbeatRequest) (*batonv1.HeartbeatResponse, error) {
	if req.GetNodeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "node_id is required")
	}
	now := cp.now()
	cp.mu.Lock()
	a, known := cp.agents[req.GetNodeId()]
	if !known {
		a = &Agent{Node: req.GetNodeId()}
		cp.agents[a.Node] = a
	}
	prevExpires := a.ExpiresAt
	noteIncarnation(a, req.GetIncarnation())
	a.Namespace, a.Workload, a.AckedVersion, a.LastHeartbeat = req.GetNamespace(), req.GetWorkload(), req.GetAckedVersion(), now
	a.Topics, a.Replica = DrainReports(req.GetTopics()), cp.cfg.replica
	resp := &batonv1.HeartbeatResponse{Lease: durationpb.New(cp.cfg.lease), RequiredVersion: cp.version,
		ForwardDeadline: durationpb.New(cp.cfg.forward), ServerTime: timestamppb.New(now)}
	// Never counted earlier than a grant counted at a takeover (New).
	if l := cutover.GrantLease(now, cp.cfg.lease, req.GetAckedVersion(), cp.version, a.GrantedAt); !l.Granted {
		a.Refused, resp.Reason = l.Refused, l.Refused
	} else {
		a.Refused, a.GrantedAt, a.ExpiresAt = "", l.GrantedAt, l.ExpiresAt
		resp.Granted, resp.GrantedAt, resp.ExpiresAt = true, timestamppb.New(now), timestamppb.New(a.ExpiresAt)
	}
	close(cp.changed)
	cp.changed = make(chan struct{})
	snapshot := copyAgent(a)
	if known {
		cp.dirty[a.Node] = true
	}
	cp.mu.Unlock()
	cp.cfg.reports.ObserveReport(req, now)
	cp.shadow.Heartbeat(ctx, now, req, prevExpires)
	if !known {
		// A new agent is stored before its first grant is answered, so a
		// restarted control plane knows it may be forwarding.
		if err := cp.store.PutAgents(ctx, []Agent{snapshot}); err != nil {
			return nil, status.Errorf(codes.Unavailable, "storing the agent: %v", err)
		}
	}
	return resp, nil
}

// Agents returns every agent known, with its xDS state.
func (cp *ControlPlane) Agents() []AgentView {
	now := cp.now()
	cp.mu.Lock()
	out := make([]AgentView, 0, len(cp.agents))
	for _, a := range cp.agents {
		out = append(out, AgentView{Agent: copyAgent(a), LeaseValid: now.Before(a.ExpiresAt)})
	}
	cp.mu.Unlock()
	for i := range out {
		out[i].XDS, _ = cp.cfg.xds.Node(out[i].Node)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

func (cp *ControlPlane) flush(ctx context.Context) {
	cp.mu.Lock()
	var out []Agent
	for n := range cp.dirty {
		if a := cp.agents[n]; a != nil {
			out = append(out, copyAgent(a))
		}
	}
	clear(cp.dirty)
	cp.mu.Unlock()
	if err := cp.store.PutAgents(ctx, out); err != nil {
		cp.log.Warn("storing agents' lease state", "err", err)
		cp.mu.Lock()
		for _, a := range out {
			cp.dirty[a.Node] = true
		}
		cp.mu.Unlock()
	}
}

func copyAgent(a *Agent) Agent {
	c := *a
	c.Topics = make(map[string]TopicDrain, len(a.Topics))
	for k, v := range a.Topics {
		c.Topics[k] = v
	}
	return c
}
