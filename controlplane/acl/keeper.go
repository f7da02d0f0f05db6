package acl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/baton-kafka/baton/migration"
)

// maxBackoff bounds the wait between two rounds of restores while the
// destination fails them.
const maxBackoff = 5 * time.Second

// Kinds of the events the keeper appends, declared here once: the control
// plane's event log names them after these.
const (
	// EventSourceFenceLifted: a rollback's fence was lifted; producers may
	// write the topic on the source again.
	EventSourceFenceLifted = "source_fence_lifted"
	// EventGuardRestoreFailed: the first failed attempt at restoring a
	// topic's write guard (or lifting its rolled-back cutover's fence).
	EventGuardRestoreFailed = "guard_restore_failed"
	// EventGuardRestored: the write guard is back after a rollback or
	// after failed attempts.
	EventGuardRestored = "guard_restored"
)

// Topic is a managed topic as the keeper reads it.
type Topic struct {
	Name  string
	State migration.State
	// FenceAtCutover: its routes tell agents the source is fenced at its
	// cutover (they may forward it without a lease).
	FenceAtCutover bool
	// SourceFenceUp: a cutover's source fence is up on the source.
	SourceFenceUp bool
}

// guarded: a REJECT or PROXY topic has its destination write guard up,
// and no source fence.
func (t Topic) guarded() bool { return t.State == migration.Reject || t.State == migration.Proxy }

// Removal is a topic's last removal from the control plane.
type Removal struct {
	At time.Time
	// FenceAtCutover: the removed topic's routes promised the fence.
	FenceAtCutover bool
}

// View is what the keeper reads of the control plane.
type View interface {
	// Topic returns the managed topic name (false: not managed).
	Topic(name string) (Topic, bool)
	// Topics returns every managed topic, sorted by name.
	Topics() []Topic
	// LastRemoval returns topic's last removal, from the event log (false:
	// never removed).
	LastRemoval(ctx context.Context, topic string) (Removal, bool, error)
}

// Event is an event the keeper appends to the control plane's log, as
// the control plane's own.
type Event struct {
	Topic  string
	Kind   string // EventSourceFenceLifted, EventGuardRestoreFailed, EventGuardRestored
	Reason string
}

// Recorder is what the keeper changes in the control plane.
type Recorder interface {
	// FenceLifted stores that topic's source fence is lifted
	// (SourceFenceUp false) if the topic is still REJECT or PROXY with the
	// fence up; stored says whether it was.
	FenceLifted(ctx context.Context, topic string) (stored bool, err error)
	// PromiseFence stores that topic's routes promise the source fence
	// (FenceAtCutover) and publishes them, if it is REJECT or PROXY and
	// they do not yet.
	PromiseFence(ctx context.Context, topic string) error
	// Record appends e to the log.
	Record(ctx context.Context, e Event)
}

// Protector is the destination write guard as the keeper drives it: the
// control plane's WriteGuard, Guard on Kafka ACLs.
type Protector interface {
	Protect(ctx context.Context, topic string) error
	Lift(ctx context.Context, topic string) error
}

// Lifter is the source fence as the keeper drives it (it only lifts a
// rolled-back cutover's fence): the control plane's SourceFence, Fence on
// Kafka ACLs.
type Lifter interface {
	Lift(ctx context.Context, topic string) error
}

// recorder is a Lifter that can say whether a topic's fence is up from an
// earlier cutover (Fence).
type recorder interface {
	Recorded(ctx context.Context, topic string) (bool, error)
}

var (
	_ Protector = (*Guard)(nil)
	_ Lifter    = (*Fence)(nil)
	_ recorder  = (*Fence)(nil)
)

// Deps are the keeper's collaborators and settings; all are required.
type Deps struct {
	View     View
	Recorder Recorder
	Guard    Protector
	Fence    Lifter
	// Fenced: the control plane runs with a source fence (Fence is not
	// one that refuses everything).
	Fenced bool
	Log    *slog.Logger
	Now    func() time.Time
	// Timeout bounds each attempt at a restore (the cutover timeout).
	Timeout time.Duration
	// Poll is the wait after a failed round, doubled up to 5 s.
	Poll time.Duration
	// Resync is how often every REJECT and PROXY topic is queued again.
	Resync time.Duration
	// Lease and Forward are the agents' lease and forward deadline F.
	Lease, Forward time.Duration
}

