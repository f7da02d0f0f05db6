package replicas

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/cutover"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/xds"
)

// Followers (docs/design.md §13.1). A replica that is not the leader
// serves xDS and the Lease service from the state it watches in etcd, so
// agents attached to it keep their leases while the leader dies and a new
// one is elected. It changes no state: it renders the leader's routes and
// grants leases by the leader's rule (the agent applied the current
// config version), recording each grant in etcd in a transaction that
// commits only if the config version is still the one it granted at. The
// leader therefore knows, once it stored a new version, every lease
// granted before it (it reads them at the start of a cutover's drain, and
// watches them after), and an agent cut off from a follower that lags
// behind cannot be granted on a version the leader has moved past.
//
// A follower records the drain reports of MIGRATING topics (what the
// leader's drain reads), the acked ends of the others (a cutover waits for
// the destination to hold them) and, for bypass detection, the writes and
// findings a heartbeat carried; grants and reports of many agents go in
// one transaction (a group commit: while one is in flight the next
// gathers).

// maxRecordBatch is how many agents one transaction records at most.
const maxRecordBatch = 64

// Follower serves one replica's routes and leases while another leads.
// Create it with NewFollower, serve XDS() and it (a LeaseServer) on gRPC,
// and Run it; once Run returned it grants nothing more.
type Follower struct {
	batonv1.UnimplementedLeaseServer

	cfg   controlplane.FollowerConfig
	store *controlplane.EtcdStore
	log   *slog.Logger

	mu    sync.Mutex
	state controlplane.RouteState

	queue   chan *pendingRecord
	stopped chan struct{} // closed when Run's recorder stopped
}

var _ batonv1.LeaseServer = (*Follower)(nil)

type pendingRecord struct {
	agent   controlplane.Agent
	grant   bool
	version uint64 // granted at
	done    chan error
}

// NewFollower loads the routes' state from store and publishes it. It
// takes controlplane.New's options; the ones that matter are ReplicaID
// (required), LeaseDuration, ForwardDeadline, Clusters, WithXDS,
// NodeIdentity, Clock and Logger, and they MUST match the leader's.
func NewFollower(ctx context.Context, store *controlplane.EtcdStore, opts ...controlplane.Opt) (*Follower, error) {
	cfg := controlplane.NewFollowerConfig(opts...)
	switch {
	case cfg.Replica == "":
		return nil, fmt.Errorf("%w: a follower needs its replica id", controlplane.ErrBadConfig)
	case cfg.Source == nil || cfg.Dest == nil || cfg.Source.GetName() == "" || cfg.Dest.GetName() == "":
		return nil, fmt.Errorf("%w: named source and destination clusters are required", controlplane.ErrBadConfig)
	case cfg.Lease <= 0 || cfg.Forward <= 0 || cfg.Forward >= cfg.Lease:
		return nil, fmt.Errorf("%w: want 0 < forward deadline (%v) < lease (%v)", controlplane.ErrBadConfig, cfg.Forward, cfg.Lease)
	}
	if cfg.XDS == nil {
		cfg.XDS = xds.NewServer(xds.WithLogger(cfg.Log), xds.WithClock(cfg.Now))
	}
	f := &Follower{cfg: cfg, store: store, log: cfg.Log.With("component", "follower", "replica", cfg.Replica),
		queue: make(chan *pendingRecord), stopped: make(chan struct{})}
	st, err := store.LoadRouteState(ctx)
	if err != nil {
		return nil, err
	}
	f.state = st
	f.publish()
	return f, nil
}

// XDS returns the xDS server the follower publishes on.
func (f *Follower) XDS() *xds.Server { return f.cfg.XDS }

// ServerOptions returns the gRPC server options NodeIdentity needs.
func (f *Follower) ServerOptions() []grpc.ServerOption { return f.cfg.ServerOptions(f.log) }

// Version is the config version the follower serves.
func (f *Follower) Version() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state.Version
}

func (f *Follower) publish() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cfg.XDS.Update(controlplane.RouteResources(&f.state, f.cfg.Forward, f.cfg.Source, f.cfg.Dest))
}

