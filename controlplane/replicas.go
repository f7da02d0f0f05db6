package controlplane

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/xds"
)

// The leader's side of followers (package replicas, docs/design.md
// §13.1): what followers record of the agents they answer is merged into
// the leader's view, as if the agent had reported to the leader when the
// leader saw the record. That time is never before the grant (a follower
// answers only once its record committed), so the silent-safe rule
// (granted_at + lease + F) stays safe without trusting a follower's clock.
//
// Every revision of every record is taken, in order, from one watch
// (Records, replicas.Records): a later record of an agent (a refusal, the
// leader's own flush) may overwrite a grant in etcd before the leader saw
// it, so reading the latest values is not enough. A cutover, once
// MIGRATING is stored, waits until the watch has delivered every revision
// up to then (Records.Sync): grants after it were made at the new
// version, so the grants that may have let an agent forward the topic are
// all known then. Where the watch lost history (a compaction, a broken
// stream), every agent whose record changed meanwhile counts as granted
// when it is read again.

// Records follows the agent records the other replicas write to etcd, for
// one control plane that leads them (replicas.Records).
type Records interface {
	// Watch hands every record written after revision rev, in order, to
	// cp.MergeRecords, until ctx ends.
	Watch(ctx context.Context, cp *ControlPlane, rev int64)
	// Sync returns once Watch has handed over every revision etcd holds
	// now.
	Sync(ctx context.Context) error
}

// WithRecords sets what follows the records other replicas write (default
// none). New requires it on an EtcdStore with a ReplicaID: a leader that
// did not know the leases followers grant could drain a cutover while an
// agent still forwards.
func WithRecords(r Records) Opt { return optFunc(func(c *config) { c.records = r }) }

// replicaStore is the leader's store when replicas share it: set in New
// when the store is etcd and the control plane has a replica id.
func (cp *ControlPlane) replicaStore() *EtcdStore {
	es, ok := cp.store.(*EtcdStore)
	if !ok || cp.cfg.replica == "" {
		return nil
	}
	return es
}

// MergeRecords takes records other replicas wrote into the leader's view,
// at the control plane's clock now, and hands the writes and findings a
// record carries to bypass detection. Records this replica made change
// nothing, nor do ones not newer than one merged already (their reports
// still count). lost: the records were read after the watch lost history;
// any revision of one in between may have been a grant, so its agent
// counts as granted now, whoever wrote it, and reports are not taken
// (they are not the ones written in between).
func (cp *ControlPlane) MergeRecords(ctx context.Context, lost bool, recs ...RecordedAgent) {
	at := cp.now()
	var reports []RecordedAgent
	var prevExpires []time.Time // of each report's agent, before its record
	changed := false
	cp.mu.Lock()
	for _, rec := range recs {
		own := rec.Replica == cp.cfg.replica
		if own && !lost {
			continue
		}
		a := cp.agents[rec.Node]
		if len(rec.Report) > 0 && !lost {
			reports = append(reports, rec)
			prevExpires = append(prevExpires, expires(a))
		}
		if rec.Rev <= cp.recorded[rec.Node] {
			continue
		}
		cp.recorded[rec.Node] = rec.Rev
		if a == nil {
			a = &Agent{Node: rec.Node, Replica: rec.Replica}
			cp.agents[rec.Node] = a
		}
		if !own {
			takeRecord(a, rec.Agent, at, cp.cfg.lease)
			// The record is the agent's latest state, and in etcd already:
			// the leader's flush must not write an older one over it.
			delete(cp.dirty, rec.Node)
		}
		if lost {
			grantedSeen(a, at, cp.cfg.lease)
		}
		changed = true
	}
	if changed {
		close(cp.changed)
		cp.changed = make(chan struct{})
	}
	cp.mu.Unlock()
	for i, rec := range reports {
		req := &batonv1.HeartbeatRequest{}
		if err := proto.Unmarshal(rec.Report, req); err != nil {
			cp.log.Warn("a bad report in an agent record", "agent", rec.Node, "replica", rec.Replica, "err", err)
			continue
		}
		cp.cfg.reports.ObserveReport(req, at)
		cp.shadow.Heartbeat(ctx, at, req, prevExpires[i])
	}
}

// expires is when a's lease ends (a nil: never granted).
func expires(a *Agent) time.Time {
	if a == nil {
		return time.Time{}
	}
	return a.ExpiresAt
}

// takeRecord takes rec, another replica's record of a, as a report seen
// at at.
func takeRecord(a *Agent, rec Agent, at time.Time, lease time.Duration) {
	noteIncarnation(a, rec.Incarnation)
	a.Namespace, a.Workload, a.AckedVersion, a.LastHeartbeat = rec.Namespace, rec.Workload, rec.AckedVersion, at
	a.Refused, a.Replica = rec.Refused, rec.Replica
	// What the agent acked stays known until it reports the topic again:
	// the cutover waits for the destination to hold it (ackedAbove).
	topics := rec.Topics
	for name, old := range a.Topics {
		if _, again := topics[name]; !again && len(old.AckedEnds) > 0 {
			if topics == nil {
				topics = map[string]TopicDrain{}
			}
			topics[name] = TopicDrain{AckedEnds: old.AckedEnds}
		}
	}
	a.Topics = topics
	if !rec.GrantedAt.IsZero() {
		grantedSeen(a, at, lease)
	}
}

// grantedSeen counts a as granted a lease when the leader saw the record
// of it, at (never earlier than a grant counted already).
func grantedSeen(a *Agent, at time.Time, lease time.Duration) {
	a.GrantedAt = maxTime(a.GrantedAt, at)
	a.ExpiresAt = a.GrantedAt.Add(lease)
}

// FollowerConfig is what of New's options a follower (replicas.Follower)
// serves by, with New's defaults: it MUST match the leader's.
type FollowerConfig struct {
	Replica        string
	Lease, Forward time.Duration
	Source, Dest   *batonv1.Cluster
	XDS            *xds.Server // WithXDS's; nil without
	Now            func() time.Time
	Log            *slog.Logger
	// ServerOptions are the gRPC server options NodeIdentity needs,
	// logging refusals to log; none without it.
	ServerOptions func(log *slog.Logger) []grpc.ServerOption
}

// NewFollowerConfig resolves opts, New's options, for a follower.
func NewFollowerConfig(opts ...Opt) FollowerConfig {
	c := newConfig(opts)
	return FollowerConfig{Replica: c.replica, Lease: c.lease, Forward: c.forward, Source: c.source, Dest: c.dest,
		XDS: c.xds, Now: c.now, Log: c.log, ServerOptions: c.serverOptions}
}
