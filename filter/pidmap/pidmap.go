// Package pidmap owns idempotent producers across the cutover: the filter
// that writes, for each idempotent batch bound for the destination, the
// destination producer id and sequence mapped from the client's source
// ones, and that answers a retry of a batch the source already holds with
// its offset there instead of writing it twice.
//
// An idempotent producer gets its producer id from the source (the agent
// forwards InitProducerId there), so that PROXY forwarding stays byte for
// byte. Once its topic is COMPLETE its batches go to the destination,
// which never allocated that id and has no state for it: a Kafka 4.5+
// destination refuses a first sequence above 0 on a fresh partition, and
// the id may collide with one the destination hands out. So the first time
// a batch of source producer session (id, epoch) goes to the destination,
// the filter asks the destination for a producer id of its own
// (Allocator), and from then on that session's batches go there under it,
// with sequences counted from the first batch sent there, per partition:
// the destination sees a stream that starts at 0. A retry carries the
// client's same base sequence, so it maps to the same destination sequence
// and the destination dedupes it. A new source epoch (the client
// re-initialised) is a new session: a fresh destination producer, its
// sequences from 0 again. Transactional batches are not mapped:
// transactions cannot span the clusters.
//
// # Batches the source already holds
//
// A batch forwarded to the source and answered retriable because its
// outcome was unknown (Part.Uncertain: no answer within the forward
// deadline, the connection lost) may have been written there. Kafka would
// dedupe the client's retry by its sequence, but a retry after COMPLETE
// goes to the destination, which has no state for the source session:
// written again, it is a duplicate of the copy the replicator made. So the
// filter remembers uncertain batches (on the response side), and when a
// retry of one is the first batch of its session and partition toward the
// destination, it asks the Source for it: found, the retry is answered
// with its offset there (offset parity makes it the same on the
// destination), as a broker answers a duplicate of one of its last five
// batches, and the destination stream starts with the next batch.
//
// # Batches resent under a new epoch
//
// A client that bumps its epoch (librdkafka does on some errors; Java and
// franz-go on others) renumbers its unacknowledged batches from sequence 0
// of the new epoch and sends them again, the same records in the same
// batches. No cluster can dedupe those: the new epoch is a new session.
// Direct to one cluster that is a duplicate whenever a renumbered batch had
// been written; across the cutover the agent can do better, because it
// knows which batches it sent without learning their outcome. So an
// uncertain batch is remembered with a fingerprint of its records (its
// header without the producer fields and CRC, and its records' bytes),
// whether it went to the source or, under its mapped producer, to the
// destination (Config.Destination); the first batch of a new session on
// a partition toward the destination whose records match one of the same
// producer id under another epoch is looked for where that one went, and
// answered with its offset when found.
//
// An agent killed with batches outstanding never knew they were
// uncertain, and its successor knows nothing of them. For those the
// COMPLETE route carries the replicator's record of the last batches of
// each idempotent source session it copied (Config.Copied): a first batch
// toward the destination found there is answered with the copy's offset.
//
// # Restarts
//
// The destination dedupes a retry only under the producer id, epoch and
// sequence the first send carried. An agent restarted with a client's
// batches to the destination outstanding would map the client's retries to
// a fresh destination producer id, and the destination would write them
// again. So, with a Journal, each partition's place in a session's
// destination stream (the Mapping) is made durable before the first batch
// that needs it is sent, and a restarted agent takes the mappings back
// (Config.Restored): the retry goes out under the same destination
// producer and sequence, and the destination answers it as a duplicate.
// The uncertain batches are journaled too, before the client is answered
// (Config.RestoredUncertain), so that a resend under a new epoch through
// the restarted agent is still recognised.
//
// The filter MUST come after the route filter (it maps only parts routed
// to the destination) and before the Handler; it never holds or stops a
// request. Its state is agent-wide (one producer may use several
// connections): one Factory per agent.
package pidmap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/internal/bufpool"
	"github.com/baton-kafka/baton/internal/errprefix"
	"github.com/baton-kafka/baton/internal/recordbatch"
	"github.com/baton-kafka/baton/migration"
)

