package controlplane

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/replicator"
)

// Replication is what the cutover needs from the replicator. Its drivers
// (in this process, or by replicator workers) are package
// controlplane/replication's.
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

// SourceReader is a Replication that tells every data batch it reads from
// the source, for bypass detection (docs/design.md §12).
type SourceReader interface {
	OnSourceRead(func(replicator.SourceRead))
}

// ProgressNotifier is a Replication that tells when the copy of a topic
// advances: f is called with the topic, from the copying goroutines, and
// MUST NOT block. A cutover waiting for the copy to reach the source's end
// offsets then reads the progress at each advance, not at its next poll.
type ProgressNotifier interface {
	OnProgress(f func(topic string))
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

// WorkerLister is a Replication by replicator workers
// (replication.WorkerPool), which lists them for GET /v1/workers.
type WorkerLister interface {
	Workers() []replication.WorkerView
}

// Workers is how the control plane replicates: "in-process", or
// "workers" with the workers (`GET /v1/workers`).
type Workers struct {
	Replication string                   `json:"replication"`
	Workers     []replication.WorkerView `json:"workers"`
}

// Workers returns how the control plane replicates and its workers.
func (cp *ControlPlane) Workers() Workers {
	if l, ok := cp.cfg.repl.(WorkerLister); ok {
		return Workers{Replication: "workers", Workers: l.Workers()}
	}
	return Workers{Replication: "in-process", Workers: []replication.WorkerView{}}
}
