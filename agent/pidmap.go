package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/agent/internal/bufpool"
	"github.com/baton-kafka/baton/internal/errprefix"
	"github.com/baton-kafka/baton/internal/recordbatch"
)

// Idempotent producers across the cutover (docs/design.md §9).
//
// An idempotent producer gets its producer id from the source (the agent
// forwards InitProducerId there), so that PROXY forwarding stays byte for
// byte. Once its topic is COMPLETE its batches go to the destination,
// which never allocated that id and has no state for it: a Kafka 4.5+
// destination refuses a first sequence above 0 on a fresh partition, and
// the id may collide with one the destination hands out. So the first time
// a batch of source producer (id, epoch) must go to the destination, the
// agent asks the destination for a producer id of its own (InitProducerId,
// idempotent), and from then on writes that producer's batches to the
// destination under it, with sequences counted from the first batch it sent
// there, per partition: D sees a stream that starts at 0. A retry of a
// batch carries the client's same base sequence, so it maps to the same
// destination sequence and the destination dedupes it.
//
// A new source epoch (the client re-initialised, or bumped its epoch after
// an error) is a new key, so it gets a fresh destination producer and its
// sequences, restarted at 0 by the client, start at 0 on the destination
// too. Transactional batches are not mapped: transactions cannot span the
// clusters (see docs/agent.md, limits).

// Defaults of the options below.
const (
	// DefaultProducerIDs bounds the producer id map: about 100 bytes per
	// producer plus about 50 per partition it wrote to the destination.
	DefaultProducerIDs = 10000
	// DefaultProducerIDIdle is how long a mapping outlives its producer's
	// last batch: longer than a client keeps retrying one batch (Java's
	// delivery timeout is 2 minutes, librdkafka's message timeout 5), so a
	// retry never finds its mapping gone.
	DefaultProducerIDIdle = 15 * time.Minute
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
// producer's last batch to the destination, overriding 15 minutes.
func ProducerIDIdle(d time.Duration) Opt {
	return optFunc(func(c *config) { c.producerIDIdle = d })
}

// pidKey is a source producer session.
type pidKey struct {
	id    int64
	epoch int16
}

// pidMap maps source producer sessions to destination producer ids. It is
// agent-wide: one producer may reach the agent on several connections.
type pidMap struct {
	max  int
	idle time.Duration
	// alloc asks the destination for an idempotent producer id.
	alloc func(ctx context.Context) (int64, int16, error)
	now   func() time.Time

	mu        sync.Mutex
	m         map[pidKey]*pidEntry
	lastSweep time.Time
}

type pidEntry struct {
	ready chan struct{} // closed once dst or err is set
	dst   pidKey
	err   error

	// Under pidMap.mu:
	used time.Time
	// bases holds, per partition, the client's base sequence of the first
	// batch the agent sent to the destination: the destination's sequence
	// 0.
	bases map[tp]int32
}

func newPIDMap(max int, idle time.Duration, alloc func(context.Context) (int64, int16, error)) *pidMap {
	return &pidMap{max: max, idle: idle, alloc: alloc, now: time.Now, m: map[pidKey]*pidEntry{}}
}

// destination returns the producer fields a batch of src for partition p
// carries on the destination, allocating a destination producer id the
// first time src is seen.
func (m *pidMap) destination(ctx context.Context, src recordbatch.Producer, p tp) (recordbatch.Producer, error) {
	k := pidKey{src.ID, src.Epoch}
	m.mu.Lock()
	e := m.m[k]
	if e == nil {
		e = &pidEntry{ready: make(chan struct{}), bases: map[tp]int32{}}
		m.makeRoom()
		m.m[k] = e
		e.used = m.now()
		m.mu.Unlock()
		id, epoch, err := m.alloc(ctx)
		m.mu.Lock()
		if err != nil {
			e.err = fmt.Errorf("%w: %w", errPIDAlloc, errprefix.Nested(errPrefix, err))
			if m.m[k] == e {
				delete(m.m, k) // the next batch asks again
			}
		} else {
			e.dst = pidKey{id, epoch}
		}
		close(e.ready)
	}
	m.mu.Unlock()
	select {
	case <-e.ready:
	case <-ctx.Done():
		return recordbatch.Producer{}, ctx.Err()
	}
	if e.err != nil {
		return recordbatch.Producer{}, e.err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e.used = m.now()
	base, ok := e.bases[p]
	if !ok {
		base = src.BaseSeq
		e.bases[p] = base
	}
	d := recordbatch.SeqDistance(base, src.BaseSeq)
	if d > math.MaxInt32/2 {
		// Further ahead than any client runs (5 batches in flight), so
		// it is behind: the sequence wrapped below the base.
		return recordbatch.Producer{}, fmt.Errorf("%w: sequence %d, stream starts at %d", errBeforeStream, src.BaseSeq, base)
	}
	return recordbatch.Producer{ID: e.dst.id, Epoch: e.dst.epoch, BaseSeq: d}, nil
}

// started reports whether src already has a destination stream on p.
func (m *pidMap) started(src recordbatch.Producer, p tp) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.m[pidKey{src.ID, src.Epoch}]
	if e == nil {
		return false
	}
	_, ok := e.bases[p]
	return ok
}

// makeRoom drops idle mappings (at most every idle/4, or when full), then
// the least recently used ones while the map is full. Allocations still
// under way are never dropped. Called with mu held, for a new entry: new
// producers are rare, so an O(n) scan then is cheap.
func (m *pidMap) makeRoom() {
	now := m.now()
	full := len(m.m) >= m.max
	if !full && now.Sub(m.lastSweep) < m.idle/4 {
		return
	}
	m.lastSweep = now
	for k, e := range m.m {
		if allocated(e) && now.Sub(e.used) > m.idle {
			delete(m.m, k)
		}
	}
	for len(m.m) >= m.max {
		var oldK pidKey
		var old *pidEntry
		for k, e := range m.m {
			if allocated(e) && (old == nil || e.used.Before(old.used)) {
				oldK, old = k, e
			}
		}
		if old == nil {
			return // every entry is being allocated; go over the bound briefly
		}
		delete(m.m, oldK)
	}
}

func allocated(e *pidEntry) bool {
	select {
	case <-e.ready:
		return true
	default:
		return false
	}
}

// len is how many producers are mapped.
func (m *pidMap) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.m)
}

