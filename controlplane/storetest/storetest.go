// Package storetest owns the conformance suite of store.Store:
// what every store must do, checked against each implementation (the etcd
// store and the in-memory test double) by Run.
//
// The contract, for a Store s that Run opens empty:
//
//   - Load of an empty store MUST return version 0, no topics and no
//     agents. Load MUST return the config version last written (by
//     PutTopic, a PutTopicUndecided that wrote, or DeleteTopic), every
//     topic stored, each as last written, and every agent stored, each as
//     last written; the order of topics and agents is not part of it.
//   - PutTopic MUST store t under t.Name, replacing what was there, and the
//     version, together. A decided cutover attempt MUST NOT refuse it.
//   - PutTopicUndecided MUST write t and the version, and return t, while
//     nothing was decided for (t.Name, attempt); with decide it MUST also
//     decide that attempt. Once an attempt is decided, every later
//     PutTopicUndecided of it, with decide or without, MUST write nothing
//     (the version stays) and return the topic as stored with an error
//     that is ErrDecided: the control plane's COMPLETE and its rollback's
//     PROXY are both written with decide, after the rollback marked its
//     start without (controlplane/cutover.go), so whichever decides first
//     stands and the other learns it. A decision MUST concern only its
//     topic and its attempt.
//   - DeleteTopic MUST remove the topic, write the version, and forget
//     the topic's decided attempts: a topic added again counts its
//     attempts from 1.
//   - PutAgents MUST store each agent under its Node, replacing what was
//     there, and keep every agent it was not given; it writes no version.
//   - AppendEvent MUST return e with Seq set to a number above 0 and above
//     that of every event appended before, and keep e otherwise as given.
//   - Events MUST return, oldest first, the events with Seq above after,
//     of topic ("" for every topic), each as AppendEvent returned it.
//   - Follow MUST send on its channel, in order, the events Events would
//     return, then each event of topic ("" for all) appended later, once
//     and in order, until ctx ends; then it MUST close the channel.
//   - Close MUST release the store; a second Close MUST return nil too.
//   - A durable store (Impl.Reopen set) MUST keep, across Close and a
//     reopen, all of the above: version, topics, agents, events, the
//     decided attempts, and sequence numbers above every one given out.
//
// What a store does when it cannot write (MemStore.SetUnavailable, an
// EtcdStore whose leader term ended) differs by implementation and is
// tested with each.
package storetest

import (
	"cmp"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/baton-kafka/baton/controlplane/store"
)

// Impl is a Store implementation under test.
type Impl struct {
	// Open returns a new, empty store for one subtest. Required. Run
	// closes it when the subtest ends.
	Open func(t *testing.T) store.Store
	// Reopen returns the store s, which Run has closed, opened again on
	// what it kept. Nil: the store is not durable, and the durability
	// subtest is not run.
	Reopen func(t *testing.T, s store.Store) store.Store
}

// wait bounds every wait of a subtest for the store: a store that
// never delivers fails instead of hanging the test binary.
const wait = time.Minute

// Run runs the conformance suite against impl, every subtest in parallel
// on a store of its own.
func Run(t *testing.T, impl Impl) {
	tests := []struct {
		name string
		run  func(t *testing.T, impl Impl)
	}{
		{"LoadEmpty", testLoadEmpty},
		{"PutTopic", testPutTopic},
		{"PutTopicUndecided", testPutTopicUndecided},
		{"DeleteTopic", testDeleteTopic},
		{"PutAgents", testPutAgents},
		{"AppendEvent", testAppendEvent},
		{"Events", testEvents},
		{"Follow", testFollow},
		{"Close", testClose},
	}
	if impl.Reopen != nil {
		tests = append(tests, struct {
			name string
			run  func(t *testing.T, impl Impl)
		}{"Durable", testDurable})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, impl)
		})
	}
}

// open opens a store that is closed when t ends.
func open(t *testing.T, impl Impl) store.Store {
	t.Helper()
	s := impl.Open(t)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	t.Cleanup(cancel)
	return ctx
}

// at is a time that survives any encoding a store may use.
func at(sec int) time.Time { return time.Date(2025, 3, 4, 5, 6, sec, 789, time.UTC) }

type loaded struct {
	version uint64
	topics  []store.Topic
	agents  []store.Agent
}

// load loads s, topics sorted by name and agents by node.
func load(t *testing.T, ctx context.Context, s store.Store) loaded {
	t.Helper()
	v, topics, agents, err := s.Load(ctx)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	slices.SortFunc(topics, func(a, b store.Topic) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(agents, func(a, b store.Agent) int { return cmp.Compare(a.Node, b.Node) })
	return loaded{v, topics, agents}
}
