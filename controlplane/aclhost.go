package controlplane

import (
	"context"
	"fmt"

	"github.com/baton-kafka/baton/controlplane/acl"
	"github.com/baton-kafka/baton/migration"
)

// The destination write guard and the source fence are package acl's
// job: acl.Guard and acl.Fence build them from Kafka ACLs, and acl.Keeper
// restores the guard in the background, serializes it with the cutover's
// Lift and says what a topic promises of the fence. aclHost is what the
// keeper sees of the control plane.

// WriteGuard keeps writers other than the replicator off D.T until COMPLETE
// (docs/design.md §11). Its implementation on Kafka ACLs is acl.Guard.
type WriteGuard interface {
	// Protect denies writes to topic on the destination except the
	// replicator's. Idempotent.
	Protect(ctx context.Context, topic string) error
	// Lift allows producers to write topic on the destination.
	Lift(ctx context.Context, topic string) error
}

// NoGuard is the WriteGuard that guards nothing: for a destination
// without an authorizer, one whose every client (the replicator too) is
// User:ANONYMOUS, or a guard turned off. The agents (which never route a
// topic to D before COMPLETE) are then the only guard: a producer that
// bypasses them can write D.T early, and the replicator then reports
// ErrDestinationDiverged. The control plane says so at start, at WARN,
// with Why and Remedy.
type NoGuard struct {
	// Why there is no guard (default: "the destination has no
	// authorizer, or the guard is off (--write-guard=none)").
	Why string
	// Remedy is what would give one (default: enable an authorizer on
	// the destination, with SASL for the replicator).
	Remedy string
}

// SourceFence keeps every producer off a topic on the source from a
// cutover on (docs/design.md §6.1). With it up, the cutover no longer
// depends on agents' leases to know the source's log is final: what
// reaches the source after it is refused, whoever sends it. Its
// implementation on Kafka ACLs is acl.Fence.
type SourceFence interface {
	// Fence denies writes to topic on the source. Idempotent.
	Fence(ctx context.Context, topic string) error
	// Enforced reports whether every source broker enforces the fence on
	// topic now; when not, behind says which brokers do not yet.
	Enforced(ctx context.Context, topic string) (ok bool, behind string, err error)
	// Lift removes what Fence created, and nothing else.
	Lift(ctx context.Context, topic string) error
}

// NoFence is the SourceFence of a source without an authorizer (or with
// --source-fence=none): the agents' leases alone end writes to the source
// before a cutover reads its end offsets.
type NoFence struct{}

var (
	_ WriteGuard    = NoGuard{}
	_ WriteGuard    = (*acl.Guard)(nil)
	_ SourceFence   = NoFence{}
	_ SourceFence   = (*acl.Fence)(nil)
	_ acl.Protector = WriteGuard(nil)
	_ acl.Lifter    = SourceFence(nil)
	_ acl.View      = aclHost{}
	_ acl.Recorder  = aclHost{}
)

// Protect implements WriteGuard.
func (NoGuard) Protect(context.Context, string) error { return nil }

// Lift implements WriteGuard.
func (NoGuard) Lift(context.Context, string) error { return nil }

// warning is what the control plane logs at start without a guard: why,
// what it means, and what to do.
func (g NoGuard) warning() string {
	why, remedy := g.Why, g.Remedy
	if why == "" {
		why = "the destination has no authorizer, or the guard is off (--write-guard=none)"
	}
	if remedy == "" {
		remedy = "Enable an authorizer on the destination (with SASL for the replicator) to have Baton deny such writes"
	}
	return "the destination write guard protects nothing: " + why + ". Only the agents keep producers off a topic on " +
		"the destination before its cutover; a client writing the destination directly diverges it, and its cutover is " +
		"then refused. " + remedy
}

// Fence implements SourceFence: with nothing to fence with, it refuses.
func (NoFence) Fence(context.Context, string) error { return ErrNoSourceFence }

// Enforced implements SourceFence.
func (NoFence) Enforced(context.Context, string) (bool, string, error) {
	return false, "", ErrNoSourceFence
}

// Lift implements SourceFence. It is asked only to lift the fence of a
// rolled-back cutover that a control plane with a fence put up
// (SourceFenceUp): without one it cannot, and says what to do instead.
func (NoFence) Lift(_ context.Context, topic string) error {
	return fmt.Errorf("%w: %s is fenced on the source since a cutover that was rolled back, and this control plane "+
		"runs without a source fence: restart it with --source-fence=acl, or delete the DENY WRITE ACL for User:* on "+
		"topic %s on the source", ErrNoSourceFence, topic, topic)
}