// initDestinationPID asks the destination for an idempotent producer id.
func (a *Agent) initDestinationPID(ctx context.Context) (int64, int16, error) {
	v := a.dst.Version(22, math.MaxInt16)
	if v < 0 {
		return 0, 0, errors.New("destination cluster: InitProducerId not supported")
	}
	req := kmsg.NewPtrInitProducerIDRequest()
	req.SetVersion(v)
	req.TransactionTimeoutMillis = math.MaxInt32 // not transactional: unused, as Java sends it
	resp, _, err := a.dst.Ask(ctx, req)
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

// mapProducers rewrites, for every partition of a produce request that
// goes to the destination, an idempotent non-transactional batch to the
// destination producer id mapped from the client's (see above). The
// client's bytes stay as they are (the filter contract forbids changing
// them, and pin.go reads the client's sequences from them): each rewritten
// batch is a pooled copy, returned by index into the request's flattened
// partition list; release returns the copies once sent. A partition whose
// mapping fails gets the retriable error in codes and leaves the shards.
//
// A partition whose batch is a retry of an uncertain source write that the
// source holds (see uncertain.go) is answered from dups, with the batch's
// offset there, and leaves the shards too.
func (r *router) mapProducers(ctx context.Context, req *kmsg.ProduceRequest, shards []*shard, codes []int16) (_ []*shard, rewritten map[int][]byte, dups map[int]int64) {
	if req.TransactionID != nil {
		return shards, nil, nil
	}
	var want []bool // by flattened partition index: goes to the destination
	for _, s := range shards {
		if s.up != r.a.dst {
			continue
		}
		if want == nil {
			want = make([]bool, len(codes))
		}
		for _, i := range s.idx {
			want[i] = true
		}
	}
	if want == nil { // PROXY and REJECT traffic: nothing to map
		return shards, nil, nil
	}
	var drop map[int]bool
	actx, cancel := context.WithTimeout(ctx, r.a.cfg.forwardDeadline)
	defer cancel()
	i := 0
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			if !want[i] {
				i++
				continue
			}
			src, ok := recordbatch.ReadProducer(p.Records)
			if !ok || src.ID < 0 || recordbatch.Transactional(p.Records) {
				i++
				continue
			}
			n, err := recordbatch.BatchLen(p.Records)
			if err != nil {
				i++
				continue // the broker refuses it as the client wrote it
			}
			part := tp{t.Topic, p.Partition}
			if off, ok := r.a.alreadyInSource(actx, src, part, p.Records); ok {
				if drop == nil {
					drop = map[int]bool{}
				}
				if dups == nil {
					dups = map[int]int64{}
				}
				drop[i], dups[i], codes[i] = true, off, 0
				i++
				continue
			}
			dst, err := r.a.pids.destination(actx, src, part)
			if errors.Is(err, errBeforeStream) {
				r.a.log.Warn("produce to the destination refused: the batch comes before its producer's stream there (a retry from before the mapping was evicted)",
					"topic", t.Topic, "partition", p.Partition, "producer_id", src.ID, "err", err)
				if drop == nil {
					drop = map[int]bool{}
				}
				drop[i] = true
				codes[i] = kerr.OutOfOrderSequenceNumber.Code
				i++
				continue
			}
			if err != nil {
				if drop == nil { // one line per request, not per partition
					r.a.log.Warn("produce to the destination answered retriable: no producer id mapping",
						"topic", t.Topic, "partition", p.Partition, "producer_id", src.ID, "err", err)
				}
				if drop == nil {
					drop = map[int]bool{}
				}
				drop[i] = true
				codes[i] = retriable
				i++
				continue
			}
			b := append(bufpool.Get(len(p.Records))[:0], p.Records...)
			recordbatch.SetProducer(b[:n], dst)
			if rewritten == nil {
				rewritten = map[int][]byte{}
			}
			rewritten[i] = b
			i++
		}
	}
	return withoutParts(shards, drop), rewritten, dups
}