// Sentinel errors. Every message starts with "pidmap: ".
var (
	// ErrBadConfig refuses a Config, naming the field at fault.
	ErrBadConfig = errors.New("pidmap: bad config")
	// ErrAllocate wraps a failure to get a producer id from the
	// destination; the part is answered retriable and the next batch
	// asks again.
	ErrAllocate = errors.New("pidmap: no producer id from the destination")
	// ErrBeforeStream: a batch whose sequence comes before the first one
	// sent to the destination for its partition under the current
	// mapping (a retry from before an eviction). No destination sequence
	// can hold it; it is refused with OUT_OF_ORDER_SEQUENCE_NUMBER, as
	// the destination would refuse it, instead of being sent there with
	// a sequence wrapped to about 2^31.
	ErrBeforeStream = errors.New("pidmap: batch precedes the destination stream of its producer and partition")
	// ErrJournal wraps a failure to make a mapping durable; the part is
	// answered retriable and the next batch tries again.
	ErrJournal = errors.New("pidmap: could not record the producer id mapping")
	// ErrNotFound is what a Finder returns (wrapped) when its cluster
	// holds no such batch in the part of the log it searched.
	ErrNotFound = errors.New("pidmap: batch not found")
)

const errPrefix = "pidmap: "

// Defaults of the Config fields.
const (
	// DefaultMaxProducers bounds the map: about 100 bytes per producer
	// plus about 50 per partition it wrote to the destination.
	DefaultMaxProducers = 10000
	// DefaultIdle is how long a mapping outlives its producer's last
	// batch: longer than a client keeps retrying one batch (Java's
	// delivery timeout is 2 minutes, librdkafka's message timeout 5), so
	// a retry never finds its mapping gone.
	DefaultIdle = 15 * time.Minute
	// uncertainMax bounds the uncertain batches remembered: a client
	// keeps at most five in flight per partition, so this covers
	// thousands of producers.
	uncertainMax = 65536
)

// retriable answers a part the filter could not map: the client resends it.
var retriable = kerr.NotLeaderForPartition.Code

// Batch is one idempotent record batch: a producer session's base
// sequence and record count on one partition.
type Batch struct {
	Topic      string
	Partition  int32
	ProducerID int64
	Epoch      int16
	Seq        int32
	Records    int32
}

// BatchOf returns the Batch of the first record batch in records; ok is
// false unless it is idempotent and not transactional.
func BatchOf(topic string, partition int32, records []byte) (Batch, bool) {
	p, ok := recordbatch.ReadProducer(records)
	if !ok || p.ID < 0 || recordbatch.Transactional(records) {
		return Batch{}, false
	}
	return Batch{Topic: topic, Partition: partition, ProducerID: p.ID, Epoch: p.Epoch, Seq: p.BaseSeq,
		Records: int32(binary.BigEndian.Uint32(records[recordbatch.OffNumRecords:]))}, true
}

// Copied is the offsets of batches the replicator copied, by batch. A nil
// *Copied holds none.
type Copied struct{ offsets map[Batch]int64 }

// NewCopied indexes copied batches; nil when there are none.
func NewCopied(offsets map[Batch]int64) *Copied {
	if len(offsets) == 0 {
		return nil
	}
	return &Copied{offsets}
}

// Offset returns where the copy of b is.
func (c *Copied) Offset(b Batch) (int64, bool) {
	if c == nil {
		return 0, false
	}
	off, ok := c.offsets[b]
	return off, ok
}

// Len is how many batches c holds.
func (c *Copied) Len() int {
	if c == nil {
		return 0
	}
	return len(c.offsets)
}

// Allocator hands out producer ids on the destination.
type Allocator interface {
	// Allocate returns a fresh idempotent producer id and epoch.
	Allocate(ctx context.Context) (id int64, epoch int16, err error)
}

