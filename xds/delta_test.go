package xds

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
)

// wire records what a real Client sends and receives on its delta streams:
// a gRPC stream interceptor on its connection, so the client and the
// server are the real ones and only the bytes are looked at.
type wire struct {
	mu    sync.Mutex
	resps []*discovery.DeltaDiscoveryResponse
	reqs  []*discovery.DeltaDiscoveryRequest
}

type recordingStream struct {
	grpc.ClientStream
	w *wire
}

func (s recordingStream) SendMsg(m any) error {
	if r, ok := m.(*discovery.DeltaDiscoveryRequest); ok {
		s.w.mu.Lock()
		s.w.reqs = append(s.w.reqs, r)
		s.w.mu.Unlock()
	}
	return s.ClientStream.SendMsg(m)
}

func (s recordingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if r, ok := m.(*discovery.DeltaDiscoveryResponse); ok && err == nil {
		s.w.mu.Lock()
		s.w.resps = append(s.w.resps, r)
		s.w.mu.Unlock()
	}
	return err
}

func (w *wire) dialOpt() grpc.DialOption {
	return grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
		streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return recordingStream{ClientStream: cs, w: w}, nil
	})
}

// routeResponses returns the TopicRoute responses received so far.
func (w *wire) routeResponses() []*discovery.DeltaDiscoveryResponse {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*discovery.DeltaDiscoveryResponse
	for _, r := range w.resps {
		if r.GetTypeUrl() == TopicRouteType {
			out = append(out, r)
		}
	}
	return out
}

func (w *wire) count() (reqs, resps int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.reqs), len(w.resps)
}

// listen serves s on a loopback listener; restart serves it again on the
// same address (a control plane coming back).
type listener struct {
	addr string
	g    *grpc.Server
}

func listen(t *testing.T, s *Server, addr string) *listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("listen %s: %v", addr, err)
	}
	g := grpc.NewServer()
	s.Register(g)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	return &listener{addr: ln.Addr().String(), g: g}
}

func dial(t *testing.T, addr string, w *wire) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), w.dialOpt())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// routesAt renders topics at per-topic versions (the version at which each
// last changed, as the control plane's publish does), all PROXY unless in
// states.
func routesAt(version uint64, topics map[string]uint64, states map[string]batonv1.State) Resources {
	r := Resources{Version: version, Clusters: []*batonv1.Cluster{{Name: "src", Bootstrap: []string{"s:9092"}}}}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range topics {
			if !yield(k) {
				return
			}
		}
	}) {
		st := batonv1.State_STATE_PROXY
		if s, ok := states[name]; ok {
			st = s
		}
		r.Routes = append(r.Routes, &batonv1.TopicRoute{Topic: name, State: st, Version: topics[name]})
	}
	return r
}

func names(rs []*discovery.Resource) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.GetName())
	}
	slices.Sort(out)
	return out
}

// TestDeltaResponses: what a delta client is sent, as seen on the wire.
func TestDeltaResponses(t *testing.T) {
	t.Parallel()
	three := map[string]uint64{"a": 1, "b": 1, "c": 1}
	for _, tc := range []struct {
		name string
		// next is published once the client ACKed v1 (a, b, c at v1).
		next        Resources
		wantSent    []string // resources of the v2 TopicRoute response
		wantRemoved []string
		wantTopics  []string // what OnRoutes then holds
	}{
		{name: "one topic changes", next: routesAt(2, map[string]uint64{"a": 1, "b": 2, "c": 1},
			map[string]batonv1.State{"b": batonv1.State_STATE_MIGRATING}),
			wantSent: []string{"b"}, wantTopics: []string{"a", "b", "c"}},
		{name: "topic removed", next: routesAt(2, map[string]uint64{"a": 1, "c": 1}, nil),
			wantRemoved: []string{"b"}, wantTopics: []string{"a", "c"}},
		{name: "topic added", next: routesAt(2, map[string]uint64{"a": 1, "b": 1, "c": 1, "d": 2}, nil),
			wantSent: []string{"d"}, wantTopics: []string{"a", "b", "c", "d"}},
		{name: "nothing changes", next: routesAt(2, three, nil), wantTopics: []string{"a", "b", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s := NewServer()
			s.Update(routesAt(1, three, nil))
			w := &wire{}
			conn := dial(t, listen(t, s, "127.0.0.1:0").addr, w)
			c, sn := startClient(t, ctx, conn, Delta, "n", "ns", nil)
			if err := c.WaitVersion(ctx, 1); err != nil {
				t.Fatal(err)
			}
			// The subscription gets everything.
			first := w.routeResponses()[0]
			if got := names(first.GetResources()); !slices.Equal(got, []string{"a", "b", "c"}) || first.GetSystemVersionInfo() != "1" {
				t.Fatalf("first response: %v at %q", got, first.GetSystemVersionInfo())
			}
			_, before := w.count()
			s.Update(tc.next)
			if err := c.WaitVersion(ctx, 2); err != nil {
				t.Fatal(err)
			}
			waitFor(t, ctx, "server sees the ACK of 2", func() bool { n, _ := s.Node("n"); return n.AckedVersion == 2 })
			rs := w.routeResponses()
			last := rs[len(rs)-1]
			if got := names(last.GetResources()); !slices.Equal(got, tc.wantSent) {
				t.Errorf("v2 sent %v, want %v", got, tc.wantSent)
			}
			if got := last.GetRemovedResources(); !slices.Equal(got, tc.wantRemoved) {
				t.Errorf("v2 removed %v, want %v", got, tc.wantRemoved)
			}
			if _, after := w.count(); after-before != 1 {
				t.Errorf("%d responses for one route change, want 1 (clusters did not change)", after-before)
			}
			sn.mu.Lock()
			var got []string
			for topic := range sn.routes {
				got = append(got, topic)
			}
			sn.mu.Unlock()
			slices.Sort(got)
			if !slices.Equal(got, tc.wantTopics) {
				t.Errorf("client holds %v, want %v", got, tc.wantTopics)
			}
			if tc.name == "one topic changes" && sn.get("b").GetState() != batonv1.State_STATE_MIGRATING {
				t.Errorf("b: %v", sn.get("b"))
			}
		})
	}
}

