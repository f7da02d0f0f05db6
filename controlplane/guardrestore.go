package controlplane

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/baton-kafka/baton/controlplane/acl"
	"github.com/baton-kafka/baton/migration"
)

// maxGuardBackoff bounds the wait between two rounds of guard restores
// while the destination fails them.
const maxGuardBackoff = 5 * time.Second

// guardRestore is one topic's pending write-guard restore.
type guardRestore struct {
	since    time.Time
	announce bool   // emit guard_restored when done (after a rollback)
	failures int    // attempts failed so far
	lastErr  string // the last failure
}

// GuardRestore is a pending write-guard restore as status shows it.
type GuardRestore struct {
	Since    time.Time `json:"since"`
	Failures int       `json:"failures"`
	LastErr  string    `json:"lastError,omitempty"`
}

// restoreGuard queues topic for guardLoop, which protects it on the
// destination with retries. announce records guard_restored once done.
// guardLoop also queues every REJECT and PROXY topic each GuardResync.
func (cp *ControlPlane) restoreGuard(topic string, announce bool) {
	cp.mu.Lock()
	if g, ok := cp.guards[topic]; ok {
		g.announce = g.announce || announce
	} else {
		cp.guards[topic] = &guardRestore{since: cp.now(), announce: announce}
	}
	cp.mu.Unlock()
	select {
	case cp.wakeGuards <- struct{}{}:
	default:
	}
}

// guardPendingLocked returns topic's pending restore if an attempt at it
// failed (a restore not tried yet is routine: every resync queues one).
// cp.mu is held.
func (cp *ControlPlane) guardPendingLocked(topic string) *GuardRestore {
	g, ok := cp.guards[topic]
	if !ok || g.failures == 0 {
		return nil
	}
	return &GuardRestore{Since: g.since, Failures: g.failures, LastErr: g.lastErr}
}

// guardLoop restores queued guards until the control plane closes. One
// topic at a time, each attempt bounded by the cutover timeout; the first
// failure of the destination in a round ends it (it is likely down for
// all; a failed source-fence lift is the topic's own and does not) and
// the next round waits, doubling up to maxGuardBackoff. A topic that left
// REJECT and PROXY meanwhile (removed, or MIGRATING) is dropped: a rollback
// queues it again. A cutover of a topic whose restore failed is refused by
// the gate.
func (cp *ControlPlane) guardLoop() {
	backoff := cp.cfg.poll
	resync := time.NewTicker(cp.cfg.guardResync)
	defer resync.Stop()
	for {
		cp.mu.Lock()
		names := make([]string, 0, len(cp.guards))
		for n := range cp.guards {
			names = append(names, n)
		}
		cp.mu.Unlock()
		sort.Strings(names)
		failed := false
		for _, n := range names {
			if ok, destination := cp.restoreOne(n); !ok {
				failed = true
				if destination {
					break
				}
			}
		}
		var wait <-chan time.Time
		if failed {
			wait = time.After(backoff)
			backoff = min(backoff*2, maxGuardBackoff)
		} else {
			backoff = cp.cfg.poll
		}
		select {
		case <-cp.ctx.Done():
			return
		case <-cp.wakeGuards:
		case <-wait:
		case <-resync.C:
			for _, t := range cp.Topics() {
				if t.State == migration.Reject || t.State == migration.Proxy {
					cp.restoreGuard(t.Name, false)
				}
			}
		}
	}
}

// restoreOne makes one attempt at topic's guard (and a rolled-back
// cutover's source fence); ok is false if it failed, destination too if
// the destination's part did (or the control plane is closing).
func (cp *ControlPlane) restoreOne(topic string) (bool, bool) {
	cp.guardMu.Lock()
	cp.mu.Lock()
	t, managed := cp.topics[topic]
	protect := managed && (t.State == migration.Reject || t.State == migration.Proxy)
	fenceUp := protect && t.SourceFenceUp
	cp.mu.Unlock()
	var err, gerr error
	if protect {
		actx, cancel := context.WithTimeout(cp.ctx, cp.cfg.timeout)
		// The source fence first, and whatever the destination does: a
		// rollback often follows a destination that is down, and every
		// producer of the topic is refused until the fence is lifted.
		var ferr error
		if fenceUp {
			ferr = cp.liftFence(actx, topic)
		}
		gerr = cp.cfg.guard.Protect(actx, topic)
		err = errors.Join(ferr, gerr)
		cancel()
	}
	cp.guardMu.Unlock()
	if cp.ctx.Err() != nil {
		return false, true
	}
	cp.mu.Lock()
	g, ok := cp.guards[topic]
	t, managed = cp.topics[topic]
	if !ok {
		cp.mu.Unlock()
		return true, false
	}
	if !managed || (t.State != migration.Reject && t.State != migration.Proxy) {
		delete(cp.guards, topic)
		cp.mu.Unlock()
		return true, false
	}
	if err == nil {
		delete(cp.guards, topic)
		cp.mu.Unlock()
		if g.announce || g.failures > 0 {
			cp.event(cp.ctx, Event{Topic: topic, Kind: EventGuardRestored, Actor: ActorControlPlane,
				Reason: fmt.Sprintf("only the replicator may write %s on the destination again (after %d failed attempts)", topic, g.failures)})
		}
		return true, false
	}
	g.failures++
	g.lastErr = err.Error()
	first := g.failures == 1
	cp.mu.Unlock()
	switch {
	case !first:
	case errors.Is(err, acl.ErrFence) || errors.Is(err, ErrNoSourceFence):
		cp.log.Warn("lifting the source fence after a rollback failed; retrying in the background. Until it is lifted "+
			"the source refuses every write to the topic (agents answer them retriable), and a cutover of it is refused: "+
			"check the source is reachable and the admin may alter ACLs", "topic", topic, "err", err)
		cp.event(cp.ctx, Event{Topic: topic, Kind: EventGuardRestoreFailed, Actor: ActorControlPlane,
			Reason: fmt.Sprintf("lifting the source fence: %v; retrying in the background", err)})
	default:
		// Once per restore; status shows every later attempt's error.
		cp.log.Warn("restoring the destination write guard failed; retrying in the background. Until it is back, "+
			"only the agents (which route the topic to the source) keep producers off it on the destination, "+
			"and a cutover of it is refused: check the destination is reachable and the admin may alter ACLs",
			"topic", topic, "err", err)
		cp.event(cp.ctx, Event{Topic: topic, Kind: EventGuardRestoreFailed, Actor: ActorControlPlane,
			Reason: fmt.Sprintf("restoring the destination write guard: %v; retrying in the background", err)})
	}
	return false, gerr != nil
}