// GuardRestore is a pending write-guard restore as status shows it.
type GuardRestore = acl.Restore

// fenced reports whether the control plane runs with a source fence.
func (c *config) fenced() bool {
	_, none := c.fence.(NoFence)
	return !none
}

// failedRestore is topic's queued write-guard restore if an attempt at it
// failed (nil: none; one not tried yet is routine, every resync queues
// one).
func failedRestore(k *acl.Keeper, topic string) *GuardRestore {
	if g, ok := k.Pending(topic); ok && g.Failures > 0 {
		return &g
	}
	return nil
}

// newKeeper is cp's ACL keeper.
func newKeeper(cp *ControlPlane) *acl.Keeper {
	return acl.NewKeeper(acl.Deps{View: aclHost{cp}, Recorder: aclHost{cp}, Guard: cp.cfg.guard, Fence: cp.cfg.fence,
		Fenced: cp.cfg.fenced(), Log: cp.log, Now: cp.now, Timeout: cp.cfg.timeout, Poll: cp.cfg.poll,
		Resync: cp.cfg.guardResync, Lease: cp.cfg.lease, Forward: cp.cfg.forward})
}

// aclHost is the control plane as the ACL keeper sees it.
type aclHost struct{ cp *ControlPlane }

func aclTopic(t *Topic) acl.Topic {
	return acl.Topic{Name: t.Name, State: t.State, FenceAtCutover: t.FenceAtCutover, SourceFenceUp: t.SourceFenceUp}
}

// Topic implements acl.View.
func (h aclHost) Topic(name string) (acl.Topic, bool) {
	t, err := h.cp.Topic(name)
	return aclTopic(&t), err == nil
}

// Topics implements acl.View.
func (h aclHost) Topics() []acl.Topic {
	ts := h.cp.Topics()
	out := make([]acl.Topic, len(ts))
	for i := range ts {
		out[i] = aclTopic(&ts[i])
	}
	return out
}

// LastRemoval implements acl.View.
func (h aclHost) LastRemoval(ctx context.Context, topic string) (acl.Removal, bool, error) {
	evs, err := h.cp.store.Events(ctx, topic, 0)
	if err != nil {
		return acl.Removal{}, false, fmt.Errorf("controlplane: reading %s's events: %w", topic, err)
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if e := evs[i]; e.Kind == EventRemoved {
			return acl.Removal{At: e.Time, FenceAtCutover: e.FenceAtCutover}, true, nil
		}
	}
	return acl.Removal{}, false, nil
}

// FenceLifted implements acl.Recorder: SourceFenceUp is not in the
// routes, so it is stored at the current version, unpublished.
func (h aclHost) FenceLifted(ctx context.Context, topic string) (bool, error) {
	return h.update(ctx, topic, false, func(t *Topic) bool {
		up := t.SourceFenceUp
		t.SourceFenceUp = false
		return up
	})
}

// PromiseFence implements acl.Recorder.
func (h aclHost) PromiseFence(ctx context.Context, topic string) error {
	_, err := h.update(ctx, topic, true, func(t *Topic) bool {
		promised := t.FenceAtCutover
		t.FenceAtCutover = true
		return !promised
	})
	if err != nil {
		return fmt.Errorf("controlplane: storing %s's source fence: %w", topic, err)
	}
	return nil
}

// update stores a REJECT or PROXY topic as change leaves it, if it
// changed it (stored false: it did not, or the topic is in neither
// state): published at the next version, or without publish at the
// current one.
func (h aclHost) update(ctx context.Context, name string, publish bool, change func(*Topic) bool) (stored bool, err error) {
	cp := h.cp
	cp.mu.Lock()
	defer cp.mu.Unlock()
	t, ok := cp.topics[name]
	if !ok || (t.State != migration.Reject && t.State != migration.Proxy) {
		return false, nil
	}
	nt := *t // a new Topic: the copies Topics hands out share the pointer
	if !change(&nt) {
		return false, nil
	}
	if publish {
		err = cp.commitLocked(ctx, nt, false)
	} else if err = cp.store.PutTopic(ctx, nt, cp.version); err == nil {
		cp.topics[name] = &nt
	}
	return err == nil, err
}

// Record implements acl.Recorder.
func (h aclHost) Record(ctx context.Context, e acl.Event) {
	h.cp.event(ctx, Event{Topic: e.Topic, Kind: e.Kind, Actor: ActorControlPlane, Reason: e.Reason})
}