// Finder finds batches in one cluster.
type Finder interface {
	// Find returns the base offset of b in the cluster, or an error
	// wrapping ErrNotFound when it is not there.
	Find(ctx context.Context, b Batch) (int64, error)
}

// Session is a producer session on one cluster: its id and epoch.
type Session struct {
	ID    int64
	Epoch int16
}

// Mapping is where one partition of a source session's destination stream
// starts: the destination session its batches are written under, and
// Base, the client's base sequence that is the destination's sequence 0.
type Mapping struct {
	Source, Destination Session
	Topic               string
	Partition           int32
	Base                int32
}

// Journal keeps mappings and uncertain batches beyond the agent process.
type Journal interface {
	// Record MUST return only once m is durable: the batch that needed it
	// is sent to the destination as soon as it returns. An error keeps the
	// batch from being sent (it is answered retriable).
	Record(m Mapping) error
	// RecordUncertain MUST return only once u is durable: the client is
	// answered as soon as it returns. An error is logged at WARN; u is
	// kept in memory.
	RecordUncertain(u Uncertain) error
}

// Config configures the filter.
type Config struct {
	// Allocator is required.
	Allocator Allocator
	// Source, if set, is searched for a retry of a batch sent to the
	// source whose outcome is unknown; nil: such a retry goes to the
	// destination.
	Source Finder
	// Destination, if set, is searched for a batch sent to the destination
	// whose outcome is unknown when the client resends it under another
	// epoch (or after its mapping was evicted); nil: such a resend is
	// written to the destination again.
	Destination Finder
	// Copied, if set, returns the batches the replicator copied for a
	// topic (the COMPLETE route's).
	Copied func(topic string) *Copied
	// Journal, if set, records every new Mapping before a batch is sent
	// under it; nil: mappings live in memory only, and a restarted agent
	// may write a retry of a batch it sent to the destination a second
	// time.
	Journal Journal
	// Restored are the mappings an earlier agent process recorded, oldest
	// first; for a source session recorded twice (mapped again after an
	// eviction) the later destination session wins. At most MaxProducers
	// sessions are taken, the newest.
	Restored []Mapping
	// RestoredUncertain are the uncertain batches an earlier agent process
	// recorded; those older than Idle are dropped.
	RestoredUncertain []Uncertain
	// MaxProducers bounds how many source sessions are mapped at once
	// (default DefaultMaxProducers). When full, a new session evicts
	// mappings idle past Idle first, then the least recently used one.
	// An evicted session that writes again gets a fresh destination
	// producer id, its stream starting at the batch it sends then; a
	// retry of a batch sent before is refused with
	// OUT_OF_ORDER_SEQUENCE_NUMBER, which librdkafka treats as fatal:
	// size the bound above the producers one agent serves.
	MaxProducers int
	// Idle is how long a mapping is kept after its session's last batch
	// to the destination (default DefaultIdle).
	Idle time.Duration
	// Timeout bounds the destination and source requests made for one
	// produce (default migration.DefaultForwardDeadline).
	Timeout time.Duration
	// Log receives the WARNs a user must act on (default: discarded).
	Log *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Factory is the filter's agent-wide state, and builds the filter per
// connection.
type Factory struct {
	cfg       Config
	sessions  sessions
	uncertain uncertain
}

var (
	_ filter.Factory        = (*Factory)(nil)
	_ filter.RequestFilter  = (*conn)(nil)
	_ filter.ResponseFilter = (*conn)(nil)
)

// New returns the filter's factory.
func New(cfg Config) (*Factory, error) {
	switch {
	case cfg.Allocator == nil:
		return nil, fmt.Errorf("%w: Allocator is required", ErrBadConfig)
	case cfg.MaxProducers < 0:
		return nil, fmt.Errorf("%w: MaxProducers %d is negative", ErrBadConfig, cfg.MaxProducers)
	case cfg.Idle < 0:
		return nil, fmt.Errorf("%w: Idle %v is negative", ErrBadConfig, cfg.Idle)
	}
	if cfg.MaxProducers == 0 {
		cfg.MaxProducers = DefaultMaxProducers
	}
	if cfg.Idle == 0 {
		cfg.Idle = DefaultIdle
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = migration.DefaultForwardDeadline
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	f := &Factory{cfg: cfg}
	f.sessions = sessions{max: cfg.MaxProducers, idle: cfg.Idle, alloc: cfg.Allocator, journal: cfg.Journal,
		now: cfg.Now, m: map[Session]*session{}}
	f.sessions.restore(cfg.Restored)
	now := cfg.Now()
	for _, u := range cfg.RestoredUncertain {
		if now.Sub(u.At) <= cfg.Idle {
			f.uncertain.add(u, cfg.Idle)
		}
	}
	return f, nil
}

// Name implements filter.Factory.
func (*Factory) Name() string { return "pidmap" }

// New implements filter.Factory.
func (f *Factory) New(filter.ConnInfo) any { return &conn{f} }

// Producers is how many source sessions are mapped now.
func (f *Factory) Producers() int { return f.sessions.len() }

// Mappings returns every mapping held now, those still being recorded
// included: what a Journal rewritten from it must keep.
func (f *Factory) Mappings() []Mapping { return f.sessions.mappings() }

// UncertainBatches returns the uncertain batches held now: what a Journal
// rewritten from it must keep.
func (f *Factory) UncertainBatches() []Uncertain {
	u := &f.uncertain
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]Uncertain, 0, u.n)
	for _, l := range u.m {
		out = append(out, l...)
	}
	return out
}

