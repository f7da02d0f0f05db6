package agent_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/baton-kafka/baton/agent"
	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/xds"
)

// getReadyz returns /readyz's status code and body.
func getReadyz(t *testing.T, admin string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// readyzIs waits until /readyz answers code with body.
func readyzIs(t *testing.T, admin string, code int, body string) {
	t.Helper()
	wait.For(t, 20*time.Second, fmt.Sprintf("/readyz %d %q", code, body), func() string {
		if c, b := getReadyz(t, admin); c != code || b != body {
			return fmt.Sprintf("/readyz %d %q", c, b)
		}
		return ""
	})
}

// TestReadyzStaticRoutes: without a control plane /readyz says what
// /healthz says: 503 until the agent reached the source, then 200.
func TestReadyzStaticRoutes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		sourceUp   bool
		code       int
		body       string
		healthCode int
	}{
		{"source reached", true, http.StatusOK, "ok", http.StatusOK},
		{"source never reached", false, http.StatusServiceUnavailable, "waiting for the source cluster", http.StatusServiceUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var admin string
			if tc.sourceUp {
				f := startFixture(t, nil, agent.Admin("127.0.0.1:0"))
				admin = f.agent.AdminAddr()
			} else {
				dst, err := embedded.Start(embedded.Brokers(1))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(dst.Close)
				src := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
				a, err := agent.New(agent.Listen("127.0.0.1:0"), agent.Admin("127.0.0.1:0"),
					agent.Source(src), agent.Destination(dst.Addrs()...),
					agent.Logger(slog.New(slog.DiscardHandler)))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- a.Run(ctx) }()
				t.Cleanup(func() { cancel(); <-done })
				admin = a.AdminAddr()
			}
			readyzIs(t, admin, tc.code, tc.body)
			resp, err := http.Get("http://" + admin + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.healthCode {
				t.Errorf("/healthz %d, want %d", resp.StatusCode, tc.healthCode)
			}
		})
	}
}

// TestReadyzControlPlane: with a control plane, /readyz answers 503 with
// the reason until the agent applied its first routes and holds a lease,
// then 200; a lease that runs out makes it 503 again, and a renewed one
// 200. A control plane that grants leases but never sends routes (it
// serves no xDS) keeps the agent at "waiting for the first routes": the
// xDS server of the other control plane may answer a new stream at once
// with its (empty) routes, so that state is not asserted there.
func TestReadyzControlPlane(t *testing.T) {
	t.Parallel()
	t.Run("no routes ever", func(t *testing.T) {
		t.Parallel()
		cp := &testControlPlane{lease: 900 * time.Millisecond, forward: 300 * time.Millisecond}
		cp.grant.Store(true)
		g := grpc.NewServer()
		batonv1.RegisterLeaseServer(g, cp) // leases, and no xDS
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = g.Serve(ln) }()
		t.Cleanup(g.Stop)
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		f := startFixture(t, nil, agent.Admin("127.0.0.1:0"), agent.ControlPlane(conn, xds.NodeMeta("pod-unrouted", "ns", "wl")))
		readyzIs(t, f.agent.AdminAddr(), http.StatusServiceUnavailable, "waiting for the first routes from the control plane")
	})
	t.Run("routes then leases", func(t *testing.T) {
		t.Parallel()
		readyzRoutesThenLeases(t)
	})
}

func readyzRoutesThenLeases(t *testing.T) {
	cp := startTestControlPlane(t, 900*time.Millisecond, 300*time.Millisecond)
	conn, err := grpc.NewClient(cp.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	f := startFixture(t, nil, agent.Admin("127.0.0.1:0"), agent.ControlPlane(conn, xds.NodeMeta("pod-ready", "ns", "wl")))
	admin := f.agent.AdminAddr()
	if code, _ := getReadyz(t, admin); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before any lease: %d, want 503", code)
	}
	cp.publish(t, 1, "orders", batonv1.State_STATE_PROXY)
	readyzIs(t, admin, http.StatusServiceUnavailable, "no lease from the control plane")
	cp.grant.Store(true)
	readyzIs(t, admin, http.StatusOK, "ok")
	cp.grant.Store(false)
	readyzIs(t, admin, http.StatusServiceUnavailable, "no lease from the control plane")
	cp.grant.Store(true)
	readyzIs(t, admin, http.StatusOK, "ok")
}
