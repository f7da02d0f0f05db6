package controlplane

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/baton-kafka/baton/replicator"
)

// Replication is what the cutover needs from the replicator.
type Replication interface {
	// Start copies topic (again); a no-op if it is being copied.
	Start(topic string) error
	// Stop stops copying topic and returns, once the last produce to the
	// destination was answered, the first source offset not copied per
	// partition, and the last batches of each idempotent source producer
	// copied (replicator.Stopped), which agents need at COMPLETE.
	Stop(ctx context.Context, topic string) (map[int32]int64, []replicator.SourceBatch, error)
	// SetMigrating puts topic first in the copy order, or back.
	SetMigrating(topic string, migrating bool) error
	// Lag is topic's time lag; an error while it is not measurable yet.
	Lag(topic string) (time.Duration, error)
	// Progress is the first source offset not copied per partition (-1:
	// not known yet).
	Progress(topic string) (map[int32]int64, error)
	// SourceEndOffsets reads the source's end offsets of topic.
	SourceEndOffsets(ctx context.Context, topic string) (map[int32]int64, error)
	// Diverged names the partitions of topic whose destination copy took
	// a write that was not the replicator's, with why (none: nil).
	Diverged(topic string) map[int32]string
}

// LatencySource is what latency emulation needs from the replicator
// (docs/design.md §12): the destination's produce ack latency per topic. A
// Replication that also implements it has its measurements pushed to the
// agents of PROXY topics with latency emulation on.
type LatencySource interface {
	// DestinationLatency is topic's destination produce ack latency over
	// a recent window; false when nothing was measured in it.
	DestinationLatency(topic string) (replicator.Latency, bool)
}

// SourceReader is a Replication that tells every data batch it reads from
// the source, for bypass detection (docs/design.md §12).
type SourceReader interface {
	OnSourceRead(func(replicator.SourceRead))
}

// ReplicatorAdapter drives a replicator.Replicator in this process; Source
// reads the source cluster's end offsets.
type ReplicatorAdapter struct {
	R      *replicator.Replicator
	Source *kadm.Client
}

var (
	_ Replication   = (*ReplicatorAdapter)(nil)
	_ LatencySource = (*ReplicatorAdapter)(nil)
	_ SourceReader  = (*ReplicatorAdapter)(nil)
)

// DestinationLatency implements LatencySource.
func (a *ReplicatorAdapter) DestinationLatency(topic string) (replicator.Latency, bool) {
	return a.R.DestinationLatency(topic)
}

// OnSourceRead implements SourceReader.
func (a *ReplicatorAdapter) OnSourceRead(f func(replicator.SourceRead)) { a.R.OnSourceRead(f) }

// Start implements Replication.
func (a *ReplicatorAdapter) Start(topic string) error { a.R.Start(topic); return nil }

// Stop implements Replication.
func (a *ReplicatorAdapter) Stop(ctx context.Context, topic string) (map[int32]int64, []replicator.SourceBatch, error) {
	st, err := a.R.Stop(ctx, topic)
	if err != nil {
		return nil, nil, err
	}
	out := make(map[int32]int64, len(st.Partitions))
	for _, p := range st.Partitions {
		out[p.Partition] = p.Next
	}
	return out, st.Recent, nil
}

// SetMigrating implements Replication.
func (a *ReplicatorAdapter) SetMigrating(topic string, m bool) error {
	return a.R.SetMigrating(topic, m)
}

func (a *ReplicatorAdapter) status(topic string) (replicator.TopicStatus, error) {
	for _, t := range a.R.Status() {
		if t.Topic == topic {
			if !t.Ready {
				if t.Err != nil {
					return t, fmt.Errorf("%w: %s: %v", ErrNotReady, topic, t.Err)
				}
				return t, fmt.Errorf("%w: %s", ErrNotReady, topic)
			}
			return t, nil
		}
	}
	return replicator.TopicStatus{}, fmt.Errorf("%w: %s", replicator.ErrUnknownTopic, topic)
}

// Lag implements Replication. A partition the replicator has not resumed
// copying yet (it starts not knowing where, and learns it from the
// destination) has no lag to measure: the topic's lag is unknown then, not
// zero, so the gate refuses a cutover that could only time out.
func (a *ReplicatorAdapter) Lag(topic string) (time.Duration, error) {
	t, err := a.status(topic)
	if err != nil {
		return 0, err
	}
	for _, p := range t.Partitions {
		if p.Next < 0 {
			why := ""
			if p.Err != nil {
				why = ": " + p.Err.Error()
			}
			return 0, fmt.Errorf("%w: %s/%d has not resumed copying yet%s", ErrNotReady, topic, p.Partition, why)
		}
	}
	return t.Lag, nil
}

// Progress implements Replication.
func (a *ReplicatorAdapter) Progress(topic string) (map[int32]int64, error) {
	t, err := a.status(topic)
	if err != nil {
		return nil, err
	}
	out := make(map[int32]int64, len(t.Partitions))
	for _, p := range t.Partitions {
		out[p.Partition] = p.Next
	}
	return out, nil
}

// Diverged implements Replication.
func (a *ReplicatorAdapter) Diverged(topic string) map[int32]string {
	var out map[int32]string
	for _, t := range a.R.Status() {
		if t.Topic != topic {
			continue
		}
		for _, p := range t.Partitions {
			if p.Diverged != nil {
				if out == nil {
					out = map[int32]string{}
				}
				out[p.Partition] = p.Diverged.Error()
			}
		}
	}
	return out
}

// divergedText says which partitions of topic diverged, for a refusal.
func divergedText(topic string, d map[int32]string) string {
	ps := make([]int32, 0, len(d))
	for p := range d {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%s partition %d (%s)", topic, p, d[p])
	}
	return "the destination diverged: " + strings.Join(parts, "; ") +
		": a client wrote the destination directly, bypassing the agents, so its offsets no longer match the source's; " +
		"find that writer, then delete the topic on the destination and re-add it here to copy it afresh"
}

// SourceEndOffsets implements Replication.
func (a *ReplicatorAdapter) SourceEndOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	return sourceEndOffsets(ctx, a.Source, topic)
}

// WriteGuard keeps writers other than the replicator off D.T until COMPLETE
// (docs/design.md §11).
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

var _ WriteGuard = NoGuard{}

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
