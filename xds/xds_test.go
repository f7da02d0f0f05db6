package xds

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
)

// serve starts an ADS server on loopback and returns a dialed conn.
func serve(t *testing.T, s *Server) (*grpc.ClientConn, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.Register(g)
	go func() { _ = g.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(); g.Stop() })
	return conn, g.Stop
}

type seen struct {
	mu     sync.Mutex
	routes map[string]*batonv1.TopicRoute
}

func (s *seen) get(topic string) *batonv1.TopicRoute {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.routes[topic]
}

// protocols are the variants every client test runs with.
var protocols = []Protocol{Delta, SotW}

// serveAt serves gRPC on addr ("127.0.0.1:0": any port) with register's
// services, until the test ends or the caller stops it. It returns the
// address served; an error when addr cannot be listened on (a port reused
// to bring a server back may be taken meanwhile).
func serveAt(t *testing.T, addr string, register func(*grpc.Server)) (string, *grpc.Server, error) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	g := grpc.NewServer()
	register(g)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	return ln.Addr().String(), g, nil
}

func startClient(t *testing.T, ctx context.Context, conn *grpc.ClientConn, p Protocol, id, ns string, refuse func(uint64) error) (*Client, *seen) {
	t.Helper()
	sn := &seen{routes: map[string]*batonv1.TopicRoute{}}
	c, err := NewClient(conn, NodeMeta(id, ns, "app"), Backoff(10*time.Millisecond, 50*time.Millisecond), UseProtocol(p),
		OnRoutes(func(v uint64, rs []*batonv1.TopicRoute) error {
			if refuse != nil {
				if err := refuse(v); err != nil {
					return err
				}
			}
			sn.mu.Lock()
			defer sn.mu.Unlock()
			clear(sn.routes)
			for _, r := range rs {
				sn.routes[r.GetTopic()] = r
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Run(ctx) }()
	return c, sn
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func res(v uint64, state batonv1.State, target *Target) Resources {
	r := Resources{Version: v,
		Routes: []*batonv1.TopicRoute{{Topic: "orders", State: state, Version: v,
			Shadow: &batonv1.ShadowFeatures{LatencyEmulation: true}}},
		Clusters: []*batonv1.Cluster{{Name: "src", Bootstrap: []string{"s:9092"}}}}
	if target != nil {
		r.Targets = map[string]Target{"orders": *target}
	}
	return r
}

func TestTargetingAndAcks(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s := NewServer()
			conn, _ := serve(t, s)
			s.Update(res(1, batonv1.State_STATE_PROXY, &Target{Namespaces: []string{"team-a"}}))
			a, sa := startClient(t, ctx, conn, p, "a", "team-a", nil)
			b, sb := startClient(t, ctx, conn, p, "b", "team-b", nil)
			for _, c := range []*Client{a, b} {
				if err := c.WaitVersion(ctx, 1); err != nil {
					t.Fatal(err)
				}
			}
			if !sa.get("orders").GetShadow().GetLatencyEmulation() {
				t.Error("team-a is targeted but got no shadow features")
			}
			if sb.get("orders").GetShadow() != nil || sb.get("orders").GetState() != batonv1.State_STATE_PROXY {
				t.Errorf("team-b is not targeted: want PROXY without shadow, got %v", sb.get("orders"))
			}
			// MIGRATING reaches every node, targeted or not.
			s.Update(res(2, batonv1.State_STATE_MIGRATING, &Target{Namespaces: []string{"team-a"}}))
			for _, c := range []*Client{a, b} {
				if err := c.WaitVersion(ctx, 2); err != nil {
					t.Fatal(err)
				}
			}
			if sb.get("orders").GetState() != batonv1.State_STATE_MIGRATING {
				t.Errorf("team-b: want MIGRATING, got %v", sb.get("orders"))
			}
			waitFor(t, ctx, "server sees both acks", func() bool {
				na, _ := s.Node("a")
				nb, _ := s.Node("b")
				return na.AckedVersion == 2 && nb.AckedVersion == 2 && na.Namespace == "team-a"
			})
		})
	}
}

func TestNackDoesNotAdvance(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s := NewServer()
			conn, _ := serve(t, s)
			s.Update(res(1, batonv1.State_STATE_PROXY, nil))
			c, _ := startClient(t, ctx, conn, p, "n", "ns", func(v uint64) error {
				if v == 2 {
					return errors.New("cannot apply version 2")
				}
				return nil
			})
			if err := c.WaitVersion(ctx, 1); err != nil {
				t.Fatal(err)
			}
			s.Update(res(2, batonv1.State_STATE_MIGRATING, nil))
			waitFor(t, ctx, "NACK recorded", func() bool {
				n, _ := s.Node("n")
				return n.LastNack != nil
			})
			n, _ := s.Node("n")
			if n.AckedVersion != 1 || n.LastNack.Version != "2" || n.LastNack.Error != "cannot apply version 2" {
				t.Errorf("after NACK: acked %d, nack %+v", n.AckedVersion, n.LastNack)
			}
			if c.AckedVersion() != 1 {
				t.Errorf("client acked %d after its own NACK", c.AckedVersion())
			}
			s.Update(res(3, batonv1.State_STATE_PROXY, nil))
			if err := c.WaitVersion(ctx, 3); err != nil {
				t.Fatal(err)
			}
			waitFor(t, ctx, "ack of 3", func() bool { n, _ := s.Node("n"); return n.AckedVersion == 3 })
		})
	}
}