type conn struct{ f *Factory }

// OnRequest maps every idempotent, non-transactional part routed to the
// destination: answered when the source already holds it, else given
// destination producer fields in a copy of its bytes (Part.Send). A part
// that cannot be mapped is answered: retriable when no producer id could
// be had, OUT_OF_ORDER_SEQUENCE_NUMBER when it precedes its stream.
func (c *conn) OnRequest(ctx context.Context, x *filter.Exchange) filter.Status {
	req, ok := x.Req.(*kmsg.ProduceRequest)
	if !ok || req.TransactionID != nil {
		return filter.Continue
	}
	parts := x.Parts()
	f := c.f
	var actx context.Context
	warned := false // one WARN per request, not per partition
	for i := range parts {
		p := &parts[i]
		if p.To != filter.Destination || p.Answered {
			continue
		}
		b, ok := BatchOf(p.Topic, p.Partition, p.Records)
		if !ok {
			continue
		}
		n, err := recordbatch.BatchLen(p.Records)
		if err != nil {
			continue // the broker refuses it as the client wrote it
		}
		if actx == nil {
			var cancel context.CancelFunc
			actx, cancel = context.WithTimeout(ctx, f.cfg.Timeout)
			defer cancel()
		}
		if off, ok := f.alreadyWritten(actx, b, p.Records[:n]); ok {
			p.Answered, p.Code, p.Offset = true, 0, off
			continue
		}
		dst, err := f.sessions.destination(actx, b)
		switch {
		case errors.Is(err, ErrBeforeStream):
			f.cfg.Log.Warn("produce to the destination refused: the batch comes before its producer's stream there (a retry from before the mapping was evicted; raise the agent's producer id bound)",
				"topic", p.Topic, "partition", p.Partition, "producer_id", b.ProducerID, "err", err)
			p.Answer(kerr.OutOfOrderSequenceNumber.Code)
			continue
		case err != nil:
			if !warned {
				msg := "produce to the destination answered retriable: no producer id from the destination; check that it is reachable"
				if errors.Is(err, ErrJournal) {
					msg = "produce to the destination answered retriable: the producer id mapping could not be made durable; check the agent's state directory (space, permissions)"
				}
				f.cfg.Log.Warn(msg, "topic", p.Topic, "partition", p.Partition, "producer_id", b.ProducerID, "err", err)
				warned = true
			}
			p.Answer(retriable)
			continue
		}
		out := append(bufpool.Get(len(p.Records))[:0], p.Records...)
		recordbatch.SetProducer(out[:n], dst)
		p.Send = out
	}
	return filter.Continue
}

