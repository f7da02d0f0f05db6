package controlplane

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/baton-kafka/baton/controlplane/acl"
	"github.com/baton-kafka/baton/migration"
)

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
	_ SourceFence   = NoFence{}
	_ SourceFence   = (*acl.Fence)(nil)
	_ fenceRecorder = (*acl.Fence)(nil)
)

// Fence implements SourceFence: with nothing to fence with, it refuses.
func (NoFence) Fence(context.Context, string) error { return ErrNoSourceFence }

// Enforced implements SourceFence.
func (NoFence) Enforced(context.Context, string) (bool, string, error) {
	return false, "", ErrNoSourceFence
}

// Lift implements SourceFence.
func (NoFence) Lift(context.Context, string) error { return nil }

// fenced reports whether the control plane runs with a source fence.
func (cp *ControlPlane) fenced() bool {
	_, none := cp.cfg.fence.(NoFence)
	return !none
}

// promiseFences runs at start. With a source fence, every REJECT and
// PROXY topic's routes say so from now on. Without one, topics whose
// routes already said so keep saying it (agents cut off hold those
// routes), and their cutovers are refused until the fence is back: the
// log says which.
func (cp *ControlPlane) promiseFences(ctx context.Context) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var unkept []string
	for _, name := range slices.Sorted(maps.Keys(cp.topics)) {
		t := cp.topics[name]
		switch {
		case !cp.fenced():
			if t.FenceAtCutover && t.State != migration.Complete {
				unkept = append(unkept, name)
			}
		case !t.FenceAtCutover && (t.State == migration.Reject || t.State == migration.Proxy):
			nt := *t
			nt.FenceAtCutover = true
			if err := cp.commitLocked(ctx, nt, false); err != nil {
				return fmt.Errorf("controlplane: storing %s's source fence: %w", name, err)
			}
		}
	}
	if len(unkept) > 0 {
		cp.log.Warn("these topics' routes tell agents the source is fenced at the cutover, and this control plane runs "+
			"without a source fence: their cutovers are refused until it runs with --source-fence=acl (agents without a "+
			"lease may be forwarding them to the source on that promise)", "topics", unkept)
	}
	return nil
}

// liftFence lifts a rolled-back topic's source fence and records it
// lifted. Without a fence to lift it with, it says what to do instead.
func (cp *ControlPlane) liftFence(ctx context.Context, name string) error {
	if !cp.fenced() {
		return fmt.Errorf("%w: %s is fenced on the source since a cutover that was rolled back, and this control plane "+
			"runs without a source fence: restart it with --source-fence=acl, or delete the DENY WRITE ACL for User:* on "+
			"topic %s on the source", ErrNoSourceFence, name, name)
	}
	if err := cp.cfg.fence.Lift(ctx, name); err != nil {
		return err
	}
	cp.mu.Lock()
	t, ok := cp.topics[name]
	if !ok || !t.SourceFenceUp || (t.State != migration.Reject && t.State != migration.Proxy) {
		cp.mu.Unlock()
		return nil
	}
	nt := *t
	nt.SourceFenceUp = false
	err := cp.store.PutTopic(ctx, nt, cp.version)
	if err == nil {
		cp.topics[name] = &nt
	}
	cp.mu.Unlock()
	if err != nil {
		return err
	}
	cp.event(ctx, Event{Topic: name, Kind: EventSourceFenceLifted, Actor: ActorControlPlane,
		Reason: "producers may write " + name + " on the source again"})
	return nil
}

// fenceRecorder is a SourceFence that can say whether a topic's fence
// is up from an earlier cutover (acl.Fence).
type fenceRecorder interface {
	Recorded(ctx context.Context, topic string) (bool, error)
}

// fenceLeftUp reports whether topic, about to be added, is still fenced
// on the source by a cutover of an earlier time it was managed (COMPLETE,
// then removed): the new topic's restore lifts it, as a rollback's would.
func (cp *ControlPlane) fenceLeftUp(ctx context.Context, topic string) (bool, error) {
	r, ok := cp.cfg.fence.(fenceRecorder)
	if !ok {
		return false, nil
	}
	up, err := r.Recorded(ctx, topic)
	if err != nil {
		return false, fmt.Errorf("controlplane: reading %s's source fence record: %w", topic, err)
	}
	return up, nil
}

// fencePromised reports whether topic, about to be added, was removed so
// recently that an agent cut off since may still forward it without a
// lease on its old route's source_fenced: then the new topic keeps the
// promise (and a control plane without a fence refuses its cutover). Read
// from the event log, which outlives restarts and leaders.
func (cp *ControlPlane) fencePromised(ctx context.Context, topic string) (bool, error) {
	if cp.fenced() {
		return true, nil // promised anyway
	}
	evs, err := cp.store.Events(ctx, topic, 0)
	if err != nil {
		return false, fmt.Errorf("controlplane: reading %s's events: %w", topic, err)
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if e := evs[i]; e.Kind == EventRemoved {
			// An agent writes no later than its lease's end (at most a lease
			// after the removal was pushed) + UnleasedForward + F.
			kept := cp.cfg.lease + migration.UnleasedForward + cp.cfg.forward
			return e.FenceAtCutover && cp.now().Before(e.Time.Add(kept)), nil
		}
	}
	return false, nil
}
