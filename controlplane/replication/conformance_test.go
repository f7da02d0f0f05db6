package replication_test

import (
	"testing"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/controlplane/shadow"
)

// The control plane (and its shadow job) declare what they drive; both
// drivers must be it.
var (
	_ controlplane.Replication       = (*replication.ReplicatorAdapter)(nil)
	_ shadow.LatencySource           = (*replication.ReplicatorAdapter)(nil)
	_ controlplane.SourceReader      = (*replication.ReplicatorAdapter)(nil)
	_ controlplane.SourceTopicLister = (*replication.ReplicatorAdapter)(nil)
	_ controlplane.Replication       = (*replication.WorkerPool)(nil)
	_ shadow.LatencySource           = (*replication.WorkerPool)(nil)
	_ controlplane.SourceTopicLister = (*replication.WorkerPool)(nil)
	_ controlplane.WorkerLister      = (*replication.WorkerPool)(nil)
	_ controlplane.ProgressNotifier  = (*replication.WorkerPool)(nil)
	_ controlplane.ProgressNotifier  = (*replication.ReplicatorAdapter)(nil)
)

// TestOptionalAbilities: the control plane picks what it does by the
// abilities a driver has, so a driver must lack the ones it cannot serve:
// workers read no batch for bypass detection (cmd/baton warns it is off),
// and the in-process replicator has no workers to list (GET /v1/workers
// says "in-process").
func TestOptionalAbilities(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name               string
		repl               controlplane.Replication
		reader, hasWorkers bool
	}{
		{"in process", &replication.ReplicatorAdapter{}, true, false},
		{"workers", &replication.WorkerPool{}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, ok := tc.repl.(controlplane.SourceReader); ok != tc.reader {
				t.Errorf("SourceReader: %v, want %v", ok, tc.reader)
			}
			if _, ok := tc.repl.(controlplane.WorkerLister); ok != tc.hasWorkers {
				t.Errorf("WorkerLister: %v, want %v", ok, tc.hasWorkers)
			}
		})
	}
}