// TestDeltaNackRevert: a NACKed delta response is reported with its version
// and error, the acked version stays, and the refused change reaches the
// client again with the next version (the server counts the client as
// holding what it held before).
func TestDeltaNackRevert(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := NewServer()
	s.Update(routesAt(1, map[string]uint64{"a": 1, "b": 1}, nil))
	w := &wire{}
	conn := dial(t, listen(t, s, "127.0.0.1:0").addr, w)
	c, sn := startClient(t, ctx, conn, Delta, "n", "ns", func(v uint64) error {
		if v == 2 {
			return errors.New("cannot apply version 2")
		}
		return nil
	})
	if err := c.WaitVersion(ctx, 1); err != nil {
		t.Fatal(err)
	}
	s.Update(routesAt(2, map[string]uint64{"a": 2, "b": 1}, map[string]batonv1.State{"a": batonv1.State_STATE_MIGRATING}))
	waitFor(t, ctx, "NACK recorded", func() bool { n, _ := s.Node("n"); return n.LastNack != nil })
	n, _ := s.Node("n")
	if n.AckedVersion != 1 || n.Nacks != 1 || n.LastNack.Version != "2" || n.LastNack.Type != TopicRouteType ||
		n.LastNack.Error != "cannot apply version 2" {
		t.Errorf("after NACK: acked %d, %d nacks, last %+v", n.AckedVersion, n.Nacks, n.LastNack)
	}
	if c.AckedVersion() != 1 || sn.get("a").GetState() != batonv1.State_STATE_PROXY {
		t.Errorf("client after its NACK: acked %d, a %v", c.AckedVersion(), sn.get("a"))
	}
	// The NACK is not answered with the same change again (it would only be
	// refused again); v3 changes only b, and brings a's change along.
	s.Update(routesAt(3, map[string]uint64{"a": 2, "b": 3}, map[string]batonv1.State{
		"a": batonv1.State_STATE_MIGRATING, "b": batonv1.State_STATE_MIGRATING}))
	if err := c.WaitVersion(ctx, 3); err != nil {
		t.Fatal(err)
	}
	rs := w.routeResponses()
	if got := names(rs[len(rs)-1].GetResources()); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("v3 after NACK of v2 sent %v, want [a b]", got)
	}
	if len(rs) != 3 {
		t.Errorf("%d TopicRoute responses, want 3 (v1, v2 NACKed, v3)", len(rs))
	}
	if sn.get("a").GetState() != batonv1.State_STATE_MIGRATING || sn.get("b").GetState() != batonv1.State_STATE_MIGRATING {
		t.Errorf("after v3: a %v, b %v", sn.get("a"), sn.get("b"))
	}
	waitFor(t, ctx, "ack of 3", func() bool { n, _ := s.Node("n"); return n.AckedVersion == 3 && n.Nacks == 1 })
}