// OnResponse remembers the parts whose outcome is unknown, where they went
// (the source, or the destination under their mapped producer), and notes
// the destination streams that a sent batch started: from then on the
// destination dedupes its session's retries on that partition.
func (c *conn) OnResponse(_ context.Context, x *filter.Exchange) filter.Status {
	var now time.Time
	warnedJournal := false // one WARN per response
	for _, p := range x.Parts() {
		sent := p.To == filter.Destination && p.Via != nil
		if !p.Uncertain && !sent {
			continue
		}
		b, ok := BatchOf(p.Topic, p.Partition, p.Records)
		if !ok {
			continue
		}
		if sent {
			c.f.sessions.confirm(b)
			if !p.Uncertain {
				c.f.uncertain.take(b)
				continue
			}
		}
		n, err := recordbatch.BatchLen(p.Records)
		if err != nil {
			continue
		}
		u := Uncertain{Batch: b, Print: Fingerprint(p.Records[:n])}
		if sent {
			if u.Sent, ok = c.f.sessions.sentAs(b); !ok {
				continue // evicted meanwhile
			}
			u.ToDestination = true
		}
		if now.IsZero() {
			now = c.f.cfg.Now()
		}
		u.At = now
		c.f.uncertain.add(u, c.f.cfg.Idle)
		if j := c.f.cfg.Journal; j != nil {
			// Before the client's answer: a client may bump its epoch on
			// it, and resend through the agent started in this one's place.
			if err := j.RecordUncertain(u); err != nil && !warnedJournal {
				c.f.cfg.Log.Warn("an uncertain batch could not be made durable; an agent restarted before the client resends it may write it twice; check the agent's state directory (space, permissions)",
					"topic", b.Topic, "partition", b.Partition, "producer_id", b.ProducerID, "err", err)
				warnedJournal = true
			}
		}
	}
	return filter.Continue
}

// alreadyWritten reports whether b, about to start its session's stream
// toward the destination, is a batch already written: a retry of a source
// write the replicator copied (the route says so), or a retry or an epoch
// bump's resend of an uncertain write that the cluster it went to holds;
// and its offset. An uncertain batch is forgotten only once that cluster
// is known not to hold it, or once a batch of its session was sent to the
// destination there with a known outcome (OnResponse): a retry refused
// unsent (no destination leader, say) is searched for again.
func (f *Factory) alreadyWritten(ctx context.Context, b Batch, records []byte) (int64, bool) {
	if f.sessions.started(b) {
		return 0, false // the destination stream dedupes retries from here on
	}
	if f.cfg.Copied != nil {
		if off, ok := f.cfg.Copied(b.Topic).Offset(b); ok {
			f.cfg.Log.Debug("retry of a source write answered from the replicator's copy", "topic", b.Topic,
				"partition", b.Partition, "producer_id", b.ProducerID, "sequence", b.Seq, "offset", off)
			return off, true
		}
	}
	for _, u := range f.uncertain.match(b, records) {
		where, finder, target := "source", f.cfg.Source, u.Batch
		if u.ToDestination {
			where, finder, target = "destination", f.cfg.Destination, u.Sent
		}
		if finder == nil {
			continue
		}
		off, err := finder.Find(ctx, target)
		switch {
		case err == nil:
			f.cfg.Log.Debug("uncertain write answered from the "+where+"'s copy", "topic", b.Topic,
				"partition", b.Partition, "producer_id", b.ProducerID, "epoch", b.Epoch, "sequence", b.Seq,
				"sent_epoch", u.Batch.Epoch, "sent_sequence", u.Batch.Seq, "offset", off)
			return off, true
		case errors.Is(err, ErrNotFound):
			f.uncertain.take(u.Batch)
		default:
			f.cfg.Log.Warn("could not tell whether the "+where+" holds a retried batch; writing it to the destination (it may be a duplicate)",
				"topic", b.Topic, "partition", b.Partition, "producer_id", b.ProducerID, "sequence", b.Seq, "err", err)
			return 0, false
		}
	}
	return 0, false
}