// Run watches the routes' state, publishing every change, and records
// grants until ctx ends. It returns once every grant is answered; the
// Lease service refuses from then on.
func (f *Follower) Run(ctx context.Context) error {
	done := make(chan struct{})
	go func() { defer close(done); f.recorder(ctx) }()
	defer func() { <-done }()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		f.mu.Lock()
		rev := f.state.Rev
		f.mu.Unlock()
		if err := f.watch(ctx, rev); err != nil && ctx.Err() == nil {
			f.log.Warn("watching the routes' state in etcd; reading it again", "err", err)
		}
		for ctx.Err() == nil {
			st, err := f.store.LoadRouteState(ctx)
			if err == nil {
				f.mu.Lock()
				if st.Rev > f.state.Rev {
					f.state = st
				}
				f.mu.Unlock()
				f.publish()
				backoff = 100 * time.Millisecond
				break
			}
			f.log.Warn("reading the routes' state from etcd", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}
	return nil
}

// watch applies the changes after rev until the watch fails or ctx ends.
// The keys one transaction wrote come in one response, applied together:
// a version is never published without the topic it changed.
func (f *Follower) watch(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for resp := range f.store.WatchRouteState(wctx, rev) {
		if err := resp.Err(); err != nil {
			return err
		}
		if len(resp.Events) == 0 {
			continue
		}
		f.mu.Lock()
		for _, e := range resp.Events {
			if err := f.state.Apply(e.Type == mvccpb.DELETE, e.Kv.Key, e.Kv.Value); err != nil {
				f.mu.Unlock()
				return err
			}
		}
		f.state.Rev = resp.Header.Revision
		f.mu.Unlock()
		f.publish()
	}
	return ctx.Err()
}

// Heartbeat implements the Lease service as the leader does (granted only
// to an agent that applied the current version), once the grant is
// recorded in etcd at that version.
func (f *Follower) Heartbeat(ctx context.Context, req *batonv1.HeartbeatRequest) (*batonv1.HeartbeatResponse, error) {
	if req.GetNodeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "node_id is required")
	}
	now := f.cfg.Now()
	f.mu.Lock()
	version := f.state.Version
	drains := controlplane.DrainReports(req.GetTopics())
	for name, d := range drains {
		switch t, ok := f.state.Topics[name]; {
		case ok && t.State == migration.Migrating:
		case len(d.AckedEnds) > 0:
			// What the agent acked: a cutover waits for the destination
			// to hold it, whenever it comes.
			drains[name] = controlplane.TopicDrain{AckedEnds: d.AckedEnds}
		default:
			delete(drains, name) // the leader's drain reads MIGRATING topics only
		}
	}
	f.mu.Unlock()
	resp := &batonv1.HeartbeatResponse{Lease: durationpb.New(f.cfg.Lease), RequiredVersion: version,
		ForwardDeadline: durationpb.New(f.cfg.Forward), ServerTime: timestamppb.New(now)}
	rec := controlplane.Agent{Node: req.GetNodeId(), Namespace: req.GetNamespace(), Workload: req.GetWorkload(),
		AckedVersion: req.GetAckedVersion(), LastHeartbeat: now, Topics: drains, Replica: f.cfg.Replica, Incarnation: req.GetIncarnation()}
	var err error
	if rec.Report, err = forwardedReport(req); err != nil {
		return nil, status.Errorf(codes.Internal, "encoding the report: %v", err)
	}
	refuse := func(reason string) (*batonv1.HeartbeatResponse, error) {
		resp.Reason, rec.Refused = reason, reason
		rec.GrantedAt, rec.ExpiresAt = time.Time{}, time.Time{}
		if rec.Report != nil {
			// The agent drops what it reported once answered: keep it for
			// the leader's bypass detection.
			if err := f.record(ctx, rec, false, version); err != nil {
				return nil, status.Errorf(codes.Unavailable, "recording the agent's report: %v", err)
			}
		}
		return resp, nil
	}
	// The leader's rule (ControlPlane.Heartbeat grants by it too).
	l := cutover.GrantLease(now, f.cfg.Lease, req.GetAckedVersion(), version, time.Time{})
	if !l.Granted {
		return refuse(l.Refused)
	}
	rec.GrantedAt, rec.ExpiresAt = l.GrantedAt, l.ExpiresAt
	switch err := f.record(ctx, rec, true, version); {
	case errors.Is(err, controlplane.ErrVersionMoved):
		resp.RequiredVersion = version + 1
		return refuse(fmt.Sprintf("the config version moved past %d: apply the next one first", version))
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "recording the lease: %v", err)
	}
	resp.Granted, resp.GrantedAt, resp.ExpiresAt = true, timestamppb.New(now), timestamppb.New(rec.ExpiresAt)
	return resp, nil
}

