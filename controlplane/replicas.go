package controlplane

import (
	"context"
	"encoding/json"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
)

// The leader's side of followers (follower.go, docs/design.md §13.1):
// what followers record of the agents they answer is merged into the
// leader's view, as if the agent had reported to the leader when the
// leader saw the record. That time is never before the grant (a follower
// answers only once its record committed), so the silent-safe rule
// (granted_at + lease + F) stays safe without trusting a follower's clock.
//
// A cutover reads every record after storing MIGRATING (syncRecorded):
// grants after it were made at the new version, so the grants that may
// have let an agent forward the topic are all known then. Records are
// watched besides, for drain reports and renewals as they come.

// replicaStore is the leader's store when replicas share it: set in New
// when the store is etcd and the control plane has a replica id.
func (cp *ControlPlane) replicaStore() *EtcdStore {
	es, ok := cp.store.(*EtcdStore)
	if !ok || cp.cfg.replica == "" {
		return nil
	}
	return es
}

// mergeRecordedLocked takes a follower's record of an agent into the
// leader's view, at time at. Records this replica made, or older than one
// merged already, change nothing. cp.mu is held; it reports whether the
// record was taken.
func (cp *ControlPlane) mergeRecordedLocked(rec recordedAgent, at time.Time) bool {
	if rec.Replica == cp.cfg.replica || rec.rev <= cp.recorded[rec.Node] {
		return false
	}
	cp.recorded[rec.Node] = rec.rev
	a, ok := cp.agents[rec.Node]
	if !ok {
		a = &Agent{Node: rec.Node}
		cp.agents[rec.Node] = a
	}
	a.Namespace, a.Workload, a.AckedVersion, a.LastHeartbeat = rec.Namespace, rec.Workload, rec.AckedVersion, at
	a.Topics, a.Refused, a.Replica = rec.Topics, rec.Refused, rec.Replica
	if !rec.GrantedAt.IsZero() {
		a.GrantedAt = maxTime(a.GrantedAt, at)
		a.ExpiresAt = a.GrantedAt.Add(cp.cfg.lease)
	}
	close(cp.changed)
	cp.changed = make(chan struct{})
	return true
}

// syncRecorded reads every agent record and merges the followers' (a
// cutover's drain starts with it).
func (cp *ControlPlane) syncRecorded(ctx context.Context) error {
	es := cp.replicaStore()
	if es == nil {
		return nil
	}
	recs, _, err := es.readAgents(ctx)
	if err != nil {
		return err
	}
	at := cp.now()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, r := range recs {
		cp.mergeRecordedLocked(r, at)
	}
	return nil
}

// watchRecorded merges followers' records as they are written, and hands
// the writes and findings they carry to bypass detection, until the
// control plane closes. A watch that fails is started again after a read
// of every record (reports written in between are not seen).
func (cp *ControlPlane) watchRecorded(es *EtcdStore, rev int64) {
	ctx := cp.ctx
	for ctx.Err() == nil {
		for resp := range es.watchAgents(ctx, rev) {
			if resp.Err() != nil {
				break
			}
			for _, e := range resp.Events {
				if e.Kv == nil || e.Type != mvccpb.PUT {
					continue
				}
				var rec recordedAgent
				if err := json.Unmarshal(e.Kv.Value, &rec.Agent); err != nil {
					cp.log.Warn("a bad agent record in etcd", "key", string(e.Kv.Key), "err", err)
					continue
				}
				rec.rev = e.Kv.ModRevision
				cp.takeRecorded(ctx, rec)
			}
			rev = resp.Header.Revision
		}
		if ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		recs, r, err := es.readAgents(ctx)
		if err != nil {
			cp.log.Warn("reading the agents other replicas recorded", "err", err)
			continue
		}
		at := cp.now()
		cp.mu.Lock()
		for _, rec := range recs {
			cp.mergeRecordedLocked(rec, at)
		}
		cp.mu.Unlock()
		rev = r
	}
}

// takeRecorded merges one watched record and passes on its report.
func (cp *ControlPlane) takeRecorded(ctx context.Context, rec recordedAgent) {
	at := cp.now()
	cp.mu.Lock()
	if rec.Replica == cp.cfg.replica {
		cp.mu.Unlock()
		return
	}
	var prevExpires time.Time
	if a := cp.agents[rec.Node]; a != nil {
		prevExpires = a.ExpiresAt
	}
	// A record read by syncRecorded already is merged, but its report is
	// seen only here.
	cp.mergeRecordedLocked(rec, at)
	cp.mu.Unlock()
	if len(rec.Report) == 0 {
		return
	}
	req := &batonv1.HeartbeatRequest{}
	if err := proto.Unmarshal(rec.Report, req); err != nil {
		cp.log.Warn("a bad report in an agent record", "agent", rec.Node, "replica", rec.Replica, "err", err)
		return
	}
	cp.noteWrites(at, req, prevExpires)
	if fs := req.GetFindings(); len(fs) > 0 {
		cp.noteFindings(ctx, rec.Node, fs, at)
	}
}