// TestDeltaReconnect: a client that reconnects subscribes with the versions
// it holds and is sent only what changed meanwhile, whether the same server
// comes back or another one (a restarted control plane) at the same state.
func TestDeltaReconnect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		newServer bool
	}{{"same server", false}, {"restarted server", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			v1 := routesAt(1, map[string]uint64{"a": 1, "b": 1, "c": 1}, nil)
			v2 := routesAt(2, map[string]uint64{"a": 1, "b": 1, "c": 2, "d": 2}, map[string]batonv1.State{"c": batonv1.State_STATE_COMPLETE})
			v2.Routes = slices.DeleteFunc(v2.Routes, func(r *batonv1.TopicRoute) bool { return r.GetTopic() == "a" })
			s := NewServer()
			s.Update(v1)
			l := listen(t, s, "127.0.0.1:0")
			w := &wire{}
			conn := dial(t, l.addr, w)
			c, sn := startClient(t, ctx, conn, Delta, "r", "ns", nil)
			if err := c.WaitVersion(ctx, 1); err != nil {
				t.Fatal(err)
			}
			l.g.Stop()
			waitFor(t, ctx, "disconnect seen", func() bool { n, _ := s.Node("r"); return !n.Connected })
			nreqs, _ := w.count()
			if tc.newServer {
				s = NewServer()
			}
			s.Update(v2)
			listen(t, s, l.addr)
			if err := c.WaitVersion(ctx, 2); err != nil {
				t.Fatal(err)
			}
			w.mu.Lock()
			var sub *discovery.DeltaDiscoveryRequest
			for _, r := range w.reqs[nreqs:] {
				if r.GetTypeUrl() == TopicRouteType && r.GetResponseNonce() == "" {
					sub = r
				}
			}
			w.mu.Unlock()
			if sub == nil || len(sub.GetInitialResourceVersions()) != 3 {
				t.Fatalf("resubscription %v: want initial versions of a, b, c", sub)
			}
			rs := w.routeResponses()
			last := rs[len(rs)-1]
			if got := names(last.GetResources()); !slices.Equal(got, []string{"c", "d"}) {
				t.Errorf("after reconnect sent %v, want [c d]", got)
			}
			if got := last.GetRemovedResources(); !slices.Equal(got, []string{"a"}) {
				t.Errorf("after reconnect removed %v, want [a]", got)
			}
			if sn.get("a") != nil || sn.get("c").GetState() != batonv1.State_STATE_COMPLETE || sn.get("b") == nil {
				t.Errorf("client holds a %v, b %v, c %v", sn.get("a"), sn.get("b"), sn.get("c"))
			}
			waitFor(t, ctx, "server sees the ACK of 2", func() bool { n, _ := s.Node("r"); return n.AckedVersion == 2 && n.Connected })
		})
	}
}

// TestDeltaTargeting: a change of a topic's target reaches the nodes it
// concerns as a changed resource, in delta as in SotW.
func TestDeltaTargeting(t *testing.T) {
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
			if sb.get("orders").GetShadow() != nil || !sa.get("orders").GetShadow().GetLatencyEmulation() {
				t.Fatalf("v1: a %v, b %v", sa.get("orders"), sb.get("orders"))
			}
			// Widened to team-b: its node now gets the shadow features.
			s.Update(res(2, batonv1.State_STATE_PROXY, &Target{Namespaces: []string{"team-a", "team-b"}}))
			for _, c := range []*Client{a, b} {
				if err := c.WaitVersion(ctx, 2); err != nil {
					t.Fatal(err)
				}
			}
			if !sb.get("orders").GetShadow().GetLatencyEmulation() {
				t.Errorf("team-b targeted at v2 but got %v", sb.get("orders"))
			}
			// Workload targeting: only team-a's other workload.
			s.Update(res(3, batonv1.State_STATE_REJECT, &Target{Workloads: []string{"other"}}))
			for _, c := range []*Client{a, b} {
				if err := c.WaitVersion(ctx, 3); err != nil {
					t.Fatal(err)
				}
			}
			for _, sn := range []*seen{sa, sb} {
				if r := sn.get("orders"); r.GetShadow() != nil || r.GetState() != batonv1.State_STATE_REJECT {
					t.Errorf("workload app is not targeted at v3: %v", r)
				}
			}
		})
	}
}

// TestDeltaClientAPI: the protocol option is checked.
func TestDeltaClientAPI(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p  Protocol
		ok bool
	}{{Delta, true}, {SotW, true}, {Protocol(7), false}} {
		_, err := NewClient(nil, NodeMeta("n", "ns", "app"), UseProtocol(tc.p))
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrBadConfig)) {
			t.Errorf("%v: err %v", tc.p, err)
		}
	}
}

// openDelta opens a delta watch on c for node id in ns.
func openDelta(t *testing.T, c *groupCache, sub *stream.Subscription, id string, nack bool) chan cache.DeltaResponse {
	t.Helper()
	ch := make(chan cache.DeltaResponse, 4)
	req := &discovery.DeltaDiscoveryRequest{Node: NodeMeta(id, "ns", "app"), TypeUrl: TopicRouteType}
	if nack {
		req.ErrorDetail = &rpcstatus.Status{Message: "no"}
	}
	if _, err := c.CreateDeltaWatch(req, sub, ch); err != nil {
		t.Fatal(err)
	}
	return ch
}

