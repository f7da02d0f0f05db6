package controlplane

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
)

// A COMPLETE route carries the source batches copied before its cutover
// for SourceBatchesKept only: then they leave the stored topic and the
// route, at a new version, so that every agent's routes do not grow with
// each topic ever cut over.
func TestSourceBatchesLeaveTheRoute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	st := NewMemStore()
	batches := []replicator.SourceBatch{{Partition: 0, ProducerID: 7, BaseSeq: 3, Records: 2, Offset: 40}}
	for name, until := range map[string]time.Time{"old": now.Add(-time.Second), "recent": now.Add(time.Minute)} {
		tp := Topic{TopicSpec: TopicSpec{Name: name, State: migration.Complete}, Version: 1,
			SourceBatches: batches, SourceBatchesUntil: until}
		if err := st.PutTopic(ctx, tp, 1); err != nil {
			t.Fatal(err)
		}
	}
	cp, err := New(ctx, WithStore(st), WithReplication(idleReplication{}), Clock(func() time.Time { return now }),
		Logger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	cp.dropSourceBatches(ctx)
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if r := cp.route(cp.topics["old"]); len(r.GetSourceBatches()) != 0 || r.GetVersion() == 1 {
		t.Errorf("old: route at version %d carries %d source batches, want none at a new version", r.GetVersion(), len(r.GetSourceBatches()))
	}
	if stored, _ := st.Topic("old"); len(stored.SourceBatches) != 0 {
		t.Errorf("old: the store still holds %d source batches", len(stored.SourceBatches))
	}
	if r := cp.route(cp.topics["recent"]); len(r.GetSourceBatches()) != 1 || r.GetVersion() != 1 {
		t.Errorf("recent: route at version %d carries %d source batches, want 1 at version 1", r.GetVersion(), len(r.GetSourceBatches()))
	}
}
