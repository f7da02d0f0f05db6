package replicator

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/baton-kafka/baton/internal/recordbatch"
)

// Recent source batches (docs/design.md §9).
//
// A client whose batch was written to the source but whose answer was lost
// (its agent was killed, or answered retriable) retries it. Before the
// cutover the source dedupes the retry by its sequence; after it the retry
// goes to the destination, which holds the replicator's copy under the
// replicator's producer id and cannot recognise it. So the replicator keeps,
// per partition and idempotent source producer session, the last batches it
// copied, as a broker keeps the last five per producer for its own dedupe,
// and Stop hands them over: the control plane gives them to the agents with
// the COMPLETE route, and an agent answers such a retry with the copy's
// offset.

// Defaults of the options below.
const (
	// DefaultRecentWindow is how long a copied batch stays recent: longer
	// than any client retries one batch (Java's delivery timeout is 2
	// minutes, librdkafka's message timeout 5), since the write came after
	// the batch's first send.
	DefaultRecentWindow = 10 * time.Minute
	// DefaultRecentBatches bounds the batches Stop hands over per topic,
	// the newest kept: each is about 30 bytes in every agent's route.
	DefaultRecentBatches = 10000
)

// recentPerProducer is how many batches per producer session and partition
// are kept: a client has at most five in flight per partition.
const recentPerProducer = 5

// RecentWindow sets how long a copied batch stays among a topic's recent
// batches, overriding 10 minutes.
func RecentWindow(d time.Duration) Opt { return optFunc(func(c *config) { c.recentWindow = d }) }

// RecentBatches bounds the recent batches Stop returns per topic, the
// newest kept, overriding 10000. A retry of a batch left out is written to
// the destination again (an idempotent duplicate): size it above the
// producers a topic has times its partitions times five.
func RecentBatches(n int) Opt { return optFunc(func(c *config) { c.recentBatches = n }) }

// SourceBatch is an idempotent, non-transactional batch written to the
// source by a client and copied: the client's producer fields and the
// copy's base offset on the destination.
type SourceBatch struct {
	Partition  int32 `json:"p"`
	ProducerID int64 `json:"id"`
	Epoch      int16 `json:"e"`
	BaseSeq    int32 `json:"s"`
	Records    int32 `json:"n"`
	Offset     int64 `json:"o"`
	// Copied is when the replicator copied it.
	Copied time.Time `json:"-"`
}

type sessionKey struct {
	id    int64
	epoch int16
}

// recentBatches is one partition's recent batches, by producer session,
// oldest first. It is written by the partition's copy step and read by
// Stop, both under Replicator.mu.
type recentBatches map[sessionKey][]SourceBatch

// note records a copied batch b (as the source holds it), written to the
// destination at offset.
// Sessions idle past window are dropped as new ones come.
func (r recentBatches) note(partition int32, b batch, offset int64, now time.Time, window time.Duration) {
	p, ok := recordbatch.ReadProducer(b.raw)
	if !ok || p.ID < 0 || b.transactional() {
		return
	}
	k := sessionKey{p.ID, p.Epoch}
	if _, ok := r[k]; !ok && len(r) > 0 && len(r)%1024 == 0 {
		r.expire(now.Add(-window)) // amortised: once per 1024 new sessions
	}
	sb := SourceBatch{Partition: partition, ProducerID: p.ID, Epoch: p.Epoch, BaseSeq: p.BaseSeq,
		Records: b.numRecords, Offset: offset, Copied: now}
	s := r[k]
	for _, have := range s {
		if have.Offset == offset {
			return // read back again after a failed read
		}
	}
	if len(s) == recentPerProducer {
		s = append(s[:0], s[1:]...)
	}
	r[k] = append(s, sb)
}

// expire drops the sessions whose last batch is older than since.
func (r recentBatches) expire(since time.Time) {
	for k, s := range r {
		if s[len(s)-1].Copied.Before(since) {
			delete(r, k)
		}
	}
}

// newest returns the batches of parts copied at or after since, the newest
// limit of them (all if limit <= 0), ordered by partition and offset, and
// how many it left out for the limit.
func newest(parts []recentBatches, since time.Time, limit int) ([]SourceBatch, int) {
	var out []SourceBatch
	for _, r := range parts {
		for _, s := range r {
			for _, b := range s {
				if !b.Copied.Before(since) {
					out = append(out, b)
				}
			}
		}
	}
	dropped := 0
	if limit > 0 && len(out) > limit {
		slices.SortFunc(out, func(a, b SourceBatch) int { return b.Copied.Compare(a.Copied) })
		dropped, out = len(out)-limit, out[:limit]
	}
	slices.SortFunc(out, func(a, b SourceBatch) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	return out, dropped
}

// recentSeedRecords is how far back from where a copy resumes a replicator
// reads the source's batches to seed its record: a restarted replicator
// would otherwise know nothing of the batches its predecessor copied.
const recentSeedRecords = 10000

// seedRecent fills p's record of recent batches from the source batches
// in [max(next-recentSeedRecords, the log start), next), where the copy
// resumes. Only under exact parity (a batch's destination offset is its
// source offset), once per partition state. A failed fetch is returned, so
// that the partition's start is retried as any failed copy step is (the
// copy reads the same leader): given up, the record would be lost for good.
func (r *Replicator) seedRecent(ctx context.Context, p *partState, next int64) error {
	r.mu.Lock()
	exact := r.maps[p.topic].Exact(p.p)
	seeded := p.seeded
	p.seeded = true
	r.mu.Unlock()
	if seeded || !exact || next <= 0 {
		return nil
	}
	from := max(next-recentSeedRecords, 0)
	starts, err := r.srcAdm.ListStartOffsets(ctx, p.topic)
	if err == nil {
		if s, ok := starts.Lookup(p.topic, p.p); ok && s.Err == nil {
			from = max(from, s.Offset)
		}
	}
	now, noted := r.now(), 0
	for from < next {
		fp, err := r.fetch(ctx, p, from)
		if err != nil {
			// Read again at the partition's next start (a rollback
			// restarts the copy, often while S is in trouble).
			r.mu.Lock()
			p.seeded = false
			r.mu.Unlock()
			return fmt.Errorf("reading recent source batches from %d: %w", from, err)
		}
		batches, _ := splitBatches(fp.RecordBatches)
		at := from
		for _, b := range batches {
			if b.baseOffset >= next {
				at = next
				break
			}
			at = b.lastOffset() + 1
			if b.baseOffset < from || b.control() || b.numRecords == 0 || !b.contiguous() {
				continue
			}
			r.mu.Lock()
			p.recent.note(p.p, b, b.baseOffset, now, r.cfg.recentWindow)
			r.mu.Unlock()
			noted++
		}
		if at == from {
			break // nothing readable: leave the record as it is
		}
		from = at
	}
	r.log.Debug("recent source batches read", "topic", p.topic, "partition", p.p, "batches", noted)
	return nil
}