// partKey is one partition.
type partKey struct {
	topic     string
	partition int32
}

// sessions maps source producer sessions to destination producer ids.
type sessions struct {
	max     int
	idle    time.Duration
	alloc   Allocator
	journal Journal // nil: in memory only
	now     func() time.Time

	mu        sync.Mutex
	m         map[Session]*session
	lastSweep time.Time
}

type session struct {
	ready chan struct{} // closed once dst or err is set
	dst   Session
	err   error

	// Under sessions.mu:
	used time.Time
	// bases holds, per partition, where the session's destination stream
	// starts.
	bases map[partKey]*base
	// sent holds the partitions where a batch of the session was sent
	// to the destination (its stream there has started).
	sent map[partKey]bool
}

// base is the client's base sequence of the first batch mapped toward the
// destination on a partition: the destination's sequence 0.
type base struct {
	seq int32
	// recorded is closed once the Journal made the mapping durable (err
	// says if it could not); nil when nothing is to be recorded.
	recorded chan struct{}
	err      error
}

// restore takes back the mappings an earlier process recorded: the newest
// max sessions, each with the destination session it was last mapped to.
func (s *sessions) restore(ms []Mapping) {
	if len(ms) == 0 {
		return
	}
	now := s.now()
	order := make([]Session, 0)
	for _, m := range ms {
		e := s.m[m.Source]
		if e == nil || e.dst != m.Destination {
			if e == nil {
				order = append(order, m.Source)
			}
			ready := make(chan struct{})
			close(ready)
			e = &session{ready: ready, dst: m.Destination, used: now, bases: map[partKey]*base{}}
			s.m[m.Source] = e
		}
		e.bases[partKey{m.Topic, m.Partition}] = &base{seq: m.Base}
	}
	for _, k := range order[:max(len(order)-s.max, 0)] {
		delete(s.m, k)
	}
}

// mappings returns every base held now.
func (s *sessions) mappings() []Mapping {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Mapping
	for k, e := range s.m {
		if !allocated(e) || e.err != nil {
			continue
		}
		for p, b := range e.bases {
			out = append(out, Mapping{Source: k, Destination: e.dst, Topic: p.topic, Partition: p.partition, Base: b.seq})
		}
	}
	return out
}

// destination returns the producer fields b carries on the destination,
// allocating a destination producer id the first time its session is seen
// and, with a journal, recording where its stream starts on b's partition
// before b may be sent there.
func (s *sessions) destination(ctx context.Context, b Batch) (recordbatch.Producer, error) {
	k := Session{b.ProducerID, b.Epoch}
	s.mu.Lock()
	e := s.m[k]
	if e == nil {
		e = &session{ready: make(chan struct{}), bases: map[partKey]*base{}}
		s.makeRoom()
		s.m[k] = e
		e.used = s.now()
		s.mu.Unlock()
		id, epoch, err := s.alloc.Allocate(ctx)
		s.mu.Lock()
		if err != nil {
			e.err = fmt.Errorf("%w: %w", ErrAllocate, errprefix.Nested(errPrefix, err))
			if s.m[k] == e {
				delete(s.m, k) // the next batch asks again
			}
		} else {
			e.dst = Session{id, epoch}
		}
		close(e.ready)
	}
	s.mu.Unlock()
	select {
	case <-e.ready:
	case <-ctx.Done():
		return recordbatch.Producer{}, ctx.Err()
	}
	if e.err != nil {
		return recordbatch.Producer{}, e.err
	}
	bs, err := s.base(ctx, k, e, b)
	if err != nil {
		return recordbatch.Producer{}, err
	}
	d := recordbatch.SeqDistance(bs, b.Seq)
	if d > math.MaxInt32/2 {
		// Further ahead than any client runs (5 batches in flight), so
		// it is behind: the sequence wrapped below the base.
		return recordbatch.Producer{}, fmt.Errorf("%w: sequence %d, stream starts at %d", ErrBeforeStream, b.Seq, bs)
	}
	return recordbatch.Producer{ID: e.dst.ID, Epoch: e.dst.Epoch, BaseSeq: d}, nil
}

