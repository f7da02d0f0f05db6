package controlplane

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/xds"
)

// TestShadowTargetWidens: a topic's shadow features go to the agents of
// its target's namespaces only, and SetShadow with a target widens them
// to the next namespace of a rollout, at a new version.
func TestShadowTargetWidens(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newMemRepl()
	p := startMemPlane(t, ctx, NewMemStore(), "", r)
	a1 := startAgentIn(t, ctx, p.addr, "a1", "a", "app")
	b1 := startAgentIn(t, ctx, p.addr, "b1", "b", "app")
	if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: "orders", Target: xds.Target{Namespaces: []string{"a"}},
		Shadow: Shadow{LatencyEmulation: true}}, "test"); err != nil {
		t.Fatal(err)
	}
	emulates := func(a *standIn) bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.routes["orders"].GetShadow().GetLatencyEmulation()
	}
	routed := func(want string) func() string {
		return func() string {
			if got := fmt.Sprintf("a:%v b:%v", emulates(a1), emulates(b1)); got != want {
				return "latency emulation " + got
			}
			return ""
		}
	}
	wait.For(t, time.Minute, "latency emulation in namespace a only", routed("a:true b:false"))
	before := p.cp.Version()
	tp, err := p.cp.SetShadow(ctx, "orders", ShadowChange{Target: &xds.Target{Namespaces: []string{"a", "b"}}}, "test")
	if err != nil || !slices.Equal(tp.Target.Namespaces, []string{"a", "b"}) || tp.Version <= before {
		t.Fatalf("widening the target: %+v, %v; want namespaces a,b at a version after %d", tp.Target, err, before)
	}
	wait.For(t, time.Minute, "latency emulation in namespaces a and b", routed("a:true b:true"))
	again, err := p.cp.SetShadow(ctx, "orders", ShadowChange{Target: &xds.Target{Namespaces: []string{"b", "a"}}}, "test")
	if err != nil || again.Version != tp.Version {
		t.Errorf("the same target again: version %d, %v; want no new version (%d)", again.Version, err, tp.Version)
	}
}
