package controlplane

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-kafka/baton/migration"
)

// TestStateChangeRefusedMidCutover: a topic mid-cutover cannot be set to
// PROXY or REJECT, nor removed, through SetState (the HTTP API's state
// and DELETE): MIGRATING ends in COMPLETE, the rollback's PROXY or an
// abort. Before, Transition's MIGRATING -> PROXY (the rollback's) let the
// state endpoint write PROXY under a running cutover, with no decision,
// no replication restart and no guard restore.
func TestStateChangeRefusedMidCutover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newMemRepl()
	p := startMemPlane(t, ctx, NewMemStore(), "", r)
	holder := startAgent(t, ctx, p.addr, "holder")
	const topic = "held"
	r.produce(topic, 10)
	if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: topic}, "test"); err != nil {
		t.Fatal(err)
	}
	waitLeases(t, ctx, p, holder)
	holder.mu.Lock()
	holder.stuck = true // the cutover waits on it until aborted
	holder.mu.Unlock()
	migrateWhenGateOpens(t, ctx, p, topic)
	wantEvents(t, ctx, p, topic, EventInitiated, EventWaitingOnAgent)

	for _, tc := range []struct {
		name string
		call func() (Topic, error)
	}{
		{"PROXY", func() (Topic, error) { return p.cp.SetState(ctx, topic, migration.Proxy, "operator") }},
		{"REJECT", func() (Topic, error) { return p.cp.SetState(ctx, topic, migration.Reject, "operator") }},
		{"removed", func() (Topic, error) { return p.cp.SetState(ctx, topic, migration.Unmanaged, "operator") }},
		{"removed by force", func() (Topic, error) { return p.cp.RemoveTopic(ctx, topic, "operator", true) }},
	} {
		_, err := tc.call()
		if !errors.Is(err, ErrCutoverRunning) || !strings.Contains(err.Error(), "baton topic abort "+topic) {
			t.Errorf("%s mid-cutover: %v; want ErrCutoverRunning naming the abort", tc.name, err)
		}
	}
	if got, _ := p.cp.Topic(topic); got.State != migration.Migrating || got.Cutover == nil {
		t.Fatalf("after the refusals the topic is %s (cutover %v), want MIGRATING with its cutover", got.State, got.Cutover)
	}
	if got, err := p.cp.Abort(ctx, topic, "operator", "test"); err != nil || got.State != migration.Proxy {
		t.Fatalf("abort: %v, %v", got.State, err)
	}
	wantEvents(t, ctx, p, topic, EventAborted, EventRolledBack)
}
