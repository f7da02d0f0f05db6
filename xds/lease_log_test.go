package xds

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/internal/wait"
)

// grantingLease is a Lease service that grants every heartbeat.
type grantingLease struct {
	batonv1.UnimplementedLeaseServer
}

func (grantingLease) Heartbeat(context.Context, *batonv1.HeartbeatRequest) (*batonv1.HeartbeatResponse, error) {
	return &batonv1.HeartbeatResponse{Granted: true, Lease: durationpb.New(600 * time.Millisecond)}, nil
}

// records keeps every log record's level and message, and whether it
// carried an error.
type records struct {
	mu  sync.Mutex
	got []record
}

type record struct {
	level  slog.Level
	msg    string
	hasErr bool
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	e := record{level: rec.Level, msg: rec.Message}
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			e.hasErr = true
		}
		return true
	})
	r.mu.Lock()
	r.got = append(r.got, e)
	r.mu.Unlock()
	return nil
}

// count returns how many records failed heartbeats left, how many of those
// and the others were at WARN or above, and how many at INFO.
func (r *records) count() (failed, warn, info int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.got {
		if e.hasErr {
			failed++
		}
		switch {
		case e.level >= slog.LevelWarn:
			warn++
		case e.level == slog.LevelInfo:
			info++
		}
	}
	return failed, warn, info
}

// A control-plane outage is one WARN, its end one INFO; the attempts in
// between are DEBUG only.
func TestLeaseKeeperLogsOutageOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr, g, err := serveAt(t, "127.0.0.1:0", func(g *grpc.Server) { batonv1.RegisterLeaseServer(g, grantingLease{}) })
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	logs := &records{}
	k, err := NewLeaseKeeper(conn, NodeMeta("n", "ns", "app"), func() (uint64, []*batonv1.TopicDrain) { return 0, nil },
		ClientLogger(slog.New(logs)), Backoff(10*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = k.Run(ctx) }()
	defer func() { cancel(); <-done }()
	wait.For(t, 10*time.Second, "a first lease", func() string {
		if !k.Valid() {
			return "no lease yet"
		}
		return ""
	})

	g.Stop()
	wait.For(t, 10*time.Second, "failed heartbeats", func() string {
		if failed, _, _ := logs.count(); failed < 5 {
			return "fewer than 5 failed heartbeats logged"
		}
		return ""
	})
	if _, warn, _ := logs.count(); warn != 1 {
		logs.mu.Lock()
		t.Errorf("%d records at WARN or above during one outage, want 1: %+v", warn, logs.got)
		logs.mu.Unlock()
	}

	if _, _, err := serveAt(t, addr, func(g *grpc.Server) { batonv1.RegisterLeaseServer(g, grantingLease{}) }); err != nil {
		t.Skipf("cannot listen on %s again to end the outage: %v", addr, err)
	}
	wait.For(t, 10*time.Second, "the return logged", func() string {
		if _, _, info := logs.count(); info < 1 {
			return "no INFO record of the control plane's return"
		}
		return ""
	})
	failed, warn, info := logs.count()
	if warn != 1 || info != 1 {
		t.Errorf("after the outage: %d WARN, %d INFO records (want 1 and 1); %d failed heartbeats", warn, info, failed)
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	for _, e := range logs.got {
		if e.level >= slog.LevelWarn && e.msg == "heartbeat failed" {
			t.Errorf("a single failed heartbeat logged at %v", e.level)
		}
	}
}

// An xDS stream lost for a while is one WARN, its return one INFO; the
// reconnect attempts in between are DEBUG only.
func TestClientLogsStreamOutageOnce(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s := NewServer()
			addr, g, err := serveAt(t, "127.0.0.1:0", func(g *grpc.Server) { s.Register(g) })
			if err != nil {
				t.Fatal(err)
			}
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			s.Update(res(1, batonv1.State_STATE_PROXY, nil))
			logs := &records{}
			c, err := NewClient(conn, NodeMeta("r", "ns", "app"), Backoff(10*time.Millisecond, 50*time.Millisecond), UseProtocol(p),
				ClientLogger(slog.New(logs)), OnRoutes(func(uint64, []*batonv1.TopicRoute) error { return nil }))
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { defer close(done); _ = c.Run(ctx) }()
			defer func() { cancel(); <-done }()
			if err := c.WaitVersion(ctx, 1); err != nil {
				t.Fatal(err)
			}

			g.Stop()
			wait.For(t, 10*time.Second, "reconnect attempts", func() string {
				if failed, _, _ := logs.count(); failed < 5 {
					return "fewer than 5 failed attempts logged"
				}
				return ""
			})
			if _, warn, _ := logs.count(); warn != 1 {
				logs.mu.Lock()
				t.Errorf("%d records at WARN or above during one outage, want 1: %+v", warn, logs.got)
				logs.mu.Unlock()
			}

			if _, _, err := serveAt(t, addr, func(g *grpc.Server) { s.Register(g) }); err != nil {
				t.Skipf("cannot listen on %s again to end the outage: %v", addr, err)
			}
			s.Update(res(2, batonv1.State_STATE_COMPLETE, nil))
			if err := c.WaitVersion(ctx, 2); err != nil {
				t.Fatal(err)
			}
			wait.For(t, 10*time.Second, "the return logged", func() string {
				logs.mu.Lock()
				defer logs.mu.Unlock()
				for _, r := range logs.got {
					if r.level == slog.LevelInfo && r.msg == "xds stream back" {
						return ""
					}
				}
				return "no INFO record of the stream's return"
			})
			if _, warn, _ := logs.count(); warn != 1 {
				t.Errorf("%d records at WARN or above after the outage ended, want still 1", warn)
			}
		})
	}
}
