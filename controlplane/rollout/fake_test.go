package rollout

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/migration"
)

// fakePlane is a Plane in memory: Migrate takes a PROXY topic to
// MIGRATING, where it stays until the test completes it, unless refuse
// says it refuses the topic (as a cutover gate would).
type fakePlane struct {
	skew atomic.Int64 // added to time.Now: the clock the test moves on

	mu     sync.Mutex
	topics map[string]controlplane.Topic
	agents map[string]controlplane.Agent
	// refuse is, per topic, how many more of its migrates are refused.
	refuse map[string]int
}

var _ Plane = (*fakePlane)(nil)

func newFakePlane(topics ...string) *fakePlane {
	f := &fakePlane{topics: map[string]controlplane.Topic{}, agents: map[string]controlplane.Agent{}, refuse: map[string]int{}}
	for _, t := range topics {
		f.topics[t] = controlplane.Topic{TopicSpec: controlplane.TopicSpec{Name: t, State: migration.Proxy}}
	}
	return f
}

func (f *fakePlane) now() time.Time { return time.Now().Add(time.Duration(f.skew.Load())) }

func (f *fakePlane) Version() uint64 { return 1 }

func (f *fakePlane) Topics() []controlplane.Topic {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]controlplane.Topic, 0, len(f.topics))
	for _, t := range f.topics {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b controlplane.Topic) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (f *fakePlane) Topic(name string) (controlplane.Topic, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.topics[name]
	if !ok {
		return controlplane.Topic{}, fmt.Errorf("%w: %s", controlplane.ErrUnknownTopic, name)
	}
	return t, nil
}

func (f *fakePlane) Agents() []controlplane.AgentView {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []controlplane.AgentView{}
	for _, a := range f.agents {
		out = append(out, controlplane.AgentView{Agent: a, LeaseValid: f.now().Before(a.ExpiresAt)})
	}
	return out
}

func (f *fakePlane) LastBypass(string) (time.Time, string, bool) { return time.Time{}, "", false }

func (f *fakePlane) Migrate(_ context.Context, name, _ string, _ ...controlplane.Gate) (controlplane.Topic, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.topics[name]
	switch {
	case !ok:
		return controlplane.Topic{}, fmt.Errorf("%w: %s", controlplane.ErrUnknownTopic, name)
	case t.State != migration.Proxy:
		return controlplane.Topic{}, fmt.Errorf("%w: %s is %s", controlplane.ErrIllegalTransition, name, t.State)
	case f.refuse[name] > 0:
		f.refuse[name]--
		return controlplane.Topic{}, fmt.Errorf("%w: %s: the time lag is not measured yet", controlplane.ErrGateRefused, name)
	}
	t.State = migration.Migrating
	f.topics[name] = t
	return t, nil
}

// complete makes topic COMPLETE now.
func (f *fakePlane) complete(topic string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.topics[topic]
	t.State, t.CompletedAt = migration.Complete, f.now()
	f.topics[topic] = t
}

// lease makes node an agent of namespace holding a lease for d from now.
func (f *fakePlane) lease(node, namespace string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.agents[node] = controlplane.Agent{Node: node, Namespace: namespace, Workload: "app", ExpiresAt: f.now().Add(d)}
}

// fakeRollout is a Job of a fakePlane on its clock, with its Writers.
func fakeRollout(t *testing.T, f *fakePlane, opts ...Opt) (*Job, *Writers) {
	t.Helper()
	w := &Writers{}
	j, err := New(f, w, append([]Opt{Clock(f.now)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return j, w
}

// wrote is a heartbeat of node reporting a write to the source of each of
// topics, and one of a topic it routes but did not write ("routed").
func wrote(node string, topics ...string) *batonv1.HeartbeatRequest {
	req := &batonv1.HeartbeatRequest{NodeId: node, Topics: []*batonv1.TopicDrain{{Topic: "routed"}}}
	for _, t := range topics {
		req.Topics = append(req.Topics, &batonv1.TopicDrain{Topic: t, Writes: []*batonv1.PartitionWrites{{Partition: 0,
			Acked: []*batonv1.OffsetRange{{Start: 0, End: 1}}}}})
	}
	return req
}

func stayedTopics(ss []WaveStay) []string {
	out := []string{}
	for _, s := range ss {
		out = append(out, s.Topic)
	}
	return out
}
