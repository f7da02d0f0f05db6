package acl

import (
	"context"
	"fmt"

	"github.com/baton-kafka/baton/migration"
)

// A topic's routes promise agents that its source is fenced at its
// cutover (FenceAtCutover): agents may then forward it without a lease
// for up to migration.UnleasedForward, and only a control plane with a
// source fence may cut it over. The keeper says what a topic promises.

// Adding reports what topic, about to be added, takes of the source fence:
// promised, its routes promise the fence (always with one; without, while
// an agent cut off since its last removal may still forward it on its old
// route's promise, read from the event log, which outlives restarts and
// leaders), and leftUp, whether a cutover of an earlier time it was managed
// (COMPLETE, then removed) left the source fenced: the new topic's restore
// lifts it, as a rollback's would.
func (k *Keeper) Adding(ctx context.Context, topic string) (promised, leftUp bool, err error) {
	promised = k.d.Fenced
	if !promised {
		r, removed, err := k.d.View.LastRemoval(ctx, topic)
		if err != nil {
			return false, false, err
		}
		// An agent writes no later than its lease's end (at most a lease
		// after the removal was pushed) + UnleasedForward + F.
		kept := k.d.Lease + migration.UnleasedForward + k.d.Forward
		promised = removed && r.FenceAtCutover && k.d.Now().Before(r.At.Add(kept))
	}
	if r, ok := k.d.Fence.(recorder); ok {
		if leftUp, err = r.Recorded(ctx, topic); err != nil {
			return false, false, fmt.Errorf("acl: reading %s's source fence record: %w", topic, err)
		}
	}
	return promised, leftUp, nil
}

// PromiseAll runs at the control plane's start. With a source fence, every
// REJECT and PROXY topic's routes promise it from now on. Without one,
// topics whose routes already did keep promising it (agents cut off hold
// those routes), and their cutovers are refused until the fence is back:
// the log says which.
func (k *Keeper) PromiseAll(ctx context.Context) error {
	var unkept []string
	for _, t := range k.d.View.Topics() {
		switch {
		case !k.d.Fenced:
			if t.FenceAtCutover && t.State != migration.Complete {
				unkept = append(unkept, t.Name)
			}
		case !t.FenceAtCutover && t.guarded():
			if err := k.d.Recorder.PromiseFence(ctx, t.Name); err != nil {
				return err
			}
		}
	}
	if len(unkept) > 0 {
		k.d.Log.Warn("these topics' routes tell agents the source is fenced at the cutover, and this control plane runs "+
			"without a source fence: their cutovers are refused until it runs with --source-fence=acl (agents without a "+
			"lease may be forwarding them to the source on that promise)", "topics", unkept)
	}
	return nil
}
