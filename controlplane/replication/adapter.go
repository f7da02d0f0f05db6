package replication

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/baton-kafka/baton/replicator"
)

// ReplicatorAdapter drives a replicator.Replicator in this process; Source
// reads the source cluster's end offsets and lists its topics.
type ReplicatorAdapter struct {
	R      *replicator.Replicator
	Source *kadm.Client
}

// DestinationLatency implements shadow.LatencySource.
func (a *ReplicatorAdapter) DestinationLatency(topic string) (replicator.Latency, bool) {
	return a.R.DestinationLatency(topic)
}

// OnProgress implements controlplane.ProgressNotifier.
func (a *ReplicatorAdapter) OnProgress(f func(topic string)) { a.R.OnProgress(f) }

// OnSourceRead implements controlplane.SourceReader.
func (a *ReplicatorAdapter) OnSourceRead(f func(replicator.SourceRead)) { a.R.OnSourceRead(f) }

// Start implements controlplane.Replication.
func (a *ReplicatorAdapter) Start(topic string) error { a.R.Start(topic); return nil }

// Stop implements controlplane.Replication.
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

// SetMigrating implements controlplane.Replication.
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

// Lag implements controlplane.Replication. A partition the replicator has
// not resumed copying yet (it starts not knowing where, and learns it from
// the destination) has no lag to measure: the topic's lag is unknown then,
// not zero, so the gate refuses a cutover that could only time out.
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

// Progress implements controlplane.Replication.
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

// Diverged implements controlplane.Replication.
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

// SourceEndOffsets implements controlplane.Replication.
func (a *ReplicatorAdapter) SourceEndOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	return sourceEndOffsets(ctx, a.Source, topic)
}

// SourceTopics implements controlplane.SourceTopicLister.
func (a *ReplicatorAdapter) SourceTopics(ctx context.Context) ([]string, error) {
	return listTopics(ctx, a.Source)
}
