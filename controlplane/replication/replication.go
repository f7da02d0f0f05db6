// Package replication owns the control plane's replication drivers: what
// copies the managed topics from the source to the destination while the
// control plane drives it through its controlplane.Replication interface.
// ReplicatorAdapter runs a replicator.Replicator in the control plane's own
// process (`baton controlplane --replication=in-process`); WorkerPool
// leases each partition to one `baton replicator --control-plane` process
// at a time over the Replication gRPC service and drives the cutover's
// Stop through them (--replication=workers, docs/design.md §10). Both read
// the source's end offsets and its topic list for the control plane.
//
// It needs nothing of package controlplane, so the control plane's own
// tests can drive a real replication; the control plane reaches the
// abilities only some drivers have (latency, source reads, the worker
// view) through small interfaces it declares itself.
package replication

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
)

var (
	// ErrBadConfig refuses a driver's settings; the message names the
	// setting.
	ErrBadConfig = errors.New("replication: bad config")
	// ErrNotReady: a topic's copy is not set up yet (its partitions not
	// read from the source, a partition not resumed, or without a
	// worker): its lag and progress are not known.
	ErrNotReady = errors.New("replication: the topic's copy is not ready")
)

// sourceEndOffsets reads topic's end offsets on the source.
func sourceEndOffsets(ctx context.Context, source *kadm.Client, topic string) (map[int32]int64, error) {
	l, err := source.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	if err := l.Error(); err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	l.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	if len(out) == 0 {
		return nil, fmt.Errorf("replication: no partitions of %s on the source", topic)
	}
	return out, nil
}

// listTopics lists the source's topics, sorted (internal ones left out).
func listTopics(ctx context.Context, adm *kadm.Client) ([]string, error) {
	if adm == nil {
		return nil, fmt.Errorf("%w: no source client to list its topics", ErrBadConfig)
	}
	ts, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("replication: listing the source's topics: %w", err)
	}
	if err := ts.Error(); err != nil {
		return nil, fmt.Errorf("replication: listing the source's topics: %w", err)
	}
	names := ts.Names()
	slices.Sort(names)
	return names, nil
}
