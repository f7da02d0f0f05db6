package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/baton-kafka/baton/controlplane/cutover"
	"github.com/baton-kafka/baton/controlplane/store"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
	"github.com/baton-kafka/baton/xds"
)

// topic is a topic as written at version v, every kind of field set.
func topic(name string, state migration.State, attempt int, v uint64) store.Topic {
	t := store.Topic{
		TopicSpec: store.TopicSpec{Name: name, State: state, Mode: "hold",
			Target: xds.Target{Namespaces: []string{"ns"}}, Shadow: store.Shadow{Headroom: true}},
		Version: v, Attempts: attempt, UpdatedAt: at(int(v % 60)), FenceAtCutover: true,
	}
	switch state {
	case migration.Migrating:
		t.Cutover = &store.Cutover{Attempt: attempt, Version: v, StartedAt: at(1), Deadline: at(2),
			Actor: "test", Step: cutover.StepRollingBack}
	case migration.Complete:
		t.SourceBatches = []replicator.SourceBatch{{Partition: 1, ProducerID: 7, BaseSeq: 3, Records: 2, Offset: 40}}
		t.CompletedAt = at(3)
	}
	return t
}

func testLoadEmpty(t *testing.T, impl Impl) {
	ctx := ctxOf(t)
	s := open(t, impl)
	if got := load(t, ctx, s); got.version != 0 || len(got.topics) != 0 || len(got.agents) != 0 {
		t.Errorf("Load of an empty store: version %d, topics %+v, agents %+v; want 0 and none", got.version, got.topics, got.agents)
	}
}

func testPutTopic(t *testing.T, impl Impl) {
	ctx := ctxOf(t)
	s := open(t, impl)
	a1, b, a2 := topic("a", migration.Proxy, 0, 1), topic("b", migration.Reject, 0, 2), topic("a", migration.Migrating, 1, 3)
	for i, w := range []store.Topic{a1, b, a2} {
		if err := s.PutTopic(ctx, w, uint64(i+1)); err != nil {
			t.Fatalf("PutTopic %s: %v", w.Name, err)
		}
	}
	got := load(t, ctx, s)
	if want := []store.Topic{a2, b}; got.version != 3 || !reflect.DeepEqual(got.topics, want) {
		t.Errorf("Load after PutTopic a, b, a again: version %d, topics %+v; want 3, %+v", got.version, got.topics, want)
	}
	if len(got.agents) != 0 {
		t.Errorf("Load after PutTopic: agents %+v, want none", got.agents)
	}
}

