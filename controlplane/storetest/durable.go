package storetest

import (
	"errors"
	"reflect"
	"testing"

	"github.com/baton-kafka/baton/controlplane/store"
	"github.com/baton-kafka/baton/migration"
)

func testClose(t *testing.T, impl Impl) {
	s := impl.Open(t)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close again: %v", err)
	}
}

// testDurable: what a store kept is there again after Close and Reopen, a
// decided attempt stays decided, and events are numbered on above the
// kept ones.
func testDurable(t *testing.T, impl Impl) {
	ctx := ctxOf(t)
	s := open(t, impl)
	a, b := topic("a", migration.Complete, 1, 2), topic("b", migration.Proxy, 0, 3)
	if err := s.PutTopic(ctx, topic("a", migration.Migrating, 1, 1), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutTopicUndecided(ctx, a, 2, 1, true); err != nil {
		t.Fatal(err)
	}
	if err := s.PutTopic(ctx, b, 3); err != nil {
		t.Fatal(err)
	}
	agents := []store.Agent{{Node: "n1", AckedVersion: 3, GrantedAt: at(4)}, {Node: "n2", AckedVersion: 2, ExpiresAt: at(5)}}
	if err := s.PutAgents(ctx, agents); err != nil {
		t.Fatal(err)
	}
	evs := appendEvents(t, ctx, s, 0, "a", "b", "a")
	before := load(t, ctx, s)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s = impl.Reopen(t, s)
	t.Cleanup(func() { _ = s.Close() })
	if got := load(t, ctx, s); !reflect.DeepEqual(got, before) {
		t.Errorf("Load after a reopen: %+v, want what was stored before, %+v", got, before)
	}
	if got, err := s.Events(ctx, "", 0); err != nil || !reflect.DeepEqual(got, evs) {
		t.Errorf("Events after a reopen: %+v, %v; want %+v", got, err, evs)
	}
	if next := appendEvents(t, ctx, s, 3, "b")[0]; next.Seq <= evs[len(evs)-1].Seq {
		t.Errorf("after a reopen AppendEvent numbered %d, not above the kept %d", next.Seq, evs[len(evs)-1].Seq)
	}
	got, err := s.PutTopicUndecided(ctx, topic("a", migration.Proxy, 1, 4), 4, 1, true)
	if !errors.Is(err, store.ErrDecided) || !reflect.DeepEqual(got, a) {
		t.Errorf("after a reopen, a decided attempt decided again: %+v, %v; want ErrDecided and %+v", got, err, a)
	}
}