// forwardedReport is what of a heartbeat the leader's bypass detection and
// findings read, encoded; nil if it carried none of it. The agent's clock
// bounds (last_server_time) are left out: they are this replica's clock.
func forwardedReport(req *batonv1.HeartbeatRequest) ([]byte, error) {
	fs := req.GetFindings()
	if len(fs) > xds.MaxFindings {
		fs = fs[:xds.MaxFindings] // as many as the leader takes
	}
	out := &batonv1.HeartbeatRequest{NodeId: req.GetNodeId(), Incarnation: req.GetIncarnation(), SentAt: req.GetSentAt(),
		Findings: fs}
	for _, d := range req.GetTopics() {
		if len(d.GetWrites()) > 0 || d.GetWritesTruncated() {
			out.Topics = append(out.Topics, &batonv1.TopicDrain{Topic: d.GetTopic(), Writes: d.GetWrites(), WritesTruncated: d.GetWritesTruncated()})
		}
	}
	if len(out.Topics) == 0 && len(out.Findings) == 0 {
		return nil, nil
	}
	return proto.Marshal(out)
}

// record queues rec for the recorder and waits for its transaction.
func (f *Follower) record(ctx context.Context, rec controlplane.Agent, grant bool, version uint64) error {
	p := &pendingRecord{agent: rec, grant: grant, version: version, done: make(chan error, 1)}
	select {
	case f.queue <- p:
	case <-f.stopped:
		return errFollowerStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		return ctx.Err() // the grant may still commit: the leader then counts it, which is safe
	}
}

// recorder commits queued records, as many as are waiting (up to
// maxRecordBatch) per transaction, until ctx ends.
func (f *Follower) recorder(ctx context.Context) {
	defer close(f.stopped)
	for {
		var batch []*pendingRecord
		select {
		case p := <-f.queue:
			batch = append(batch, p)
		case <-ctx.Done():
			return
		}
	gather:
		for len(batch) < maxRecordBatch {
			select {
			case p := <-f.queue:
				batch = append(batch, p)
			default:
				break gather
			}
		}
		f.commit(ctx, batch)
	}
}

// commit records batch: grants in one transaction per config version they
// were made at, reports without a grant in one more. Each record is
// answered with its transaction's result.
func (f *Follower) commit(ctx context.Context, batch []*pendingRecord) {
	type group struct {
		grant   bool
		version uint64
	}
	groups := map[group][]*pendingRecord{}
	for _, p := range batch {
		g := group{p.grant, p.version}
		if !p.grant {
			g.version = 0 // reports commit whatever the version
		}
		groups[g] = append(groups[g], p)
	}
	for g, ps := range groups {
		// One key once per transaction: the latest record of a node.
		last := map[string]int{}
		for i, p := range ps {
			last[p.agent.Node] = i
		}
		agents := make([]controlplane.Agent, 0, len(last))
		for i, p := range ps {
			if last[p.agent.Node] == i {
				agents = append(agents, p.agent)
			}
		}
		var err error
		if g.grant {
			err = f.store.RecordGrants(ctx, g.version, agents)
		} else {
			err = f.store.RecordReports(ctx, agents)
		}
		for _, p := range ps {
			p.done <- err
		}
	}
}