func TestClientReconnects(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
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
			c, sn := startClient(t, ctx, conn, p, "r", "ns", nil)
			if err := c.WaitVersion(ctx, 1); err != nil {
				t.Fatal(err)
			}
			g.Stop()
			waitFor(t, ctx, "disconnect seen", func() bool { n, _ := s.Node("r"); return !n.Connected })
			s.Update(res(2, batonv1.State_STATE_COMPLETE, nil))
			if _, _, err := serveAt(t, addr, func(g *grpc.Server) { s.Register(g) }); err != nil {
				t.Skipf("port reuse: %v", err)
			}
			if err := c.WaitVersion(ctx, 2); err != nil {
				t.Fatal(err)
			}
			if sn.get("orders").GetState() != batonv1.State_STATE_COMPLETE {
				t.Errorf("after reconnect: %v", sn.get("orders"))
			}
		})
	}
}

func TestValidateRoute(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		r    *batonv1.TopicRoute
		ok   bool
	}{
		{"ok", &batonv1.TopicRoute{Topic: "t", State: batonv1.State_STATE_PROXY}, true},
		{"no topic", &batonv1.TopicRoute{State: batonv1.State_STATE_PROXY}, false},
		{"no state", &batonv1.TopicRoute{Topic: "t"}, false},
		{"unknown state", &batonv1.TopicRoute{Topic: "t", State: 42}, false},
	} {
		if err := ValidateRoute(tc.r); (err == nil) != tc.ok {
			t.Errorf("%s: err %v", tc.name, err)
		}
	}
}

// TestOlderRoutesKept: a client that moves to a replica lagging behind the
// one it came from is sent an older route set; it keeps the routes it
// applied (a MIGRATING topic never goes back to PROXY), then applies the
// lagging replica's next, newer version.
func TestOlderRoutesKept(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ahead, behind := NewServer(), NewServer()
			ahead.Update(res(2, batonv1.State_STATE_MIGRATING, nil))
			behind.Update(res(1, batonv1.State_STATE_PROXY, nil))
			addrA, gA, err := serveAt(t, "127.0.0.1:0", func(g *grpc.Server) { ahead.Register(g) })
			if err != nil {
				t.Fatal(err)
			}
			addrB, _, err := serveAt(t, "127.0.0.1:0", func(g *grpc.Server) { behind.Register(g) })
			if err != nil {
				t.Fatal(err)
			}
			target, opts := ReplicasTarget([]string{addrA, addrB})
			conn, err := grpc.NewClient(target, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var applied []uint64
			var mu sync.Mutex
			c, sn := startClient(t, ctx, conn, p, "r", "ns", func(v uint64) error {
				mu.Lock()
				defer mu.Unlock()
				applied = append(applied, v)
				return nil
			})
			if err := c.WaitVersion(ctx, 2); err != nil {
				t.Fatal(err)
			}
			gA.Stop()
			waitFor(t, ctx, "the lagging replica's version 1 received", func() bool { return c.olderSeen.Load() > 0 })
			if got := sn.get("orders").GetState(); got != batonv1.State_STATE_MIGRATING || c.AckedVersion() != 2 {
				t.Fatalf("after the older version: orders %v, acked %d; want MIGRATING kept at 2", got, c.AckedVersion())
			}
			behind.Update(res(3, batonv1.State_STATE_COMPLETE, nil))
			if err := c.WaitVersion(ctx, 3); err != nil {
				t.Fatal(err)
			}
			if got := sn.get("orders").GetState(); got != batonv1.State_STATE_COMPLETE {
				t.Errorf("after version 3: orders %v", got)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(applied) != 2 || applied[0] != 2 || applied[1] != 3 {
				t.Errorf("versions applied: %v, want [2 3]", applied)
			}
		})
	}
}
