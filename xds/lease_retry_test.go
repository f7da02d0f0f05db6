package xds

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/internal/wait"
)

// failingLease answers every heartbeat with an error, over a connection
// that stays READY: a control plane that cannot store a new agent
// (Unavailable), or one that refuses the agent's certificate
// (PermissionDenied).
type failingLease struct {
	batonv1.UnimplementedLeaseServer
	code codes.Code

	mu    sync.Mutex
	calls []time.Time
}

func (f *failingLease) Heartbeat(context.Context, *batonv1.HeartbeatRequest) (*batonv1.HeartbeatResponse, error) {
	f.mu.Lock()
	f.calls = append(f.calls, time.Now())
	f.mu.Unlock()
	return nil, status.Error(f.code, "refused")
}

func (f *failingLease) called() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
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
			defer func() { cancel(); <-done }()
			wait.For(t, time.Minute, "three heartbeats", func() string {
				if n := len(srv.called()); n < 3 {
					return fmt.Sprintf("%d", n)
				}
				return ""
			})
			// Retries come every min(lease/3, 4 x backoff) = 400 ms: two
			// of them take at least one. A busy loop takes microseconds.
			calls := srv.called()
			if took := calls[2].Sub(calls[0]); took < 4*backoff {
				t.Errorf("3 heartbeats in %v against a control plane answering %v, want one per %v", took, code, 4*backoff)
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
	wait.For(t, time.Minute, "a lease", func() string {
		if !k.Valid() {
			return "none"
		}
		return ""
	})
	g.Stop()
	wait.For(t, time.Minute, "a failed heartbeat logged", func() string {
		if failed, _, _ := logs.count(); failed == 0 {
			return "none"
		}
		return ""
	})
	back := time.Now()
	srv := &countingLease{lease: 30 * time.Second}
	if _, _, err := serveAt(t, addr, func(g *grpc.Server) { batonv1.RegisterLeaseServer(g, srv) }); err != nil {
		t.Fatalf("cannot listen on %s again: %v", addr, err)
	}
	wait.For(t, 5*time.Second, "a heartbeat before the keeper's retry (10 s)", func() string {
		if srv.calls.Load() == 0 {
			return "none since the control plane was back"
		}
		return ""
	})
	t.Logf("heartbeat %v after the control plane was back", time.Since(back).Round(time.Millisecond))
}
