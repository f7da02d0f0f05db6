package agent

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/agent/internal/upstream"
	"github.com/baton-kafka/baton/filter/pidmap"
	"github.com/baton-kafka/baton/internal/recordbatch"
)

// The agent's side of filter/pidmap (idempotent producers across the
// cutover, docs/design.md §9): its bounds as options, producer ids from the
// destination, and the search of the source for a retried batch.

// Defaults of the options below.
const (
	// DefaultProducerIDs bounds the producer id map.
	DefaultProducerIDs = pidmap.DefaultMaxProducers
	// DefaultProducerIDIdle is how long a mapping outlives its producer's
	// last batch.
	DefaultProducerIDIdle = pidmap.DefaultIdle
)

// ProducerIDs bounds how many source producers (id and epoch) the agent
// maps to destination producer ids at once, overriding 10000. When full, a
// new producer evicts mappings idle past ProducerIDIdle first, then the
// least recently used one. An evicted producer that writes again gets a
// fresh destination producer id, its stream starting at the batch it sends
// then; a retry of a batch sent before (an uncertain write) is refused with
// OUT_OF_ORDER_SEQUENCE_NUMBER, which librdkafka treats as fatal: size the
// bound above the producers one agent serves.
func ProducerIDs(n int) Opt { return optFunc(func(c *config) { c.producerIDs = n }) }

// ProducerIDIdle sets how long a producer id mapping is kept after its
// producer's last batch to the destination, overriding 15 minutes (longer
// than a client keeps retrying one batch: Java's delivery timeout is 2
// minutes, librdkafka's message timeout 5).
func ProducerIDIdle(d time.Duration) Opt {
	return optFunc(func(c *config) { c.producerIDIdle = d })
}

// newPIDMap is the agent's producer id filter.
func (a *Agent) newPIDMap() *pidmap.Factory {
	var j pidmap.Journal
	var restored []pidmap.Mapping
	var restoredUncertain []pidmap.Uncertain
	if a.state != nil {
		j, restored, restoredUncertain = a.state.pids, a.state.restored, a.state.restoredUncertain
	}
	f, err := pidmap.New(pidmap.Config{
		Journal:           j,
		Restored:          restored,
		RestoredUncertain: restoredUncertain,
		Allocator:         destinationIDs{a},
		Source:            clusterBatches{a, false},
		Destination:       clusterBatches{a, true},
		Copied:            func(topic string) *pidmap.Copied { return a.routes.Lookup(topic).copied },
		MaxProducers:      a.cfg.producerIDs,
		Idle:              a.cfg.producerIDIdle,
		Timeout:           a.cfg.forwardDeadline,
		Log:               a.log,
	})
	if err != nil {
		panic(err) // New checked the bounds: a bug here, not a config error
	}
	if a.state != nil {
		a.state.pids.live, a.state.pids.liveUncertain = f.Mappings, f.UncertainBatches
		if len(restored) > 0 {
			a.log.Info("destination producer id mappings taken back from the state directory", "mappings", len(restored),
				"producers", f.Producers(), "dir", a.cfg.stateDir)
		}
	}
	return f
}

// destinationIDs asks the destination for idempotent producer ids.
type destinationIDs struct{ a *Agent }

var _ pidmap.Allocator = destinationIDs{}

// Allocate implements pidmap.Allocator.
func (d destinationIDs) Allocate(ctx context.Context) (int64, int16, error) {
	a := d.a
	_, dst := a.clustersOf(ctx) // as the client, when it authenticates upstream as itself
	if !dst.HasVersions() {
		if err := dst.LoadVersions(ctx); err != nil {
			return 0, 0, err
		}
	}
	v := dst.Version(22, math.MaxInt16)
	if v < 0 {
		return 0, 0, errors.New("destination cluster: InitProducerId not supported")
	}
	req := kmsg.NewPtrInitProducerIDRequest()
	req.SetVersion(v)
	req.TransactionTimeoutMillis = math.MaxInt32 // not transactional: unused, as Java sends it
	resp, _, err := dst.Ask(ctx, req)
	if err != nil {
		return 0, 0, err
	}
	ip := resp.(*kmsg.InitProducerIDResponse)
	if err := kerr.ErrorForCode(ip.ErrorCode); err != nil {
		return 0, 0, fmt.Errorf("destination cluster: InitProducerId: %w", err)
	}
	a.log.Debug("destination producer id allocated", "producer_id", ip.ProducerID, "epoch", ip.ProducerEpoch)
	return ip.ProducerID, ip.ProducerEpoch, nil
}

