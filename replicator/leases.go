package replicator

import (
	"fmt"
	"time"
)

// PartitionLeases says which partitions a replicator that is one worker
// among several may copy (docs/replicator.md, "Workers"). Its methods MUST
// be safe for concurrent use and MUST NOT block: the copy loop calls them
// before every write to the destination.
type PartitionLeases interface {
	// MayWrite reports whether this replicator holds topic's partition
	// long enough to send one more write to the destination, and until
	// when it may wait for the answer (its lease's end).
	MayWrite(topic string, partition int32) (until time.Time, ok bool)
}

// Leases makes the replicator copy, sync the groups of and hand off only
// the partitions l lets it write (default: every partition of its topics).
// Each partition's handoff is then kept under its own key, since several
// workers stop one topic.
func Leases(l PartitionLeases) Opt { return optFunc(func(c *config) { c.leases = l }) }

// mayWrite is MayWrite for a replicator with or without leases.
func (r *Replicator) mayWrite(topic string, p int32) (time.Time, bool) {
	if r.cfg.leases == nil {
		return time.Time{}, true
	}
	return r.cfg.leases.MayWrite(topic, p)
}

// mayWritePart is mayWrite for p, false once p's topic was forgotten
// (Forget): a step still in flight on it must not write after the topic
// came back to this worker as a new copy. Without leases it takes no lock:
// it is on the copy's path to D.
func (r *Replicator) mayWritePart(p *partState) (time.Time, bool) {
	if r.cfg.leases == nil {
		return time.Time{}, true
	}
	r.mu.Lock()
	gone := p.gone
	r.mu.Unlock()
	if gone {
		return time.Time{}, false
	}
	return r.mayWrite(p.topic, p.p)
}

// Forget removes topic from the replicated set without a handoff: a
// worker's topic none of whose partitions it holds any more (their
// holders copy them, sync their groups and stop them at the cutover). A
// step in flight on it writes nothing more. Start copies it again, afresh.
func (r *Replicator) Forget(topic string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.topics[topic]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownTopic, topic)
	}
	for _, p := range t.parts {
		p.gone = true
	}
	delete(r.topics, topic)
	r.forgetLatency(topic)
	r.configMu.Lock()
	delete(r.lastSrcConfigs, topic)
	r.configMu.Unlock()
	r.metrics.forget(topic, t.parts)
	r.notifyLocked()
	return nil
}