// Keeper keeps the destination write guard and the source fence as the
// topics' states want them: it restores the guard of REJECT and PROXY
// topics in the background, with retries (after a rollback, at start, at
// every Resync), lifting a rolled-back cutover's source fence on the way;
// it serializes those Protects with the cutover's Lift of the guard
// (LiftGuard); and it says what a topic promises of the source fence
// (Adding, PromiseAll). It keeps its state under its own locks.
type Keeper struct {
	d    Deps
	wake chan struct{}

	// callMu serializes calls into the guard: the Protect of a restore and
	// the cutover's Lift. A restore reads the topic's state under callMu
	// and Protects only a REJECT or PROXY topic, and a topic is MIGRATING
	// (stored before its cutover runs) from before its cutover's LiftGuard
	// until the cutover is decided: so no Protect starts once the Lift
	// began, and a Protect that began before makes the Lift wait for it.
	// Lock order: callMu, then the control plane's lock (View is read
	// under callMu), then mu.
	callMu sync.Mutex
	// mu guards queued. It is held across no call out of the keeper, so
	// the control plane may call Restore and Pending with its lock held.
	mu     sync.Mutex
	queued map[string]*restore
}

// restore is one topic's queued restore.
type restore struct {
	since    time.Time
	announce bool   // record guard_restored when done (after a rollback)
	failures int    // attempts failed so far
	lastErr  string // the last failure
	// seq counts Restore calls: an attempt that began before the last one
	// does not settle the restore (the topic may have been rolled back
	// meanwhile, after the attempt found it MIGRATING).
	seq int
}

// Restore is a queued write-guard restore as status shows it.
type Restore struct {
	Since    time.Time `json:"since"`
	Failures int       `json:"failures"`
	LastErr  string    `json:"lastError,omitempty"`
}

// NewKeeper returns a keeper of d; Run runs its restores.
func NewKeeper(d Deps) *Keeper {
	return &Keeper{d: d, wake: make(chan struct{}, 1), queued: map[string]*restore{}}
}

