package upstream

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// TestBrokerDownForgetsItsLeaders: after a request to a broker failed,
// the cached leaders of every topic it leads a partition of are dropped
// (the next request asks the cluster who leads now); a topic led wholly
// elsewhere keeps its cache.
func TestBrokerDownForgetsItsLeaders(t *testing.T) {
	t.Parallel()
	kc, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(3, "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u := New(Config{Name: "source", Bootstrap: kc.ListenAddrs(), PoolSize: 1, DialTimeout: 2 * time.Second,
		ReadTimeout: 5 * time.Second})
	defer u.CloseConns(nil)
	if _, err := u.Metadata(ctx, []string{"a", "b"}, false); err != nil {
		t.Fatal(err)
	}
	// Move every partition of b off the broker leading a/0.
	down, ok := u.CachedLeader("a", 0)
	if !ok {
		t.Fatal("no leader of a/0 cached")
	}
	var downID, other int32 = -1, -1
	for id, addr := range u.brokers {
		if addr == down {
			downID = id
		} else if other < 0 {
			other = id
		}
	}
	for p := range int32(3) {
		if err := kc.MoveTopicPartition("b", p, other); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := u.Metadata(ctx, []string{"a", "b"}, false); err != nil {
		t.Fatal(err)
	}
	u.BrokerDown(down)
	if _, ok := u.CachedLeader("a", 0); ok {
		t.Errorf("a/0 still cached on broker %d (%s), which is down", downID, down)
	}
	for p := range int32(3) {
		if _, ok := u.CachedLeader("b", p); !ok {
			t.Errorf("b/%d, led by broker %d, lost its cached leader", p, other)
		}
	}
	// The next lookup asks the cluster.
	if addr, err := u.LeaderAddr(ctx, "a", 0); err != nil || addr == "" {
		t.Fatalf("LeaderAddr after BrokerDown: %q, %v", addr, err)
	}
}
