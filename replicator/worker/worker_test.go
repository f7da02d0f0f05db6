package worker_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/replicator"
	"github.com/baton-kafka/baton/replicator/worker"
)

// copier is a Copier that records what the worker asked of it.
type copier struct {
	mu      sync.Mutex
	started []string
	stopped []string
}

func (c *copier) Start(topic string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.started = append(c.started, topic)
}
func (c *copier) Forget(string) error { return nil }
func (c *copier) SetMigrating(string, bool) error {
	return nil
}

func (c *copier) Stop(_ context.Context, topic string) (replicator.Stopped, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = append(c.stopped, topic)
	return replicator.Stopped{Partitions: []replicator.PartitionStatus{{Partition: 0, Next: 42}, {Partition: 1, Next: 43}}}, nil
}
func (c *copier) Status() []replicator.TopicStatus { return nil }
func (c *copier) DestinationLatency(string) (replicator.Latency, bool) {
	return replicator.Latency{}, false
}

// TestWorkerLeases runs a worker against a control plane's worker pool
// over gRPC: it may write the partitions leased to it, the cutover's stop
// reaches its copier and the pool gets its answer, and once the control
// plane is gone it stops writing before its lease ends.
func TestWorkerLeases(t *testing.T) {
	t.Parallel()
	c, err := embedded.Start(embedded.Brokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	lease, flight := 900*time.Millisecond, 300*time.Millisecond
	pool, err := replication.NewWorkerPool(kadm.NewClient(cl), lease, flight, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	go pool.Run(ctx)
	if err := pool.Start("t"); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	batonv1.RegisterReplicationServer(g, pool)
	go func() { _ = g.Serve(ln) }()
	defer g.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	w, err := worker.New("w1", batonv1.NewReplicationClient(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	cp := &copier{}
	w.Copier = cp
	wctx, stopWorker := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stopWorker(); <-done }()

	wait.For(t, time.Minute, "both partitions leased (after the new pool's quiet period)", func() string {
		for p := range int32(2) {
			if _, ok := w.MayWrite("t", p); !ok {
				return fmt.Sprintf("partition %d not writable", p)
			}
		}
		return ""
	})
	if _, ok := w.MayWrite("t", 2); ok {
		t.Error("a partition the topic does not have is writable")
	}
	cp.mu.Lock()
	if !slices.Equal(cp.started, []string{"t"}) {
		t.Errorf("copier started %v, want [t]", cp.started)
	}
	cp.mu.Unlock()

	next, _, err := pool.Stop(ctx, "t")
	if err != nil {
		t.Fatalf("Stop through the worker: %v", err)
	}
	if next[0] != 42 || next[1] != 43 {
		t.Errorf("Stop: %v, want the copier's 42 and 43", next)
	}
	cp.mu.Lock()
	if !slices.Equal(cp.stopped, []string{"t"}) {
		t.Errorf("copier stopped %v, want [t]", cp.stopped)
	}
	cp.mu.Unlock()

	// Copied again; then the control plane goes away.
	if err := pool.Start("t"); err != nil {
		t.Fatal(err)
	}
	wait.For(t, time.Minute, "partition 0 leased again", func() string {
		if _, ok := w.MayWrite("t", 0); !ok {
			return "not writable"
		}
		return ""
	})
	g.Stop()
	gone := time.Now()
	wait.For(t, time.Minute, "the worker stops writing", func() string {
		if _, ok := w.MayWrite("t", 0); ok {
			return "still writable"
		}
		return ""
	})
	t.Logf("the worker stopped writing %v after the control plane went away (lease %v, flight %v)",
		time.Since(gone).Round(time.Millisecond), lease, flight)
}