// base returns where e's stream starts on b's partition: b's own sequence
// when b is the first batch mapped there, recorded in the journal first.
// Batches that come while it is being recorded wait for it.
func (s *sessions) base(ctx context.Context, k Session, e *session, b Batch) (int32, error) {
	p := partKey{b.Topic, b.Partition}
	s.mu.Lock()
	e.used = s.now()
	bs := e.bases[p]
	if bs == nil {
		bs = &base{seq: b.Seq}
		e.bases[p] = bs
		if s.journal != nil {
			bs.recorded = make(chan struct{})
			s.mu.Unlock()
			err := s.journal.Record(Mapping{Source: k, Destination: e.dst, Topic: b.Topic, Partition: b.Partition, Base: b.Seq})
			s.mu.Lock()
			if err != nil {
				bs.err = fmt.Errorf("%w: %w", ErrJournal, err)
				if e.bases[p] == bs {
					delete(e.bases, p) // the next batch tries again
				}
			}
			close(bs.recorded)
		}
	}
	s.mu.Unlock()
	if bs.recorded != nil {
		select {
		case <-bs.recorded:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return bs.seq, bs.err
}

// started reports whether a batch of b's session was sent to the
// destination on b's partition.
func (s *sessions) started(b Batch) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[Session{b.ProducerID, b.Epoch}]
	return e != nil && e.sent[partKey{b.Topic, b.Partition}]
}

// confirm notes that b was sent to the destination under its session's
// mapping.
func (s *sessions) confirm(b Batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[Session{b.ProducerID, b.Epoch}]
	if e == nil || !allocated(e) || e.err != nil {
		return // evicted meanwhile: its next batch starts afresh
	}
	if e.sent == nil {
		e.sent = map[partKey]bool{}
	}
	e.sent[partKey{b.Topic, b.Partition}] = true
}

// sentAs returns b as it was sent to the destination: under its session's
// destination producer, at its sequence in the stream there.
func (s *sessions) sentAs(b Batch) (Batch, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[Session{b.ProducerID, b.Epoch}]
	if e == nil || !allocated(e) || e.err != nil {
		return Batch{}, false
	}
	bs := e.bases[partKey{b.Topic, b.Partition}]
	if bs == nil {
		return Batch{}, false
	}
	return Batch{Topic: b.Topic, Partition: b.Partition, ProducerID: e.dst.ID, Epoch: e.dst.Epoch,
		Seq: recordbatch.SeqDistance(bs.seq, b.Seq), Records: b.Records}, true
}

// makeRoom drops idle mappings (at most every idle/4, or when full), then
// the least recently used ones while the map is full. Allocations still
// under way are never dropped. Called with mu held, for a new entry: new
// producers are rare, so an O(n) scan then is cheap.
func (s *sessions) makeRoom() {
	now := s.now()
	full := len(s.m) >= s.max
	if !full && now.Sub(s.lastSweep) < s.idle/4 {
		return
	}
	s.lastSweep = now
	for k, e := range s.m {
		if allocated(e) && now.Sub(e.used) > s.idle {
			delete(s.m, k)
		}
	}
	for len(s.m) >= s.max {
		var oldK Session
		var old *session
		for k, e := range s.m {
			if allocated(e) && (old == nil || e.used.Before(old.used)) {
				oldK, old = k, e
			}
		}
		if old == nil {
			return // every entry is being allocated; go over the bound briefly
		}
		delete(s.m, oldK)
	}
}

func allocated(e *session) bool {
	select {
	case <-e.ready:
		return true
	default:
		return false
	}
}

func (s *sessions) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// Uncertain is a batch sent without learning its outcome: where it went,
// and what a resend of it keeps.
type Uncertain struct {
	// Batch is the batch as the client wrote it.
	Batch Batch
	// At is when its outcome was given up on.
	At time.Time
	// Print is Fingerprint of its bytes.
	Print uint64
	// ToDestination says it went to the destination, as Sent (under its
	// mapped producer and sequence); else to the source as the client
	// wrote it.
	ToDestination bool
	Sent          Batch
}

// Fingerprint hashes what a client's resend of a record batch under
// another epoch or sequence keeps: the header from the attributes to the
// timestamps, the record count and the records. The same bytes give the
// same value in every process (FNV-1a, 64 bits), so a Journal can keep it.
func Fingerprint(batch []byte) uint64 {
	h := fnv.New64a()
	h.Write(batch[recordbatch.OffAttributes:recordbatch.OffProducerID])
	h.Write(batch[recordbatch.OffNumRecords:])
	return h.Sum64()
}

// producerPart is one producer id's batches on one partition, whatever
// their epoch.
type producerPart struct {
	id        int64
	topic     string
	partition int32
}

// uncertainPerPart bounds the uncertain batches kept per producer id and
// partition: a client keeps at most five in flight, and a bump resends
// those.
const uncertainPerPart = 16

// uncertain is the agent-wide set of uncertain batches.
type uncertain struct {
	mu sync.Mutex
	m  map[producerPart][]Uncertain
	n  int
}

func partOf(b Batch) producerPart { return producerPart{b.ProducerID, b.Topic, b.Partition} }

// add remembers x (replacing an entry for the same batch), dropping
// entries older than idle, then the oldest while over the bounds.
func (u *uncertain) add(x Uncertain, idle time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[producerPart][]Uncertain{}
	}
	k := partOf(x.Batch)
	list := u.m[k]
	kept := list[:0]
	for _, e := range list {
		if e.Batch != x.Batch && x.At.Sub(e.At) <= idle {
			kept = append(kept, e)
		}
	}
	u.n -= len(list) - len(kept)
	if len(kept) >= uncertainPerPart {
		u.n -= len(kept) - uncertainPerPart + 1
		kept = append(kept[:0], kept[len(kept)-uncertainPerPart+1:]...)
	}
	u.m[k] = append(kept, x)
	u.n++
	for u.n > uncertainMax {
		var oldK producerPart
		var old time.Time
		for k, l := range u.m {
			if old.IsZero() || l[0].At.Before(old) {
				oldK, old = k, l[0].At
			}
		}
		u.dropFirst(oldK)
	}
}

