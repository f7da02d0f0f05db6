package replicator

import (
	"fmt"
	"sort"
	"time"
)

// Parity says how D.T.p's offsets relate to S.T.p's.
type Parity string

const (
	// ParityExact: D.T.p at offset o holds S.T.p's record at o.
	ParityExact Parity = "exact"
	// ParityMapped: offsets differ where S has gaps (transaction markers,
	// aborted data, a log start above 0, deleted records); the offset map
	// on D translates them exactly.
	ParityMapped Parity = "mapped"
)

// PartitionStatus is one partition's replication state.
type PartitionStatus struct {
	Partition int32
	// Next is the first source offset not yet copied; -1 before the
	// partition resumed.
	Next int64
	// DestinationEnd is D's end offset as the replicator last wrote it.
	DestinationEnd int64
	Lag            time.Duration
	Parity         Parity
	// LostRecords counts source records deleted before they were copied.
	LostRecords int64
	// Err is the last copy error, nil once a step succeeds again.
	Err error
	// Diverged is the first ErrDestinationDiverged of the partition: D.T.p
	// took a write that was not the replicator's. It stays set after the
	// copy goes on (from D's new end), since parity is lost for good.
	Diverged error
}

// TopicStatus is one topic's replication state.
type TopicStatus struct {
	Topic     string
	Migrating bool
	Paused    bool
	// Ready is false until D.T exists with S.T's partitions.
	Ready bool
	// Lag is the largest partition lag.
	Lag        time.Duration
	Partitions []PartitionStatus
	// Err is the last topic setup error (ErrSourceTopicMissing...).
	Err error
}

// Status returns every replicated topic's state, sorted by topic.
func (r *Replicator) Status() []TopicStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]TopicStatus, 0, len(r.topics))
	for _, t := range r.topics {
		out = append(out, r.topicStatusLocked(t))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out
}

// Lag returns topic's time lag: how long ago the oldest source record not
// yet copied (over all partitions) was appended, 0 when caught up.
func (r *Replicator) Lag(topic string) (time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.topics[topic]
	if !ok {
		return 0, fmt.Errorf("%w: %s", ErrUnknownTopic, topic)
	}
	return r.topicStatusLocked(t).Lag, nil
}

func (r *Replicator) topicStatusLocked(t *topicState) TopicStatus {
	now := r.now()
	st := TopicStatus{Topic: t.name, Migrating: t.migrating, Paused: t.paused, Ready: t.ready, Err: t.err}
	m := r.maps[t.name]
	for _, p := range t.parts {
		ps := PartitionStatus{Partition: p.p, Next: p.next, DestinationEnd: p.dstEnd, Parity: ParityExact,
			LostRecords: p.lost, Err: p.err, Diverged: r.diverged[t.name][p.p]}
		if p.next >= 0 {
			ps.Lag = p.lag.lag(now, p.next)
		}
		if !m.Exact(p.p) {
			ps.Parity = ParityMapped
		}
		st.Lag = max(st.Lag, ps.Lag)
		st.Partitions = append(st.Partitions, ps)
	}
	sort.Slice(st.Partitions, func(i, j int) bool { return st.Partitions[i].Partition < st.Partitions[j].Partition })
	return st
}
