package acl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-kafka/baton/internal/testlog"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
)

// The rollback's source-fence lift runs in the restore loop, whose rounds
// end at the first failure ("the destination is likely down for all"). A
// lift that keeps failing for one topic, for a reason of the source's (its
// admin refused, or a leader without a fence), must not keep every topic
// after it from having its destination write guard restored.
func TestFailingFenceLiftBlocksNoOtherGuardRestore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fence Lifter
		up    bool // the first topic's fence is up since a rolled-back cutover
	}{
		{"no fence to lift (control case)", lifter{}, false},
		// The control plane's NoFence: it cannot lift, and says so.
		{"a leader without a source fence", lifter{errors.New("no source fence: restart with --source-fence=acl")}, true},
		{"the source refuses the lift", lifter{fmt.Errorf("%w: lifting: CLUSTER_AUTHORIZATION_FAILED", ErrFence)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			h := newHost(Topic{Name: "a-rolled-back", State: migration.Proxy, FenceAtCutover: true, SourceFenceUp: tc.up},
				Topic{Name: "b-rolled-back", State: migration.Proxy, FenceAtCutover: true})
			guard := &protections{}
			k := newTestKeeper(h, guard, tc.fence, nil)
			done := make(chan struct{})
			go func() { defer close(done); k.Run(ctx) }()
			defer func() { cancel(); <-done }()
			for _, top := range h.Topics() {
				k.Restore(top.Name, false) // as the control plane does at start
			}
			wait.For(t, 30*time.Second, "b-rolled-back's write guard restored", func() string {
				if guard.count("b-rolled-back") == 0 {
					return fmt.Sprintf("not restored (a-rolled-back's Protect called %d times): a-rolled-back's failing "+
						"fence lift ends every round before it", guard.count("a-rolled-back"))
				}
				return ""
			})
		})
	}
}

// Each part of a failed restore is logged and recorded as what it is: a
// source fence lifted whose store failed is no failure of the destination
// write guard (nor of the lift).
func TestRestoreFailureSaysWhatFailed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fence   Lifter
		storeF  error
		guardF  error
		want    string // in the log and the event
		notWant []string
	}{
		{"the lift", lifter{fmt.Errorf("%w: CLUSTER_AUTHORIZATION_FAILED", ErrFence)}, nil, nil,
			"lifting the source fence", []string{"destination write guard", "storing"}},
		{"storing the lift", lifter{}, errors.New("etcd: not the leader"), nil,
			"storing that failed", []string{"destination write guard", "lifting the source fence:"}},
		{"the guard", lifter{}, nil, errors.New("destination down"),
			"restoring the destination write guard", []string{"source fence"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHost(Topic{Name: "orders", State: migration.Proxy, SourceFenceUp: true})
			h.liftErr = tc.storeF
			guard := &protections{protect: func(string) error { return tc.guardF }}
			logs := &testlog.Buffer{}
			k := newTestKeeper(h, guard, tc.fence, logs)
			k.Restore("orders", true)
			if ok, destination := k.restoreOne(context.Background(), "orders"); ok || destination != (tc.guardF != nil) {
				t.Fatalf("restoreOne: ok %v, destination %v", ok, destination)
			}
			var failed []Event
			for _, e := range h.events {
				if e.Kind == EventGuardRestoreFailed {
					failed = append(failed, e)
				}
			}
			if len(failed) != 1 {
				t.Fatalf("events %v, want one %s", h.kinds("orders"), EventGuardRestoreFailed)
			}
			for what, text := range map[string]string{"log": logs.String(), "event": failed[0].Reason} {
				if !strings.Contains(text, tc.want) {
					t.Errorf("the %s does not say %q: %s", what, tc.want, text)
				}
				for _, n := range tc.notWant {
					if strings.Contains(text, n) {
						t.Errorf("the %s says %q: %s", what, n, text)
					}
				}
			}
			if g, ok := k.Pending("orders"); !ok || g.Failures != 1 || g.LastErr == "" {
				t.Errorf("pending %+v, %v: want 1 failure with its error", g, ok)
			}
		})
	}
}

// A restore that succeeds lifts the rolled-back cutover's fence, records
// it lifted, protects the destination, says guard_restored when asked to,
// and is no longer pending; a topic that left REJECT and PROXY is dropped
// unprotected.
func TestRestoreSettles(t *testing.T) {
	t.Parallel()
	h := newHost(Topic{Name: "orders", State: migration.Proxy, SourceFenceUp: true},
		Topic{Name: "moving", State: migration.Migrating})
	guard := &protections{}
	k := newTestKeeper(h, guard, lifter{}, nil)
	k.Restore("orders", true)
	k.Restore("moving", false)
	for _, n := range []string{"orders", "moving"} {
		if ok, _ := k.restoreOne(context.Background(), n); !ok {
			t.Fatalf("%s: restoreOne failed", n)
		}
		if _, ok := k.Pending(n); ok {
			t.Errorf("%s still pending", n)
		}
	}
	if got, want := h.kinds("orders"), []string{EventSourceFenceLifted, EventGuardRestored}; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	if top, _ := h.Topic("orders"); top.SourceFenceUp {
		t.Error("SourceFenceUp still stored")
	}
	if guard.count("orders") != 1 || guard.count("moving") != 0 {
		t.Errorf("Protect calls: orders %d (want 1), moving %d (want 0)", guard.count("orders"), guard.count("moving"))
	}
}

