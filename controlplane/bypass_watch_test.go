package controlplane

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
)

// sourceEndsFail counts SourceEndOffsets calls and fails them all.
type sourceEndsFail struct {
	idleReplication
	mu    sync.Mutex
	calls map[string]*atomic.Int32
}

func (r *sourceEndsFail) SourceEndOffsets(_ context.Context, topic string) (map[int32]int64, error) {
	r.mu.Lock()
	c := r.calls[topic]
	if c == nil {
		c = &atomic.Int32{}
		r.calls[topic] = c
	}
	r.mu.Unlock()
	c.Add(1)
	return nil, replication.ErrNotReady
}

func (r *sourceEndsFail) count(topic string) int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.calls[topic]; c != nil {
		return c.Load()
	}
	return 0
}

// TestProxyWatchStopsWhenTopicLeavesProxy: a bypass watch whose start
// (the source's end offsets) cannot be read yet retries every second. Once
// the topic leaves PROXY the watch is dropped, and its goroutine must stop
// with it, not retry until the control plane closes (one more for every
// time the topic comes back to PROXY).
func TestProxyWatchStopsWhenTopicLeavesProxy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	repl := &sourceEndsFail{calls: map[string]*atomic.Int32{}}
	cp, err := New(ctx, WithStore(NewMemStore()), WithReplication(repl), Logger(quiet),
		Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	if _, err := cp.AddTopic(ctx, TopicSpec{Name: "t", State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for repl.count("t") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no watch started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := cp.SetState(ctx, "t", migration.Reject, "test"); err != nil {
		t.Fatal(err)
	}
	// The loop drops the watch at its next tick (250 ms at most).
	time.Sleep(500 * time.Millisecond)
	before := repl.count("t")
	time.Sleep(2500 * time.Millisecond)
	if after := repl.count("t"); after != before {
		t.Fatalf("t left PROXY, yet its watch read the source's end offsets %d more times: its goroutine still runs", after-before)
	}
}

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
// added again at once, sooner than the bypass loop's next tick. What was
// written to its source while it was not managed (offsets 30 to 40, by a
// producer no agent knows) is from before the new PROXY span: the watch
// must start over from the source's ends then, not judge those records a
// forgotten producer's and refuse the cutover.
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
	watchReadyAt := func(start int64) bool {
		cp.syncProxyWatches(cp.proxySpansNow())
		cp.byp.mu.Lock()
		defer cp.byp.mu.Unlock()
		w := cp.byp.proxy["t"]
		return w != nil && w.ready && w.parts[0] != nil && w.parts[0].start == start
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting until %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("the watch of t starts at offset 30", func() bool { return watchReadyAt(30) })
	if _, err := cp.SetState(ctx, "t", migration.Unmanaged, "test"); err != nil {
		t.Fatal(err)
	}
	repl.set(map[int32]int64{0: 40})
	if _, err := cp.AddTopic(ctx, TopicSpec{Name: "t", State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	waitFor("the watch of t starts over at offset 40", func() bool { return watchReadyAt(40) })
	now := time.Now()
	cp.noteSourceRead(replicator.SourceRead{Topic: "t", Partition: 0, BaseOffset: 30, End: 40, ProducerID: 7,
		Seen: now, At: now})
	cp.judge(now.Add(cp.bypassGrace() + time.Hour))
	if at, what, ok := cp.LastBypass("t"); ok {
		t.Fatalf("records written while t was not managed were judged a forgotten producer's (%s, at %v)", what, at)
	}
}
