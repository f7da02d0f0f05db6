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
// Every revision of every record is taken, in order, from one watch: a
// later record of an agent (a refusal, the leader's own flush) may
// overwrite a grant in etcd before the leader saw it, so reading the
// latest values is not enough. A cutover, once MIGRATING is stored, waits
// until the watch has delivered every revision up to then (syncRecorded):
// grants after it were made at the new version, so the grants that may
// have let an agent forward the topic are all known then. Where the watch
// lost history (a compaction, a broken stream), every agent whose record
// changed meanwhile counts as granted when it is read again.

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
// leader's view, at time at. Records this replica made, or not newer than
// one merged already, change nothing. cp.mu is held.
func (cp *ControlPlane) mergeRecordedLocked(rec recordedAgent, at time.Time) {
	if rec.Replica == cp.cfg.replica || rec.rev <= cp.recorded[rec.Node] {
		return
	}
	cp.recorded[rec.Node] = rec.rev
	a, ok := cp.agents[rec.Node]
	if !ok {
		a = &Agent{Node: rec.Node}
		cp.agents[rec.Node] = a
	}
	a.noteIncarnation(rec.Incarnation)
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
		a.GrantedAt = maxTime(a.GrantedAt, at)
		a.ExpiresAt = a.GrantedAt.Add(cp.cfg.lease)
	}
	// The record is the agent's latest state, and in etcd already: the
	// leader's flush must not write an older one over it.
	delete(cp.dirty, rec.Node)
	close(cp.changed)
	cp.changed = make(chan struct{})
}

// mergeLostLocked takes a record read after the watch lost history: any
// revision of it in between may have been a grant, so the agent counts as
// granted at at, whoever wrote the record. cp.mu is held.
func (cp *ControlPlane) mergeLostLocked(rec recordedAgent, at time.Time) {
	if rec.rev <= cp.recorded[rec.Node] {
		return
	}
	cp.mergeRecordedLocked(rec, at)
	cp.recorded[rec.Node] = rec.rev
	a, ok := cp.agents[rec.Node]
	if !ok {
		a = &Agent{Node: rec.Node, Replica: rec.Replica}
		cp.agents[rec.Node] = a
	}
	a.GrantedAt = maxTime(a.GrantedAt, at)
	a.ExpiresAt = a.GrantedAt.Add(cp.cfg.lease)
}

// watchedLocked notes that the watch delivered every revision up to rev.
// cp.mu is held.
func (cp *ControlPlane) watchedLocked(rev int64) {
	if rev <= cp.watchedRev {
		return
	}
	cp.watchedRev = rev
	close(cp.changed)
	cp.changed = make(chan struct{})
}

// syncRecorded waits until the watch of the records has delivered every
// revision etcd holds now (a cutover's drain starts with it, right after
// MIGRATING is stored).
func (cp *ControlPlane) syncRecorded(ctx context.Context) error {
	es := cp.replicaStore()
	if es == nil {
		return nil
	}
	now, err := es.revision(ctx)
	if err != nil {
		return err
	}
	for {
		cp.mu.Lock()
		seen, ch := cp.watchedRev, cp.changed
		cp.mu.Unlock()
		if seen >= now {
			return nil
		}
		cp.syncWaits.Add(1)
		// An idle watch says how far it got only when asked.
		if err := es.requestRecordsProgress(ctx); err != nil {
			return err
		}
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond): // ask again: a watch being set up again misses a request
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// watchRecorded merges followers' records as they are written, and hands
// the writes and findings they carry to bypass detection, until the
// control plane closes. A watch that fails is started again after a read
// of every record (mergeLostLocked; the reports written in between are
// not seen).
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
			// Delivered up to: the last event's revision (a response of a
			// watch catching up is one batch of several, its header the
			// store's revision), or a progress notification's header.
			switch {
			case len(resp.Events) > 0:
				rev = max(rev, resp.Events[len(resp.Events)-1].Kv.ModRevision)
			case resp.IsProgressNotify():
				rev = max(rev, resp.Header.Revision)
			}
			cp.mu.Lock()
			cp.watchedLocked(rev)
			cp.mu.Unlock()
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
		cp.log.Warn("the watch of agent records failed: every agent whose record changed meanwhile counts as granted a lease now")
		at := cp.now()
		cp.mu.Lock()
		for _, rec := range recs {
			cp.mergeLostLocked(rec, at)
		}
		cp.watchedLocked(r)
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
	cp.cfg.reports.ObserveReport(req, at)
	cp.shadow.Heartbeat(ctx, at, req, prevExpires)
}