// A restore queued again while an attempt ran (a rollback right after the
// attempt found the topic MIGRATING) is not settled by that attempt: the
// next one protects the topic and says guard_restored.
func TestRestoreQueuedDuringAnAttemptStays(t *testing.T) {
	t.Parallel()
	h := newHost(Topic{Name: "orders", State: migration.Migrating})
	guard := &protections{}
	k := newTestKeeper(h, guard, lifter{}, nil)
	h.onTopic = func(n int, top Topic, ok bool) (Topic, bool) {
		if n == 2 { // the attempt's own read was MIGRATING; now it is rolled back
			h.mu.Lock()
			h.topics["orders"] = Topic{Name: "orders", State: migration.Proxy}
			h.mu.Unlock()
			k.Restore("orders", true)
		}
		return top, ok
	}
	k.Restore("orders", false)
	if ok, _ := k.restoreOne(context.Background(), "orders"); !ok {
		t.Fatal("restoreOne failed")
	}
	if _, ok := k.Pending("orders"); !ok {
		t.Fatal("the rollback's restore was dropped by an attempt that found the topic MIGRATING")
	}
	if guard.count("orders") != 0 {
		t.Fatalf("%d Protect calls of a MIGRATING topic", guard.count("orders"))
	}
	if ok, _ := k.restoreOne(context.Background(), "orders"); !ok {
		t.Fatal("the next restoreOne failed")
	}
	if _, ok := k.Pending("orders"); ok || guard.count("orders") != 1 {
		t.Errorf("after the next attempt: pending %v, %d Protect calls (want settled, 1)", ok, guard.count("orders"))
	}
	if got := h.kinds("orders"); !slices.Equal(got, []string{EventGuardRestored}) {
		t.Errorf("events %v, want %s", got, EventGuardRestored)
	}
}

// A restore reads the topic's state under the lock LiftGuard holds: once
// the cutover's Lift began (the topic MIGRATING since before it), no
// Protect starts.
func TestNoProtectOnceTheLiftBegan(t *testing.T) {
	t.Parallel()
	h := newHost(Topic{Name: "orders", State: migration.Proxy})
	entered, release := make(chan struct{}), make(chan struct{})
	guard := &liftBlocks{entered: entered, release: release}
	k := newTestKeeper(h, guard, lifter{}, nil)
	k.Restore("orders", false)
	h.mu.Lock()
	h.topics["orders"] = Topic{Name: "orders", State: migration.Migrating} // Migrate stored MIGRATING
	h.mu.Unlock()
	lifted := make(chan error, 1)
	go func() { lifted <- k.LiftGuard(context.Background(), "orders") }()
	<-entered
	restored := make(chan struct{})
	go func() { defer close(restored); k.restoreOne(context.Background(), "orders") }()
	close(release)
	if err := <-lifted; err != nil {
		t.Fatal(err)
	}
	<-restored
	if n := guard.count("orders"); n != 0 {
		t.Errorf("%d Protect calls after the cutover's Lift began", n)
	}
}

// liftBlocks is a write guard whose Lift signals entered and waits for
// release.
type liftBlocks struct {
	protections
	entered, release chan struct{}
}

func (g *liftBlocks) Lift(context.Context, string) error {
	close(g.entered)
	<-g.release
	return nil
}

// Adding: with a fence every topic promises it; without, a topic removed
// while its routes promised it keeps the promise for a lease +
// UnleasedForward + F, and no longer.
func TestAddingKeepsTheRemovedPromise(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	kept := migration.DefaultLease + migration.UnleasedForward + migration.DefaultForwardDeadline
	for _, tc := range []struct {
		name    string
		fenced  bool
		removal *Removal
		want    bool
	}{
		{"with a fence", true, nil, true},
		{"never removed", false, nil, false},
		{"removed promising, recently", false, &Removal{At: now.Add(-kept + time.Second), FenceAtCutover: true}, true},
		{"removed promising, long ago", false, &Removal{At: now.Add(-kept), FenceAtCutover: true}, false},
		{"removed without a promise", false, &Removal{At: now, FenceAtCutover: false}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHost()
			if tc.removal != nil {
				h.removed["orders"] = *tc.removal
			}
			k := newTestKeeper(h, &protections{}, lifter{}, nil)
			k.d.Fenced, k.d.Now = tc.fenced, func() time.Time { return now }
			promised, leftUp, err := k.Adding(context.Background(), "orders")
			if err != nil || promised != tc.want || leftUp {
				t.Errorf("Adding: promised %v, leftUp %v, %v; want %v, false", promised, leftUp, err, tc.want)
			}
		})
	}
}
