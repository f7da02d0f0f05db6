package xds

import (
	"context"
	"fmt"
	"io"
	"log/slog"
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

// orderLease grants an hour's lease (renewals twenty minutes apart: only
// a kick, or a retry, heartbeats sooner) and keeps, as the control plane
// does, the last report it received. serve sees each heartbeat first, with
// its number from 1, and may hold it (until release is closed) or fail it.
type orderLease struct {
	batonv1.UnimplementedLeaseServer
	serve   func(n int, req *batonv1.HeartbeatRequest, release <-chan struct{}) error
	release chan struct{}
	arrived chan struct{} // closed when the first heartbeat arrives

	mu         sync.Mutex
	n          int
	inFlight   int
	overlapped bool     // a heartbeat arrived while another was being answered
	received   []uint64 // the acked version of each recorded heartbeat, in order
}

func (l *orderLease) Heartbeat(_ context.Context, req *batonv1.HeartbeatRequest) (*batonv1.HeartbeatResponse, error) {
	l.mu.Lock()
	l.n++
	n := l.n
	l.inFlight++
	l.overlapped = l.overlapped || l.inFlight > 1
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.inFlight--
		l.mu.Unlock()
	}()
	if n == 1 {
		close(l.arrived)
	}
	if err := l.serve(n, req, l.release); err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.received = append(l.received, req.GetAckedVersion())
	l.mu.Unlock()
	return &batonv1.HeartbeatResponse{Granted: true, Lease: durationpb.New(time.Hour)}, nil
}

func (l *orderLease) state() (last uint64, received []uint64, overlapped bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.received) > 0 {
		last = l.received[len(l.received)-1]
	}
	return last, append([]uint64(nil), l.received...), l.overlapped
}

// A change the agent reports with Kick (a version applied, a topic
// drained) reaches the control plane after every report made before it,
// and reaches it even if its heartbeat fails: the control plane keeps the
// last report it received, and nothing else would send the change before
// the next renewal, twenty minutes off here.
func TestLeaseKeeperKickIsNeverLost(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// serve returns the test's orderLease.serve (state of its own
		// per run).
		serve func() func(n int, req *batonv1.HeartbeatRequest, release <-chan struct{}) error
	}{
		{
			// The report of the heartbeat in flight was made before
			// the change: sent alongside it, the kicked one could arrive
			// first and be overwritten by the older one.
			name: "kicked while a heartbeat is in flight",
			serve: func() func(int, *batonv1.HeartbeatRequest, <-chan struct{}) error {
				return func(n int, _ *batonv1.HeartbeatRequest, release <-chan struct{}) error {
					if n == 1 {
						<-release
					}
					return nil
				}
			},
		},
		{
			name: "the kicked heartbeat fails",
			serve: func() func(int, *batonv1.HeartbeatRequest, <-chan struct{}) error {
				var failed atomic.Bool
				return func(_ int, req *batonv1.HeartbeatRequest, _ <-chan struct{}) error {
					if req.GetAckedVersion() == 1 && !failed.Swap(true) {
						return status.Error(codes.Unavailable, "test: lost on its way")
					}
					return nil
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := &orderLease{serve: tc.serve(), release: make(chan struct{}), arrived: make(chan struct{})}
			addr, _, err := serveAt(t, "127.0.0.1:0", func(g *grpc.Server) { batonv1.RegisterLeaseServer(g, srv) })
			if err != nil {
				t.Fatal(err)
			}
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var version atomic.Uint64
			k, err := NewLeaseKeeper(conn, NodeMeta("n", "ns", "app"),
				func() (uint64, []*batonv1.TopicDrain) { return version.Load(), nil },
				ClientLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), Backoff(10*time.Millisecond, 100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = k.Run(ctx) }()
			defer func() { cancel(); <-done }()

			<-srv.arrived // Run's first heartbeat, its report made at version 0
			version.Store(1)
			k.Kick()
			close(srv.release)
			wait.For(t, 10*time.Second, "the control plane's last report at version 1", func() string {
				if last, received, _ := srv.state(); last != 1 {
					return fmt.Sprintf("received versions %v", received)
				}
				return ""
			})
			if _, received, overlapped := srv.state(); overlapped {
				t.Fatalf("two heartbeats in flight at once (received versions %v): their reports may arrive in either order", received)
			}
		})
	}
}
