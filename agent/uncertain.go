package agent

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/internal/recordbatch"
)

// Uncertain idempotent writes across the cutover (invariant 7).
//
// A batch the agent forwarded to the source and answered retriable because
// its outcome was unknown (forward deadline, connection lost) may have been
// written there. Kafka would dedupe the client's retry by its sequence, but
// a retry that arrives after COMPLETE goes to the destination, which has no
// state for the source producer id: written again, it is a duplicate (the
// replicator already copied the source's copy). So the agent remembers its
// uncertain idempotent batches, and when a retry of one is the first batch
// of its producer and partition toward the destination, it looks for the
// batch in the source: found, the retry is answered with the offset it has
// there (offset parity makes it the same on the destination), as a broker
// answers a duplicate of one of its last five batches, and the destination
// stream starts with the next batch; not found, it goes to the destination.
//
// An agent killed with batches outstanding never knew they were uncertain,
// and its successor knows nothing of them. For those the COMPLETE route
// carries the replicator's record of the last batches of each idempotent
// source producer it copied (Route.copied): a first batch toward the
// destination found there is answered with the copy's offset, without
// searching the source.

// uncertainMax bounds the batches remembered: a client keeps at most five
// in flight per partition, so this covers thousands of producers.
const uncertainMax = 65536

// uncertainKey is one batch: a source producer session's base sequence on
// one partition.
type uncertainKey struct {
	pid   pidKey
	part  tp
	seq   int32
	count int32
}

// uncertainBatches is the agent-wide set of uncertain source batches.
type uncertainBatches struct {
	mu sync.Mutex
	m  map[uncertainKey]time.Time
}

func (u *uncertainBatches) add(k uncertainKey, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[uncertainKey]time.Time{}
	}
	if len(u.m) >= uncertainMax {
		var oldK uncertainKey
		var old time.Time
		for k, t := range u.m {
			if old.IsZero() || t.Before(old) {
				oldK, old = k, t
			}
		}
		delete(u.m, oldK)
	}
	u.m[k] = now
}

// take reports whether k was uncertain, and forgets it.
func (u *uncertainBatches) take(k uncertainKey) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	_, ok := u.m[k]
	delete(u.m, k)
	return ok
}

// batchKey returns the uncertain-batch key of an idempotent,
// non-transactional batch.
func batchKey(records []byte, part tp) (uncertainKey, bool) {
	p, ok := recordbatch.ReadProducer(records)
	if !ok || p.ID < 0 || recordbatch.Transactional(records) {
		return uncertainKey{}, false
	}
	count := int32(binary.BigEndian.Uint32(records[recordbatch.OffNumRecords:]))
	return uncertainKey{pid: pidKey{p.ID, p.Epoch}, part: part, seq: p.BaseSeq, count: count}, true
}

// copiedBatches are a route's source batches, by their uncertain-batch
// key (a pointer keeps Route comparable).
type copiedBatches struct{ offsets map[uncertainKey]int64 }

// offset returns where the copy of batch k is; c may be nil.
func (c *copiedBatches) offset(k uncertainKey) (int64, bool) {
	if c == nil {
		return 0, false
	}
	off, ok := c.offsets[k]
	return off, ok
}

// indexCopied indexes a route's source batches.
func indexCopied(topic string, bs []*batonv1.SourceBatch) (*copiedBatches, error) {
	if len(bs) == 0 {
		return nil, nil
	}
	m := make(map[uncertainKey]int64, len(bs))
	for i, b := range bs {
		switch {
		case b.GetPartition() < 0, b.GetProducerId() < 0, b.GetRecords() < 1, b.GetOffset() < 0,
			b.GetProducerEpoch() < 0 || b.GetProducerEpoch() > math.MaxInt16, b.GetBaseSequence() < 0:
			return nil, fmt.Errorf("source_batches[%d]: partition %d, producer %d epoch %d, sequence %d, %d records at %d: out of range",
				i, b.GetPartition(), b.GetProducerId(), b.GetProducerEpoch(), b.GetBaseSequence(), b.GetRecords(), b.GetOffset())
		}
		m[uncertainKey{pid: pidKey{b.GetProducerId(), int16(b.GetProducerEpoch())}, part: tp{topic, b.GetPartition()},
			seq: b.GetBaseSequence(), count: b.GetRecords()}] = b.GetOffset()
	}
	return &copiedBatches{m}, nil
}

