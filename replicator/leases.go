package replicator

import "time"

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