// clusterBatches searches the source, or the destination, for a batch.
type clusterBatches struct {
	a           *Agent
	destination bool
}

var _ pidmap.Finder = clusterBatches{}

// searchRecords bounds how far back from the end the agent looks for an
// uncertain batch: the client sent it at most a few batches before its
// last one, but other producers may have written since.
const searchRecords = 1 << 20

// Find implements pidmap.Finder: it searches back from the partition's end
// in growing windows.
func (s clusterBatches) Find(ctx context.Context, k pidmap.Batch) (int64, error) {
	src, dst := s.a.clustersOf(ctx)
	if s.destination {
		src = dst
	}
	addr, err := src.LeaderAddr(ctx, k.Topic, k.Partition)
	if err != nil {
		return 0, err
	}
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.SetVersion(max(min(src.Version(2, 7), 7), 1))
	lo.ReplicaID = -1
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = k.Topic
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Partition, lp.Timestamp, lp.CurrentLeaderEpoch = k.Partition, -1, -1
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	resp, err := src.RoundTrip(ctx, addr, lo)
	if err != nil {
		return 0, err
	}
	lr := resp.(*kmsg.ListOffsetsResponse)
	if len(lr.Topics) != 1 || len(lr.Topics[0].Partitions) != 1 {
		return 0, fmt.Errorf("%s cluster: ListOffsets answered %d topics", src.Name(), len(lr.Topics))
	}
	if err := kerr.ErrorForCode(lr.Topics[0].Partitions[0].ErrorCode); err != nil {
		return 0, fmt.Errorf("%s cluster: ListOffsets: %w", src.Name(), err)
	}
	end := lr.Topics[0].Partitions[0].Offset
	for window := int64(1024); ; window *= 16 {
		from := max(end-window, 0)
		if off, err := s.scan(ctx, src, addr, k, from, end); err == nil || !errors.Is(err, pidmap.ErrNotFound) {
			return off, err
		}
		if from == 0 || window >= searchRecords {
			return 0, fmt.Errorf("%w in the last %d records of the %s", pidmap.ErrNotFound, window, src.Name())
		}
	}
}

// scan fetches [from, end) of k's partition from the leader at addr and
// returns the base offset of batch k.
func (s clusterBatches) scan(ctx context.Context, src *upstream.Cluster, addr string, k pidmap.Batch, from, end int64) (int64, error) {
	for from < end {
		fr := kmsg.NewPtrFetchRequest()
		fr.SetVersion(max(min(src.Version(1, 12), 12), 4))
		fr.ReplicaID, fr.MaxWaitMillis, fr.MinBytes, fr.MaxBytes = -1, 0, 1, 16<<20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = k.Topic
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes, fp.CurrentLeaderEpoch, fp.LogStartOffset = k.Partition, from, 16<<20, -1, -1
		ft.Partitions = append(ft.Partitions, fp)
		fr.Topics = append(fr.Topics, ft)
		resp, err := src.RoundTrip(ctx, addr, fr)
		if err != nil {
			return 0, err
		}
		fres := resp.(*kmsg.FetchResponse)
		if err := kerr.ErrorForCode(fres.ErrorCode); err != nil {
			return 0, fmt.Errorf("%s cluster: Fetch: %w", src.Name(), err)
		}
		if len(fres.Topics) != 1 || len(fres.Topics[0].Partitions) != 1 {
			return 0, fmt.Errorf("%s cluster: Fetch answered %d topics", src.Name(), len(fres.Topics))
		}
		p := fres.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			return 0, fmt.Errorf("%s cluster: Fetch: %w", src.Name(), err)
		}
		b := p.RecordBatches
		next := from
		for len(b) >= recordbatch.HeaderLen {
			n, err := recordbatch.BatchLen(b)
			if err != nil {
				break // a partial batch at the end of the answer
			}
			base := int64(binary.BigEndian.Uint64(b[recordbatch.OffBaseOffset:]))
			last := base + int64(binary.BigEndian.Uint32(b[recordbatch.OffLastDelta:]))
			if got, ok := pidmap.BatchOf(k.Topic, k.Partition, b[:n]); ok && got == k {
				return base, nil
			}
			next = last + 1
			b = b[n:]
		}
		if next == from {
			return 0, pidmap.ErrNotFound // nothing readable here
		}
		from = next
	}
	return 0, pidmap.ErrNotFound
}