func testDeleteTopic(t *testing.T, impl Impl) {
	ctx := ctxOf(t)
	s := open(t, impl)
	a, b := topic("a", migration.Proxy, 0, 1), topic("b", migration.Proxy, 0, 2)
	for i, w := range []store.Topic{a, b} {
		if err := s.PutTopic(ctx, w, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteTopic(ctx, "a", 3); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	if got := load(t, ctx, s); got.version != 3 || !reflect.DeepEqual(got.topics, []store.Topic{b}) {
		t.Errorf("Load after DeleteTopic a: version %d, topics %+v; want 3, only b", got.version, got.topics)
	}
}

func testPutAgents(t *testing.T, impl Impl) {
	ctx := ctxOf(t)
	s := open(t, impl)
	agent := func(i int, acked uint64) store.Agent {
		return store.Agent{Node: fmt.Sprintf("node-%03d", i), Namespace: "ns", Workload: "w", AckedVersion: acked,
			LastHeartbeat: at(1), GrantedAt: at(2), ExpiresAt: at(3), Incarnation: uint64(i + 1),
			Topics: map[string]store.TopicDrain{"a": {InFlight: 2, AckedEnds: map[int32]int64{0: 9}}},
			Report: []byte{1, 2}}
	}
	// More agents than fit one etcd transaction of PutAgents.
	var first []store.Agent
	for i := range 150 {
		first = append(first, agent(i, 1))
	}
	if err := s.PutAgents(ctx, first); err != nil {
		t.Fatalf("PutAgents: %v", err)
	}
	// Again: two replaced, one new; the others are kept.
	if err := s.PutAgents(ctx, []store.Agent{agent(3, 2), agent(149, 2), agent(150, 2)}); err != nil {
		t.Fatalf("PutAgents: %v", err)
	}
	want := append(first, agent(150, 2))
	want[3], want[149] = agent(3, 2), agent(149, 2)
	got := load(t, ctx, s)
	if !reflect.DeepEqual(got.agents, want) {
		t.Errorf("Load after PutAgents: %d agents, want %d: %s", len(got.agents), len(want), diffAgents(got.agents, want))
	}
	if got.version != 0 || len(got.topics) != 0 {
		t.Errorf("Load after PutAgents only: version %d, topics %+v; want 0 and none", got.version, got.topics)
	}
}

// diffAgents names the first agent in which got and want differ.
func diffAgents(got, want []store.Agent) string {
	for i := range min(len(got), len(want)) {
		if !reflect.DeepEqual(got[i], want[i]) {
			return fmt.Sprintf("got %+v, want %+v", got[i], want[i])
		}
	}
	return "the lists differ in length"
}

// undecidedStep is one write of a PutTopicUndecided case.
type undecidedStep struct {
	op      string // "mark" (PutTopicUndecided without decide), "decide", "put" (PutTopic), "delete"
	topic   string
	attempt int
	refused bool // ErrDecided, nothing written
}

func testPutTopicUndecided(t *testing.T, impl Impl) {
	mark := func(topic string, attempt int) undecidedStep { return undecidedStep{"mark", topic, attempt, false} }
	decide := func(topic string, attempt int) undecidedStep { return undecidedStep{"decide", topic, attempt, false} }
	refused := func(s undecidedStep) undecidedStep { s.refused = true; return s }
	for _, tc := range []struct {
		name  string
		steps []undecidedStep
	}{
		{"unmarked writes until decided", []undecidedStep{mark("a", 1), mark("a", 1), mark("a", 1)}},
		{"a decision refuses the next of either kind", []undecidedStep{decide("a", 1), refused(decide("a", 1)), refused(mark("a", 1))}},
		// The rollback: StepRollingBack without deciding, then PROXY; a
		// late COMPLETE is refused.
		{"marked then decided", []undecidedStep{mark("a", 1), decide("a", 1), refused(decide("a", 1)), refused(mark("a", 1))}},
		{"attempts apart", []undecidedStep{decide("a", 1), mark("a", 2), decide("a", 2), refused(decide("a", 1)),
			refused(decide("a", 2)), decide("a", 3)}},
		{"topics apart", []undecidedStep{decide("a", 1), decide("b", 1), refused(mark("a", 1)), refused(mark("b", 1))}},
		{"PutTopic is not refused", []undecidedStep{decide("a", 1), {op: "put", topic: "a"}, refused(decide("a", 1))}},
		{"removal forgets decisions", []undecidedStep{decide("a", 1), {op: "delete", topic: "a"}, decide("a", 1),
			refused(decide("a", 1))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runUndecided(t, open(t, impl), tc.steps)
		})
	}
}

// runUndecided writes steps to s in turn, each at the next version, and
// checks what each returns and what Load finds after it.
func runUndecided(t *testing.T, s store.Store, steps []undecidedStep) {
	ctx := ctxOf(t)
	stored, version := map[string]store.Topic{}, uint64(0)
	for i, st := range steps {
		v := uint64(i + 1)
		desc := fmt.Sprintf("step %d (%s %s attempt %d)", i+1, st.op, st.topic, st.attempt)
		var err error
		switch st.op {
		case "put":
			w := topic(st.topic, migration.Complete, 0, v)
			if err = s.PutTopic(ctx, w, v); err == nil {
				stored[st.topic] = w
			}
		case "delete":
			if err = s.DeleteTopic(ctx, st.topic, v); err == nil {
				delete(stored, st.topic)
			}
		default:
			w := topic(st.topic, migration.Migrating, st.attempt, v)
			if st.op == "decide" {
				w = topic(st.topic, migration.Complete, st.attempt, v)
			}
			var got store.Topic
			got, err = s.PutTopicUndecided(ctx, w, v, st.attempt, st.op == "decide")
			switch {
			case st.refused && !errors.Is(err, store.ErrDecided):
				t.Fatalf("%s: %v, want ErrDecided", desc, err)
			case st.refused:
				if !reflect.DeepEqual(got, stored[st.topic]) {
					t.Errorf("%s: refused with %+v, want the topic as stored, %+v", desc, got, stored[st.topic])
				}
				err, v = nil, version
			case err == nil && !reflect.DeepEqual(got, w):
				t.Errorf("%s: returned %+v, want what it wrote, %+v", desc, got, w)
			case err == nil:
				stored[st.topic] = w
			}
		}
		if err != nil {
			t.Fatalf("%s: %v", desc, err)
		}
		version = v
		checkTopics(t, ctx, s, desc, version, stored)
	}
}

func checkTopics(t *testing.T, ctx context.Context, s store.Store, desc string, version uint64, stored map[string]store.Topic) {
	t.Helper()
	want := []store.Topic{}
	for _, name := range slices.Sorted(maps.Keys(stored)) {
		want = append(want, stored[name])
	}
	got := load(t, ctx, s)
	if got.version != version || len(got.topics) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got.topics, want)) {
		t.Fatalf("after %s: Load version %d, topics %+v; want %d, %+v", desc, got.version, got.topics, version, want)
	}
}
