package replicas

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/baton-kafka/baton/controlplane"
)

// Records is the leader's watch of the agent records followers write
// (controlplane.Records; the rules are in controlplane's replicas.go):
// it hands every revision of every record, in order, to the control
// plane's MergeRecords, and tells a cutover's drain when it has handed
// over everything etcd held when the drain started (Sync). One control
// plane uses it, from New to Close.
type Records struct {
	store *controlplane.EtcdStore
	log   *slog.Logger

	mu sync.Mutex
	// watched: the watch delivered every revision up to it; changed is
	// closed when it grows.
	watched int64
	changed chan struct{}
	// syncWaits counts Sync's waits for the watch (tests).
	syncWaits atomic.Int64
}

var _ controlplane.Records = (*Records)(nil)

// NewRecords watches the records in store, logging to log.
func NewRecords(store *controlplane.EtcdStore, log *slog.Logger) *Records {
	return &Records{store: store, log: log.With("component", "controlplane"), changed: make(chan struct{})}
}

// Sync waits until the watch of the records has delivered every revision
// etcd holds now (a cutover's drain starts with it, right after MIGRATING
// is stored).
func (r *Records) Sync(ctx context.Context) error {
	now, err := r.store.Revision(ctx)
	if err != nil {
		return err
	}
	for {
		r.mu.Lock()
		seen, ch := r.watched, r.changed
		r.mu.Unlock()
		if seen >= now {
			return nil
		}
		r.syncWaits.Add(1)
		// An idle watch says how far it got only when asked.
		if err := r.store.RequestRecordsProgress(ctx); err != nil {
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

// setWatched notes that the watch delivered every revision up to rev.
func (r *Records) setWatched(rev int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rev <= r.watched {
		return
	}
	r.watched = rev
	close(r.changed)
	r.changed = make(chan struct{})
}

// Watch merges followers' records into cp as they are written after rev
// (the revision New read them at) until ctx ends. A watch that fails is
// started again after a read of every record (merged as lost; the reports
// written in between are not seen).
func (r *Records) Watch(ctx context.Context, cp *controlplane.ControlPlane, rev int64) {
	r.setWatched(rev)
	for ctx.Err() == nil {
		rev = r.watch(ctx, cp, rev)
		if ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		recs, read, err := r.store.ReadAgents(ctx)
		if err != nil {
			r.log.Warn("reading the agents other replicas recorded", "err", err)
			continue
		}
		r.log.Warn("the watch of agent records failed: every agent whose record changed meanwhile counts as granted a lease now")
		cp.MergeRecords(ctx, true, recs...)
		r.setWatched(read)
		rev = read
	}
}

// watch merges the records written after rev until the watch fails or
// ctx ends, and returns the revision it delivered every record up to.
func (r *Records) watch(ctx context.Context, cp *controlplane.ControlPlane, rev int64) int64 {
	for resp := range r.store.WatchAgents(ctx, rev) {
		if resp.Err() != nil {
			break
		}
		for _, e := range resp.Events {
			if e.Kv == nil || e.Type != mvccpb.PUT {
				continue
			}
			rec := controlplane.RecordedAgent{Rev: e.Kv.ModRevision}
			if err := json.Unmarshal(e.Kv.Value, &rec.Agent); err != nil {
				r.log.Warn("a bad agent record in etcd", "key", string(e.Kv.Key), "err", err)
				continue
			}
			takeRecorded(ctx, cp, rec)
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
		r.setWatched(rev)
	}
	return rev
}

// takeRecorded merges one watched record (a frame of its own: tests hold
// the watch here).
func takeRecorded(ctx context.Context, cp *controlplane.ControlPlane, rec controlplane.RecordedAgent) {
	cp.MergeRecords(ctx, false, rec)
}
