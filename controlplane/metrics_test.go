package controlplane

import (
	"context"
	"maps"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane/cutover"
	"github.com/baton-kafka/baton/migration"
)

// series gathers reg and returns name's series, keyed by their labels
// joined as k=v,k=v in label order.
func series(t *testing.T, reg *prometheus.Registry, name string) map[string]*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.Metric{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := ""
			for i, l := range m.GetLabel() {
				if i > 0 {
					key += ","
				}
				key += l.GetName() + "=" + l.GetValue()
			}
			out[key] = m
		}
	}
	return out
}

// TestTopicStateAndAgentGauges: baton_controlplane_topic_state has, per
// managed topic, 1 for its state and 0 for the three others, following a
// transition; baton_controlplane_agents counts agents by namespace and
// lease, an agent moving from valid to expired when its lease runs out.
func TestTopicStateAndAgentGauges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	const lease = 6 * time.Second
	reg := prometheus.NewRegistry()
	cp, err := New(ctx, WithStore(NewMemStore()), WithReplication(idleReplication{}), Clock(clock), Logger(quiet),
		LeaseDuration(lease), ForwardDeadline(time.Second), Registry(reg),
		Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range []TopicSpec{{Name: "orders", State: migration.Proxy}, {Name: "audit", State: migration.Reject}} {
		if _, err := cp.AddTopic(ctx, spec, "test"); err != nil {
			t.Fatal(err)
		}
	}
	wantStates := func(want map[string]string) {
		t.Helper()
		got := series(t, reg, "baton_controlplane_topic_state")
		if len(got) != 4*len(want) {
			t.Errorf("baton_controlplane_topic_state has %d series, want 4 per topic (%d)", len(got), 4*len(want))
		}
		for topic, state := range want {
			for _, s := range managedStates {
				v, w := got["state="+s.String()+",topic="+topic].GetGauge().GetValue(), 0.0
				if s.String() == state {
					w = 1
				}
				if v != w {
					t.Errorf("baton_controlplane_topic_state{topic=%q,state=%q} = %v, want %v", topic, s, v, w)
				}
			}
		}
	}
	wantStates(map[string]string{"orders": "PROXY", "audit": "REJECT"})
	if _, err := cp.SetState(ctx, "audit", migration.Proxy, "test"); err != nil {
		t.Fatal(err)
	}
	wantStates(map[string]string{"orders": "PROXY", "audit": "PROXY"})

	for _, a := range []struct{ node, ns string }{{"a1", "shop"}, {"a2", "shop"}, {"b1", "billing"}} {
		resp, err := cp.Heartbeat(ctx, &batonv1.HeartbeatRequest{NodeId: a.node, Namespace: a.ns, AckedVersion: cp.Version()})
		if err != nil || !resp.GetGranted() {
			t.Fatalf("heartbeat of %s: %v, %v; want a grant", a.node, resp, err)
		}
	}
	wantAgents := func(want map[string]float64) {
		t.Helper()
		got := series(t, reg, "baton_controlplane_agents")
		if len(got) != len(want) {
			t.Errorf("baton_controlplane_agents = %v, want %v", got, want)
		}
		for k, w := range want {
			if v := got[k].GetGauge().GetValue(); v != w {
				t.Errorf("baton_controlplane_agents{%s} = %v, want %v", k, v, w)
			}
		}
	}
	wantAgents(map[string]float64{"lease=valid,namespace=shop": 2, "lease=valid,namespace=billing": 1})
	advance(lease / 2)
	if _, err := cp.Heartbeat(ctx, &batonv1.HeartbeatRequest{NodeId: "a1", Namespace: "shop", AckedVersion: cp.Version()}); err != nil {
		t.Fatal(err)
	}
	advance(lease/2 + time.Millisecond) // a2's and b1's leases ran out; a1's was renewed
	wantAgents(map[string]float64{"lease=valid,namespace=shop": 1, "lease=expired,namespace=shop": 1, "lease=expired,namespace=billing": 1})
}