func recvDelta(t *testing.T, ch chan cache.DeltaResponse, sub *stream.Subscription) *discovery.DeltaDiscoveryResponse {
	t.Helper()
	select {
	case r := <-ch:
		out, err := r.GetDeltaDiscoveryResponse()
		if err != nil {
			t.Fatal(err)
		}
		sub.SetReturnedResources(r.GetNextVersionMap()) // as the server does
		return out
	default:
		t.Fatal("no delta response")
		return nil
	}
}

func noDelta(t *testing.T, ch chan cache.DeltaResponse) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("unexpected delta response at %s", r.GetResponseVersion())
	default:
	}
}

// TestGroupCacheDelta: the cache's delta rules on the paths the end-to-end
// tests do not reach: a stream behind by several versions, one whose
// version left the history, one subscribed by name, unsubscribing by name.
func TestGroupCacheDelta(t *testing.T) {
	t.Parallel()
	c := newGroupCache()
	topics := map[string]uint64{"a": 1, "b": 1, "c": 1}
	v := uint64(1)
	set := func() {
		r := routesAt(v, topics, nil)
		if err := c.set("ns/app", buildSnapshot(&r, "c0", "ns", "app")); err != nil {
			t.Fatal(err)
		}
	}
	set()
	sub := stream.NewDeltaSubscription([]string{"*"}, nil, nil, true)
	if got := names(recvDelta(t, openDelta(t, c, &sub, "w", false), &sub).GetResources()); len(got) != 3 {
		t.Fatalf("wildcard subscription got %v", got)
	}
	named := stream.NewDeltaSubscription([]string{"a"}, nil, nil, true)
	if got := names(recvDelta(t, openDelta(t, c, &named, "x", false), &named).GetResources()); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("subscription to a got %v", got)
	}

	// Two versions pass before the wildcard stream answers: it is sent both
	// changes, compared name by name.
	v, topics["a"] = 2, 2
	set()
	v, topics["b"] = 3, 3
	delete(topics, "c")
	set()
	r := recvDelta(t, openDelta(t, c, &sub, "w", false), &sub)
	if got := names(r.GetResources()); !slices.Equal(got, []string{"a", "b"}) || !slices.Equal(r.GetRemovedResources(), []string{"c"}) ||
		r.GetSystemVersionInfo() != "3" {
		t.Errorf("behind by two: sent %v, removed %v at %s", got, r.GetRemovedResources(), r.GetSystemVersionInfo())
	}
	noDelta(t, openDelta(t, c, &sub, "w", false)) // up to date: waits

	// By name: only a's changes, and the server prunes an unsubscribed name
	// so that subscribing again sends it again.
	r = recvDelta(t, openDelta(t, c, &named, "x", false), &named)
	if got := names(r.GetResources()); !slices.Equal(got, []string{"a"}) {
		t.Errorf("subscription to a: sent %v", got)
	}
	named.UpdateResourceSubscriptions(nil, []string{"a"})
	named.UpdateResourceSubscriptions([]string{"a"}, nil)
	if got := names(recvDelta(t, openDelta(t, c, &named, "x", false), &named).GetResources()); !slices.Equal(got, []string{"a"}) {
		t.Errorf("subscribed to a again: sent %v", got)
	}

	// Wildcard and subscribed to b by name too, then unsubscribing b: the
	// server must say whether b still exists, so b is sent again.
	sub.UpdateResourceSubscriptions([]string{"b"}, nil)
	sub.UpdateResourceSubscriptions(nil, []string{"b"})
	if got := names(recvDelta(t, openDelta(t, c, &sub, "w", false), &sub).GetResources()); !slices.Equal(got, []string{"b"}) {
		t.Errorf("wildcard after unsubscribing b: sent %v", got)
	}

	// More versions than the history holds: everything is sent again, and
	// every name the group ever had and no longer has is removed.
	for range histLen + 2 {
		v++
		topics["a"] = v
		set()
	}
	r = recvDelta(t, openDelta(t, c, &sub, "w", false), &sub)
	if got := names(r.GetResources()); !slices.Equal(got, []string{"a", "b"}) || !slices.Equal(r.GetRemovedResources(), []string{"c"}) {
		t.Errorf("after the history: sent %v, removed %v", got, r.GetRemovedResources())
	}
	// A NACK is not answered until the next version, which then carries the
	// refused change too.
	v, topics["a"] = v+1, v+1
	set()
	if got := names(recvDelta(t, openDelta(t, c, &sub, "w", false), &sub).GetResources()); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("sent %v", got)
	}
	nack := openDelta(t, c, &sub, "w", true)
	noDelta(t, nack)
	v, topics["b"] = v+1, v+1
	set()
	if got := names(recvDelta(t, nack, &sub).GetResources()); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("after a NACK: sent %v, want [a b]", got)
	}
}
