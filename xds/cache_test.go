package xds

import (
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
)

func watchReq(t *testing.T, c *groupCache, id, ns, version string, names ...string) (chan cache.Response, *stream.Subscription, func()) {
	t.Helper()
	sub := stream.NewSotwSubscription(names, true)
	ch := make(chan cache.Response, 4)
	cancel, err := c.CreateWatch(&discovery.DiscoveryRequest{Node: NodeMeta(id, ns, "app"), TypeUrl: TopicRouteType,
		VersionInfo: version, ResourceNames: names}, &sub, ch)
	if err != nil {
		t.Fatal(err)
	}
	return ch, &sub, cancel
}

func recv(t *testing.T, ch chan cache.Response) *discovery.DiscoveryResponse {
	t.Helper()
	select {
	case r := <-ch:
		out, err := r.GetDiscoveryResponse()
		if err != nil {
			t.Fatal(err)
		}
		return out
	default:
		t.Fatal("no response")
		return nil
	}
}

func none(t *testing.T, ch chan cache.Response) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("unexpected response at version %s", r.GetResponseVersion())
	default:
	}
}

// TestGroupCacheSharesMarshalledResources: nodes of one group are answered
// with the same marshalled resources; watch semantics are the SnapshotCache's.
func TestGroupCacheSharesMarshalledResources(t *testing.T) {
	t.Parallel()
	c := newGroupCache()
	two := Resources{Version: 1, Routes: []*batonv1.TopicRoute{
		{Topic: "a", State: batonv1.State_STATE_PROXY, Version: 1},
		{Topic: "b", State: batonv1.State_STATE_PROXY, Version: 1}}}
	set := func(r Resources) {
		if err := c.set("ns/app", buildSnapshot(&r, "c0", "ns", "app")); err != nil {
			t.Fatal(err)
		}
	}
	set(two)
	ch1, sub1, _ := watchReq(t, c, "n1", "ns", "")
	ch2, _, _ := watchReq(t, c, "n2", "ns", "")
	r1, r2 := recv(t, ch1), recv(t, ch2)
	if r1.GetVersionInfo() != "1" || len(r1.GetResources()) != 2 || r1.GetTypeUrl() != TopicRouteType {
		t.Fatalf("response %v", r1)
	}
	for i := range r1.GetResources() {
		if r1.GetResources()[i] != r2.GetResources()[i] {
			t.Errorf("resource %d marshalled per node", i)
		}
	}
	if r1 == r2 {
		t.Error("one DiscoveryResponse shared by two streams (the server stamps nonces on it)")
	}

	// The server records what it sent; an ACK at the current version waits.
	ret1 := map[string]string{}
	for k, v := range mustResp(t, c, "n1").GetReturnedResources() {
		ret1[k] = v
	}
	sub1.SetReturnedResources(ret1)
	ack := make(chan cache.Response, 4)
	cancel, err := c.CreateWatch(&discovery.DiscoveryRequest{Node: NodeMeta("n1", "ns", "app"), TypeUrl: TopicRouteType, VersionInfo: "1"}, sub1, ack)
	if err != nil {
		t.Fatal(err)
	}
	none(t, ack)
	// A new version answers the open watch.
	two.Version = 2
	set(two)
	if got := recv(t, ack).GetVersionInfo(); got != "2" {
		t.Errorf("watch answered at %s", got)
	}
	cancel()

	// A NACK carries the last ACKed version: answered at once with the current one.
	nack, _, _ := watchReq(t, c, "n3", "ns", "1")
	if got := recv(t, nack).GetVersionInfo(); got != "2" {
		t.Errorf("NACK answered at %s", got)
	}

	// ADS: a request naming only some resources is not answered.
	partial, _, _ := watchReq(t, c, "n4", "ns", "", "a")
	none(t, partial)
	full, _, _ := watchReq(t, c, "n5", "ns", "", "a", "b")
	if got := len(recv(t, full).GetResources()); got != 2 {
		t.Errorf("named request got %d resources", got)
	}

	// A resource added at the same version reaches a stream that ACKed it.
	ch6, sub6, _ := watchReq(t, c, "n6", "ns", "")
	sub6.SetReturnedResources(mustRecvResp(t, ch6).GetReturnedResources())
	three := two
	three.Routes = append(three.Routes, &batonv1.TopicRoute{Topic: "c", State: batonv1.State_STATE_PROXY, Version: 2})
	set(three)
	again := make(chan cache.Response, 4)
	if _, err := c.CreateWatch(&discovery.DiscoveryRequest{Node: NodeMeta("n6", "ns", "app"), TypeUrl: TopicRouteType, VersionInfo: "2"}, sub6, again); err != nil {
		t.Fatal(err)
	}
	if got := len(recv(t, again).GetResources()); got != 3 {
		t.Errorf("after a new name at the same version: %d resources", got)
	}
}

func mustResp(t *testing.T, c *groupCache, id string) cache.Response {
	t.Helper()
	ch, _, _ := watchReq(t, c, id, "ns", "")
	return mustRecvResp(t, ch)
}

func mustRecvResp(t *testing.T, ch chan cache.Response) cache.Response {
	t.Helper()
	select {
	case r := <-ch:
		return r
	default:
		t.Fatal("no response")
		return nil
	}
}
