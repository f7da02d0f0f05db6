package controlplane

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane/shadow"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
)

// measured is a replication whose destination latencies the test sets.
type measured struct {
	idleReplication
	mu sync.Mutex
	by map[string]replicator.Latency
}

var _ shadow.LatencySource = (*measured)(nil)

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
// emulation is on, at the current config version (an agent's lease is
// never refused for it), never for a topic that is not in PROXY or has
// emulation off, and shows it in the topic's status; switching emulation
// is a config change at a new version. When a profile is pushed again is
// the shadow job's (shadow.TestLatencyRefresh).
func TestLatencyPush(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := &measured{by: map[string]replicator.Latency{}}
	cp, err := New(ctx, WithStore(NewMemStore()), WithReplication(src), Logger(quiet),
		LatencyRefresh(10*time.Millisecond),
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
	wait.For(t, 10*time.Second, "t's route carries its profile", func() string {
		if p := profile("t"); p.GetP50().AsDuration() != 200*time.Millisecond || p.GetP99().AsDuration() != 400*time.Millisecond {
			return fmt.Sprintf("it carries %v", p)
		}
		return ""
	})
	if v := cp.Version(); v != version {
		t.Fatalf("config version %d, want %d: a latency push is no config change", v, version)
	}
	resp, err := cp.Heartbeat(ctx, &batonv1.HeartbeatRequest{NodeId: "a", AckedVersion: version})
	if err != nil || !resp.GetGranted() || resp.GetRequiredVersion() != version {
		t.Fatalf("an agent at version %d was not granted its lease: %v %v", version, resp, err)
	}
	for _, topic := range []string{"off", "rejected"} {
		if p := profile(topic); p != nil {
			t.Errorf("%s carries a profile: %v", topic, p)
		}
	}
	st, err := cp.Status("t")
	if err != nil || st.DestinationLatency == nil || st.DestinationLatency.P99 != 400*time.Millisecond {
		t.Errorf("status shows %+v (%v), want the pushed profile", st.DestinationLatency, err)
	}
	if st, err := cp.Status("rejected"); err != nil || st.DestinationLatency != nil {
		t.Errorf("status of rejected shows %+v (%v), want none", st.DestinationLatency, err)
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
