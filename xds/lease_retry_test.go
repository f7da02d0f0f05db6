package xds

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
)

// failingLease answers every heartbeat with an error, over a connection
// that stays READY: a control plane that cannot store a new agent
// (Unavailable), or one that refuses the agent's certificate
// (PermissionDenied).
type failingLease struct {
	batonv1.UnimplementedLeaseServer
	code  codes.Code
	calls atomic.Int64
}

func (f *failingLease) Heartbeat(context.Context, *batonv1.HeartbeatRequest) (*batonv1.HeartbeatResponse, error) {
	f.calls.Add(1)
	return nil, status.Error(f.code, "refused")
}

// A heartbeat that fails while the connection stays ready is retried
// after the keeper's backoff, not at once: waking "as soon as the
// connection is ready" must not turn an answered error into a busy loop
// against the control plane.
func TestLeaseKeeperBacksOffOnErrorsOverAReadyConnection(t *testing.T) {
	t.Parallel()
	for _, code := range []codes.Code{codes.Unavailable, codes.PermissionDenied, codes.Internal} {
		t.Run(code.String(), func(t *testing.T) {
			t.Parallel()
			srv := &failingLease{code: code}
			addr, _, err := serveAt(t, "127.0.0.1:0", func(g *grpc.Server) { batonv1.RegisterLeaseServer(g, srv) })
			if err != nil {
				t.Fatal(err)
			}
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			const backoff = 100 * time.Millisecond
			k, err := NewLeaseKeeper(conn, NodeMeta("n", "ns", "app"), func() (uint64, []*batonv1.TopicDrain) { return 0, nil },
				ClientLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), Backoff(backoff, time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = k.Run(ctx) }()
			const run = time.Second
			time.Sleep(run)
			cancel()
			<-done
			// Retries come every min(lease/3, 4 x backoff) = 400 ms: a
			// handful in a second. Allow plenty of slack.
			if n := srv.calls.Load(); n > 20 {
				t.Errorf("%d heartbeats in %v against a control plane answering %v, want a few (one per %v)",
					n, run, code, 4*backoff)
			}
		})
	}
}

// countingLease grants every heartbeat a 9 s lease and counts them.
type countingLease struct {
	batonv1.UnimplementedLeaseServer
	calls atomic.Int64
	lease time.Duration // granted; 9 s when zero
}

func (c *countingLease) Heartbeat(context.Context, *batonv1.HeartbeatRequest) (*batonv1.HeartbeatResponse, error) {
	c.calls.Add(1)
	lease := c.lease
	if lease == 0 {
		lease = 9 * time.Second
	}
	return &batonv1.HeartbeatResponse{Granted: true, Lease: durationpb.New(lease)}, nil
}

// After a heartbeat failed because the connection broke, the keeper
// heartbeats as soon as the connection is ready again, not at its next
// retry (10 s away: a third of the lease; 50 times what it takes).
func TestLeaseKeeperHeartbeatsWhenReadyAgain(t *testing.T) {
	t.Parallel()
	addr, g, err := serveAt(t, "127.0.0.1:0", func(g *grpc.Server) {
		batonv1.RegisterLeaseServer(g, &countingLease{lease: 30 * time.Second})
	})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: ReconnectBackoff}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	logs := &records{}
	k, err := NewLeaseKeeper(conn, NodeMeta("n", "ns", "app"), func() (uint64, []*batonv1.TopicDrain) { return 0, nil },
		ClientLogger(slog.New(logs)), Backoff(10*time.Second, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = k.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for !k.Valid() {
		time.Sleep(10 * time.Millisecond)
	}
	g.Stop()
	for failed, _, _ := logs.count(); failed == 0; failed, _, _ = logs.count() {
		time.Sleep(10 * time.Millisecond)
	}
	back := time.Now()
	srv := &countingLease{lease: 30 * time.Second}
	if _, _, err := serveAt(t, addr, func(g *grpc.Server) { batonv1.RegisterLeaseServer(g, srv) }); err != nil {
		t.Fatalf("cannot listen on %s again: %v", addr, err)
	}
	for srv.calls.Load() == 0 {
		if time.Since(back) > 5*time.Second {
			t.Fatalf("no heartbeat %v after the control plane was back: the keeper waits for its retry", time.Since(back))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("heartbeat %v after the control plane was back", time.Since(back).Round(time.Millisecond))
}
