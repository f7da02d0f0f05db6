package controlplane

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/migration"
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
	return nil, ErrNotReady
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