// noteUncertain remembers the idempotent batches of the partitions idx of
// req, whose answer from the source is unknown.
func (a *Agent) noteUncertain(req *kmsg.ProduceRequest, idx []int) {
	now := time.Now()
	flat := 0
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			if contains(idx, flat) {
				if k, ok := batchKey(p.Records, tp{t.Topic, p.Partition}); ok {
					a.uncertain.add(k, now)
				}
			}
			flat++
		}
	}
}

// sourceSearchRecords bounds how far back from the end the agent looks for
// an uncertain batch: the client sent it at most a few batches before its
// last one, but other producers may have written since.
const sourceSearchRecords = 1 << 20

// findInSource returns the offset of the batch k in the source, searching
// back from the partition's end in growing windows.
func (a *Agent) findInSource(ctx context.Context, k uncertainKey) (int64, error) {
	addr, err := a.src.LeaderAddr(ctx, k.part.topic, k.part.partition)
	if err != nil {
		return 0, err
	}
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.SetVersion(max(min(a.src.Version(2, 7), 7), 1))
	lo.ReplicaID = -1
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = k.part.topic
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Partition, lp.Timestamp, lp.CurrentLeaderEpoch = k.part.partition, -1, -1
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	resp, err := a.src.RoundTrip(ctx, addr, lo)
	if err != nil {
		return 0, err
	}
	lr := resp.(*kmsg.ListOffsetsResponse)
	if len(lr.Topics) != 1 || len(lr.Topics[0].Partitions) != 1 {
		return 0, fmt.Errorf("source cluster: ListOffsets answered %d topics", len(lr.Topics))
	}
	if err := kerr.ErrorForCode(lr.Topics[0].Partitions[0].ErrorCode); err != nil {
		return 0, fmt.Errorf("source cluster: ListOffsets: %w", err)
	}
	end := lr.Topics[0].Partitions[0].Offset
	for window := int64(1024); ; window *= 16 {
		from := max(end-window, 0)
		if off, err := a.scanSource(ctx, addr, k, from, end); err == nil || !errors.Is(err, errNotInSource) {
			return off, err
		}
		if from == 0 || window >= sourceSearchRecords {
			return 0, errNotInSource
		}
	}
}

// scanSource fetches [from, end) of k's partition from the source leader at
// addr and returns the base offset of batch k.
func (a *Agent) scanSource(ctx context.Context, addr string, k uncertainKey, from, end int64) (int64, error) {
	for from < end {
		fr := kmsg.NewPtrFetchRequest()
		fr.SetVersion(max(min(a.src.Version(1, 12), 12), 4))
		fr.ReplicaID, fr.MaxWaitMillis, fr.MinBytes, fr.MaxBytes = -1, 0, 1, 16<<20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = k.part.topic
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes, fp.CurrentLeaderEpoch, fp.LogStartOffset = k.part.partition, from, 16<<20, -1, -1
		ft.Partitions = append(ft.Partitions, fp)
		fr.Topics = append(fr.Topics, ft)
		resp, err := a.src.RoundTrip(ctx, addr, fr)
		if err != nil {
			return 0, err
		}
		fres := resp.(*kmsg.FetchResponse)
		if err := kerr.ErrorForCode(fres.ErrorCode); err != nil {
			return 0, fmt.Errorf("source cluster: Fetch: %w", err)
		}
		if len(fres.Topics) != 1 || len(fres.Topics[0].Partitions) != 1 {
			return 0, fmt.Errorf("source cluster: Fetch answered %d topics", len(fres.Topics))
		}
		p := fres.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			return 0, fmt.Errorf("source cluster: Fetch: %w", err)
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
			if got, ok := batchKey(b[:n], k.part); ok && got == k {
				return base, nil
			}
			next = last + 1
			b = b[n:]
		}
		if next == from {
			return 0, errNotInSource // nothing readable here
		}
		from = next
	}
	return 0, errNotInSource
}