// Restore queues topic for Run, which protects it on the destination with
// retries (lifting its rolled-back cutover's source fence first).
// announce records guard_restored once done.
func (k *Keeper) Restore(topic string, announce bool) {
	k.mu.Lock()
	g, ok := k.queued[topic]
	if !ok {
		g = &restore{since: k.d.Now()}
		k.queued[topic] = g
	}
	g.announce = g.announce || announce
	g.seq++
	k.mu.Unlock()
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// Pending returns topic's queued restore (false: none). A restore not
// tried yet (Failures 0) is routine: every Resync queues one.
func (k *Keeper) Pending(topic string) (Restore, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	g, ok := k.queued[topic]
	if !ok {
		return Restore{}, false
	}
	return Restore{Since: g.since, Failures: g.failures, LastErr: g.lastErr}, true
}

// LiftGuard lifts topic's destination write guard, the cutover's step:
// never while a restore Protects it (see callMu).
func (k *Keeper) LiftGuard(ctx context.Context, topic string) error {
	k.callMu.Lock()
	defer k.callMu.Unlock()
	return k.d.Guard.Lift(ctx, topic)
}

// Run restores queued guards until ctx ends. One topic at a time, each
// attempt bounded by Timeout; the first failure of the destination in a
// round ends it (it is likely down for all; a failed source-fence lift is
// the topic's own and does not) and the next round waits, doubling up to
// 5 s. A topic that left REJECT and PROXY meanwhile (removed, or
// MIGRATING) is dropped: a rollback queues it again. The control plane
// refuses the cutover of a topic whose restore failed (Pending).
func (k *Keeper) Run(ctx context.Context) {
	backoff := k.d.Poll
	resync := time.NewTicker(k.d.Resync)
	defer resync.Stop()
	for {
		k.mu.Lock()
		names := make([]string, 0, len(k.queued))
		for n := range k.queued {
			names = append(names, n)
		}
		k.mu.Unlock()
		sort.Strings(names)
		failed := false
		for _, n := range names {
			if ok, destination := k.restoreOne(ctx, n); !ok {
				failed = true
				if destination {
					break
				}
			}
		}
		var wait <-chan time.Time
		if failed {
			wait = time.After(backoff)
			backoff = min(backoff*2, maxBackoff)
		} else {
			backoff = k.d.Poll
		}
		select {
		case <-ctx.Done():
			return
		case <-k.wake:
		case <-wait:
		case <-resync.C:
			for _, t := range k.d.View.Topics() {
				if t.guarded() {
					k.Restore(t.Name, false)
				}
			}
		}
	}
}

// attempt is what one attempt at a restore did wrong, by part: lifting
// the source fence, storing it lifted, protecting the destination.
type attempt struct{ lift, record, guard error }

func (a attempt) err() error { return errors.Join(a.lift, a.record, a.guard) }

// restoreOne makes one attempt at topic's restore; ok is false if it
// failed, destination too if the destination's part did (or ctx ended).
func (k *Keeper) restoreOne(ctx context.Context, topic string) (ok, destination bool) {
	k.mu.Lock()
	g, queued := k.queued[topic]
	var seq int
	if queued {
		seq = g.seq
	}
	k.mu.Unlock()
	if !queued {
		return true, false
	}
	a := k.try(ctx, topic)
	if ctx.Err() != nil {
		return false, true
	}
	t, managed := k.d.View.Topic(topic)
	err := a.err()
	k.mu.Lock()
	g, queued = k.queued[topic]
	requeued := queued && g.seq != seq
	switch {
	case !queued:
		k.mu.Unlock()
		return true, false
	case !requeued && (!managed || !t.guarded()):
		delete(k.queued, topic)
		k.mu.Unlock()
		return true, false
	case err == nil && requeued:
		k.mu.Unlock()
		return true, false // the next round's attempt settles it
	case err == nil:
		delete(k.queued, topic)
		k.mu.Unlock()
		if g.announce || g.failures > 0 {
			k.d.Recorder.Record(ctx, Event{Topic: topic, Kind: EventGuardRestored, Reason: fmt.Sprintf(
				"only the replicator may write %s on the destination again (after %d failed attempts)", topic, g.failures)})
		}
		return true, false
	}
	g.failures++
	g.lastErr = err.Error()
	first := g.failures == 1
	k.mu.Unlock()
	if first { // once per restore; status shows every later attempt's error
		k.failed(ctx, topic, a)
	}
	return false, a.guard != nil
}

// try lifts topic's source fence if a rolled-back cutover left it up (a
// rollback often follows a destination that is down, and every producer
// of the topic is refused until the fence is lifted, so whatever the
// destination does), then protects it on the destination; under callMu,
// and only while the topic is REJECT or PROXY.
func (k *Keeper) try(ctx context.Context, topic string) attempt {
	k.callMu.Lock()
	defer k.callMu.Unlock()
	t, managed := k.d.View.Topic(topic)
	if !managed || !t.guarded() {
		return attempt{}
	}
	actx, cancel := context.WithTimeout(ctx, k.d.Timeout)
	defer cancel()
	var a attempt
	if t.SourceFenceUp {
		a.lift, a.record = k.liftFence(actx, topic)
	}
	a.guard = k.d.Guard.Protect(actx, topic)
	return a
}

// liftFence lifts a rolled-back topic's source fence (lift) and stores it
// lifted (record).
func (k *Keeper) liftFence(ctx context.Context, topic string) (lift, record error) {
	if err := k.d.Fence.Lift(ctx, topic); err != nil {
		return err, nil
	}
	stored, err := k.d.Recorder.FenceLifted(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("the source fence of %s is lifted, and storing that failed: %w", topic, err)
	}
	if stored {
		k.d.Recorder.Record(ctx, Event{Topic: topic, Kind: EventSourceFenceLifted,
			Reason: "producers may write " + topic + " on the source again"})
	}
	return nil, nil
}

// failed logs and records the first failure of topic's restore, as the
// failure of the part that failed first.
func (k *Keeper) failed(ctx context.Context, topic string, a attempt) {
	err := a.err()
	var msg, reason string
	switch {
	case a.lift != nil:
		msg = "lifting the source fence after a rollback failed; retrying in the background. Until it is lifted " +
			"the source refuses every write to the topic (agents answer them retriable), and a cutover of it is refused: " +
			"check the source is reachable and the admin may alter ACLs"
		reason = "lifting the source fence"
	case a.record != nil:
		msg = "the source fence after a rollback is lifted, but storing that failed; retrying in the background. Until " +
			"it is stored a cutover of the topic is refused: check the control plane's store is reachable and this " +
			"replica still leads"
	default:
		msg = "restoring the destination write guard failed; retrying in the background. Until it is back, " +
			"only the agents (which route the topic to the source) keep producers off it on the destination, " +
			"and a cutover of it is refused: check the destination is reachable and the admin may alter ACLs"
		reason = "restoring the destination write guard"
	}
	k.d.Log.Warn(msg, "topic", topic, "err", err)
	if reason != "" { // a.record says what it is
		reason += ": "
	}
	k.d.Recorder.Record(ctx, Event{Topic: topic, Kind: EventGuardRestoreFailed,
		Reason: fmt.Sprintf("%s%v; retrying in the background", reason, err)})
}