func (u *uncertain) dropFirst(k producerPart) {
	l := u.m[k]
	if len(l) <= 1 {
		delete(u.m, k)
	} else {
		u.m[k] = l[1:]
	}
	u.n--
}

// match returns the uncertain batches that b is a retry of (the same
// batch) or a resend of under another epoch (the same producer id,
// partition and records), newest first: a batch sent uncertainly, resent
// under a new epoch uncertainly again, may be held only as first sent.
func (u *uncertain) match(b Batch, records []byte) []Uncertain {
	u.mu.Lock()
	defer u.mu.Unlock()
	list := u.m[partOf(b)]
	var out []Uncertain
	var print uint64
	hashed := false
	for i := len(list) - 1; i >= 0; i-- {
		e := list[i]
		if e.Batch != b && (e.Batch.Epoch == b.Epoch || e.Batch.Records != b.Records) {
			continue
		}
		if e.Batch != b {
			if !hashed {
				print, hashed = Fingerprint(records), true
			}
			if e.Print != print {
				continue
			}
		}
		out = append(out, e)
	}
	return out
}

// take reports whether b was uncertain, and forgets it.
func (u *uncertain) take(b Batch) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	k := partOf(b)
	list := u.m[k]
	for i, e := range list {
		if e.Batch == b {
			list = append(list[:i:i], list[i+1:]...)
			u.n--
			if len(list) == 0 {
				delete(u.m, k)
			} else {
				u.m[k] = list
			}
			return true
		}
	}
	return false
}