// alreadyInSource reports whether a batch about to start its producer's
// stream toward the destination is a retry of a source write the
// replicator copied (the route says so) or of an uncertain one the source
// holds, and its offset (see uncertain.go).
func (a *Agent) alreadyInSource(ctx context.Context, src recordbatch.Producer, part tp, records []byte) (int64, bool) {
	if a.pids.started(src, part) {
		return 0, false // the destination stream dedupes retries from here on
	}
	k, ok := batchKey(records, part)
	if !ok {
		return 0, false
	}
	if off, ok := a.routes.Lookup(part.topic).copied.offset(k); ok {
		a.uncertain.take(k)
		a.log.Debug("retry of a source write answered from the replicator's copy", "topic", part.topic,
			"partition", part.partition, "producer_id", src.ID, "sequence", src.BaseSeq, "offset", off)
		return off, true
	}
	if !a.uncertain.take(k) {
		return 0, false
	}
	off, err := a.findInSource(ctx, k)
	switch {
	case err == nil:
		a.log.Debug("retry of an uncertain write answered from the source's copy", "topic", part.topic,
			"partition", part.partition, "producer_id", src.ID, "sequence", src.BaseSeq, "offset", off)
		return off, true
	case errors.Is(err, errNotInSource):
	default:
		a.log.Warn("could not tell whether the source holds a retried batch; writing it to the destination (it may be a duplicate)",
			"topic", part.topic, "partition", part.partition, "producer_id", src.ID, "sequence", src.BaseSeq, "err", err)
	}
	return 0, false
}

// withoutParts takes the flattened partition indexes in drop out of the
// shards, and drops shards left empty.
func withoutParts(shards []*shard, drop map[int]bool) []*shard {
	if len(drop) == 0 {
		return shards
	}
	out := shards[:0]
	for _, s := range shards {
		idx := s.idx[:0]
		for _, j := range s.idx {
			if !drop[j] {
				idx = append(idx, j)
			}
		}
		if s.idx = idx; len(idx) > 0 {
			out = append(out, s)
		}
	}
	return out
}
