package controlplane

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
)

// sourceEnds answers SourceEndOffsets with the ends it is set to.
type sourceEnds struct {
	idleReplication
	mu   sync.Mutex
	ends map[int32]int64
}

func (r *sourceEnds) set(ends map[int32]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ends = ends
}

func (r *sourceEnds) SourceEndOffsets(context.Context, string) (map[int32]int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.ends), nil
}

// TestProxyWatchStartsOverWhenTopicComesBack: a topic leaves PROXY and is
// added again at once, likely sooner than the bypass loop's next tick.
// What was written to its source while it was not managed (offsets 30 to
// 40, by a producer no agent knows) is from before the new PROXY span:
// every state change tells the shadow job (publishLocked), so the watch
// starts over from the source's ends then, and does not judge those
// records a forgotten producer's. The job's own test
// (shadow.TestProxyWatchStartsOverWhenTopicComesBack) drives the spans by
// hand; this one, through the control plane's state changes.
func TestProxyWatchStartsOverWhenTopicComesBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	repl := &sourceEnds{ends: map[int32]int64{0: 30}}
	cp, err := New(ctx, WithStore(NewMemStore()), WithReplication(repl), Logger(quiet),
		Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	if _, err := cp.AddTopic(ctx, TopicSpec{Name: "t", State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	watchedFrom := func(start int64) func() string {
		return func() string {
			if st := cp.Shadow().WatchState("t"); !st.Watching || st.Judged[0] != start {
				return "not yet"
			}
			return ""
		}
	}
	wait.For(t, 30*time.Second, "the watch of t starts at offset 30", watchedFrom(30))
	if _, err := cp.SetState(ctx, "t", migration.Unmanaged, "test"); err != nil {
		t.Fatal(err)
	}
	repl.set(map[int32]int64{0: 40})
	if _, err := cp.AddTopic(ctx, TopicSpec{Name: "t", State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the watch of t starts over at offset 40", watchedFrom(40))
	now := time.Now()
	cp.Shadow().NoteSourceRead(replicator.SourceRead{Topic: "t", Partition: 0, BaseOffset: 30, End: 40, ProducerID: 7,
		Seen: now, At: now})
	wait.For(t, 30*time.Second, "nothing of t left to judge", func() string {
		if st := cp.Shadow().WatchState("t"); st.Pending > 0 {
			return "batches pending"
		}
		return ""
	})
	if at, what, ok := cp.Shadow().LastBypass("t"); ok {
		t.Fatalf("records written while t was not managed were judged a forgotten producer's (%s, at %v)", what, at)
	}
}