// TestCutoverDurationHistogram: a cutover that completes is observed once
// in baton_controlplane_cutover_duration_seconds{outcome="completed"}, one
// aborted while it waits on an agent once in {outcome="rolled_back"}, each
// with its time from MIGRATING pushed to the decision.
func TestCutoverDurationHistogram(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := newMemRepl()
	reg := prometheus.NewRegistry()
	p := startMemPlane(t, ctx, NewMemStore(), "", r, Registry(reg))
	a, holder := startAgent(t, ctx, p.addr, "a"), startAgent(t, ctx, p.addr, "holder")
	r.produce("done", 10)
	r.produce("aborted", 10)

	addAndMigrate(t, ctx, p, "done", a, holder)
	waitState(t, ctx, p, "done", migration.Complete)

	if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: "aborted", State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	waitLeases(t, ctx, p, a, holder)
	holder.mu.Lock()
	holder.stuck = true // never drains: the cutover waits on it until aborted
	holder.mu.Unlock()
	migrateWhenGateOpens(t, ctx, p, "aborted")
	if _, err := p.cp.Abort(ctx, "aborted", "test", "measuring"); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, p, "aborted", migration.Proxy)

	h := series(t, reg, "baton_controlplane_cutover_duration_seconds")
	for _, outcome := range []string{"completed", "rolled_back"} {
		m := h["outcome="+outcome].GetHistogram()
		if m.GetSampleCount() != 1 {
			t.Errorf("cutovers observed with outcome %s: %d, want 1", outcome, m.GetSampleCount())
			continue
		}
		var started, decided time.Time
		evs, err := p.cp.Events(ctx, map[string]string{"completed": "done", "rolled_back": "aborted"}[outcome], 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Kind == outcome {
				started, decided = e.StartedAt, e.Time
			}
		}
		// The stored times are wall-clock readings; the observation may
		// have used the monotonic clock: they agree to well under 1 ms.
		if want := decided.Sub(started).Seconds(); math.Abs(m.GetSampleSum()-want) > 1e-3 {
			t.Errorf("%s cutover observed as %vs, want %vs, its event's time since its start", outcome, m.GetSampleSum(), want)
		}
	}

	// The completed cutover's steps: each event that ends one carries its
	// duration, observed once under its kind, and together they are the
	// cutover (its topic is not fenced: no source_fenced). The aborted one
	// ended no step: it was still draining.
	evs, err := p.cp.Events(ctx, "done", 0)
	if err != nil {
		t.Fatal(err)
	}
	steps := series(t, reg, "baton_controlplane_cutover_step_duration_seconds")
	var sum, total time.Duration
	for _, e := range evs {
		if e.Kind == EventCompleted {
			total = e.Time.Sub(e.StartedAt)
		}
		if e.Took == 0 {
			continue
		}
		sum += e.Took
		m := steps["step="+e.Kind].GetHistogram()
		if m.GetSampleCount() != 1 || math.Abs(m.GetSampleSum()-e.Took.Seconds()) > 1e-9 {
			t.Errorf("step %s took %v by its event, observed %d times summing %vs, want once", e.Kind, e.Took, m.GetSampleCount(), m.GetSampleSum())
		}
	}
	for _, kind := range []string{cutover.KindDrained, cutover.KindEndOffsets, cutover.KindLagZero, cutover.KindReplStopped,
		cutover.KindGuardLifted, EventCompleted} {
		if _, ok := steps["step="+kind]; !ok {
			t.Errorf("no %s step observed; observed %v", kind, slices.Sorted(maps.Keys(steps)))
		}
	}
	if len(steps) != 6 {
		t.Errorf("steps observed: %v, want the completed cutover's 6", slices.Sorted(maps.Keys(steps)))
	}
	// The steps lie within the cutover: the first begins when the core
	// starts, after MIGRATING was stored, and the event saying COMPLETE is
	// stamped after the last ended.
	if sum <= 0 || sum > total {
		t.Errorf("the steps took %v in all, the cutover %v: they should lie within it", sum, total)
	}
}
