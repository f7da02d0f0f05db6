package controlplane

import (
	"context"
	"sync"
	"testing"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
)

// measured is a replication whose destination latencies the test sets.
type measured struct {
	idleReplication
	mu sync.Mutex
	by map[string]replicator.Latency
}

var _ LatencySource = (*measured)(nil)

func (m *measured) DestinationLatency(topic string) (replicator.Latency, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.by[topic]
	return l, ok
}

func (m *measured) set(topic string, p50, p99 time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.by[topic] = replicator.Latency{P50: p50, P99: p99, Samples: 100}
}

// The control plane pushes a PROXY topic's destination latency when latency
// emulation is on, again only when p50 or p99 moved by more than 10 % or
// the pushed one is a minute old, always at the current config version (an
// agent's lease is never refused for it), and never for a topic that is
// not in PROXY or has emulation off; switching emulation is a config change
// at a new version.
func TestLatencyPush(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var clockMu sync.Mutex
	clock := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	advance := func(d time.Duration) { clockMu.Lock(); now = now.Add(d); clockMu.Unlock() }
	src := &measured{by: map[string]replicator.Latency{}}
	cp, err := New(ctx, WithStore(NewMemStore()), WithReplication(src), Clock(clock), Logger(quiet),
		LatencyRefresh(time.Hour), // the test ticks by hand
		Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	on := Shadow{LatencyEmulation: true}
	for _, spec := range []TopicSpec{
		{Name: "t", State: migration.Proxy, Shadow: on},
		{Name: "off", State: migration.Proxy},
		{Name: "rejected", State: migration.Reject, Shadow: on},
	} {
		if _, err := cp.AddTopic(ctx, spec, "test"); err != nil {
			t.Fatal(err)
		}
		src.set(spec.Name, 200*time.Millisecond, 400*time.Millisecond)
	}
	version := cp.Version()
	profile := func(topic string) *batonv1.LatencyProfile {
		cp.mu.Lock()
		defer cp.mu.Unlock()
		return cp.route(cp.topics[topic]).GetDestinationLatency()
	}
	step := func(what string, p50, p99 time.Duration, wantP50 time.Duration, wantAt time.Time) {
		t.Helper()
		src.set("t", p50, p99)
		cp.refreshLatency(src)
		p := profile("t")
		if p.GetP50().AsDuration() != wantP50 || !p.GetMeasuredAt().AsTime().Equal(wantAt) {
			t.Fatalf("%s: route carries %v, want p50 %v measured at %v", what, p, wantP50, wantAt)
		}
		if v := cp.Version(); v != version {
			t.Fatalf("%s: config version %d, want %d: a latency push is no config change", what, v, version)
		}
		resp, err := cp.Heartbeat(ctx, &batonv1.HeartbeatRequest{NodeId: "a", AckedVersion: version})
		if err != nil || !resp.GetGranted() || resp.GetRequiredVersion() != version {
			t.Fatalf("%s: an agent at version %d was not granted its lease: %v %v", what, version, resp, err)
		}
	}
	if p := profile("t"); p != nil {
		t.Fatalf("a profile before any was measured: %v", p)
	}
	t0 := clock()
	step("first measurement", 200*time.Millisecond, 400*time.Millisecond, 200*time.Millisecond, t0)
	advance(5 * time.Second)
	step("5 % change", 210*time.Millisecond, 380*time.Millisecond, 200*time.Millisecond, t0)
	advance(5 * time.Second)
	step("p99 up 20 %", 210*time.Millisecond, 480*time.Millisecond, 210*time.Millisecond, clock())
	t1 := clock()
	advance(LatencyMaxAge - time.Second)
	step("unchanged, younger than the max age", 210*time.Millisecond, 480*time.Millisecond, 210*time.Millisecond, t1)
	advance(time.Second)
	step("unchanged, max age reached", 210*time.Millisecond, 480*time.Millisecond, 210*time.Millisecond, clock())
	for _, topic := range []string{"off", "rejected"} {
		if p := profile(topic); p != nil {
			t.Errorf("%s carries a profile: %v", topic, p)
		}
	}
	st, err := cp.Status("t")
	if err != nil || st.DestinationLatency == nil || st.DestinationLatency.P99 != 480*time.Millisecond {
		t.Errorf("status shows %+v (%v), want the pushed profile", st.DestinationLatency, err)
	}

	off := false
	if _, err := cp.SetShadow(ctx, "t", ShadowChange{LatencyEmulation: &off}, "test"); err != nil {
		t.Fatal(err)
	}
	if cp.Version() != version+1 {
		t.Errorf("switching emulation off: version %d, want %d", cp.Version(), version+1)
	}
	if p := profile("t"); p != nil {
		t.Errorf("emulation off, the route still carries %v", p)
	}
}
