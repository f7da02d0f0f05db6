package controlplane

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/internal/offsetset"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
)

// Bypass (forgotten-producer) detection, docs/design.md §12.
//
// While a topic is PROXY (or MIGRATING), agents report with their
// heartbeats the source offset ranges S acked to them; the replicator
// tells what it reads from S.T. A batch is judged once every agent that
// may have written it reported past it: one no agent's range covers then
// is a producer writing S.T around the agents (after the cutover nobody
// would copy it). An agent that does not report past it within the grace
// (cut off, paused), or whose process was replaced before it did (killed),
// makes the batch unattributable: counted, never reported. After
// COMPLETE, S.T's end offsets are watched for a while: any growth is a
// write nobody copies.

// Defaults of bypass detection.
const (
	// DefaultBypassWatch is how long S.T's end offsets are watched after
	// the topic reached COMPLETE.
	DefaultBypassWatch = 24 * time.Hour
	// DefaultBypassPoll is how often they are read then.
	DefaultBypassPoll = 5 * time.Second
	// DefaultBypassDedupe: one forgotten_producer event per producer id
	// and partition in this window.
	DefaultBypassDedupe = 10 * time.Minute
	// bypassEpisodeQuiet ends a growth episode after COMPLETE: the next
	// growth after this long without any is a new alert.
	bypassEpisodeQuiet = time.Minute
	// Bounds per partition: acked ranges heard of and batches read not
	// judged yet. Past them the oldest are dropped and the partition's
	// attribution is incomplete for that while (never a false bypass).
	maxAckedRanges  = 100_000
	maxPendingReads = 100_000
	maxUnknownSpans = 64
	// replacedKept and maxReplaced bound the agent processes replaced
	// before they reported everything, kept as writers.
	replacedKept = 24 * time.Hour
	maxReplaced  = 1024
)

// BypassGrace sets how long a batch the replicator read from a PROXY
// topic's source waits for every agent that may have written it to report
// past it (default: twice the lease, 10 s). An agent reports with every
// heartbeat (every lease/3), so one that is answered reports within
// lease/3 + F; past the grace the batch is unattributable rather than a
// guess.
func BypassGrace(d time.Duration) Opt { return optFunc(func(c *config) { c.bypassGrace = d }) }

// BypassWatch sets how long after COMPLETE S.T's end offsets are watched
// for writes (default 24 h; 0: off).
func BypassWatch(d time.Duration) Opt { return optFunc(func(c *config) { c.bypassWatch = d }) }

// BypassPoll sets how often S.T's end offsets are read while watched after
// COMPLETE (default 5 s).
func BypassPoll(d time.Duration) Opt { return optFunc(func(c *config) { c.bypassPoll = d }) }

// Registry sets where the control plane's metrics register (default: a
// private registry).
func Registry(r prometheus.Registerer) Opt { return optFunc(func(c *config) { c.registry = r }) }

// BypassInfo details a forgotten_producer or source_written_after_complete
// event.
type BypassInfo struct {
	Partition  int32 `json:"partition"`
	Offset     int64 `json:"offset"`
	Records    int64 `json:"records"`
	ProducerID int64 `json:"producerId"`
	// Grown is, after COMPLETE, the records written per partition.
	Grown map[int32]int64 `json:"grown,omitempty"`
}

type bypassMetrics struct {
	unattributed, unknown, afterComplete *prometheus.CounterVec
}

func newBypassMetrics(reg prometheus.Registerer) (*bypassMetrics, error) {
	m := &bypassMetrics{
		unattributed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "baton_controlplane_bypass_records_total",
			Help: "Records in the source of a PROXY topic that no agent reported writing: a producer bypasses the agents."}, []string{"topic"}),
		unknown: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "baton_controlplane_bypass_unattributable_records_total",
			Help: "Records no agent reported writing while an agent wrote offsets it never learned (acks=0, lost answers), did not report in time, or was replaced before it reported: not judged."}, []string{"topic"}),
		afterComplete: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "baton_controlplane_source_written_after_complete_records_total",
			Help: "Records written to the source of a topic after it reached COMPLETE: nobody copies them."}, []string{"topic"}),
	}
	for _, c := range []prometheus.Collector{m.unattributed, m.unknown, m.afterComplete} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("%w: metrics: %w", ErrBadConfig, err)
		}
	}
	return m, nil
}

// bypass is the detection's state; its own lock, never held with cp.mu.
type bypass struct {
	mu       sync.Mutex
	proxy    map[string]*proxyWatch
	complete map[string]*completeWatch
	last     map[string]lastBypass
	reports  map[string]*agentReports // by node id: its current process
	replaced []replacedAgent
}

// agentReports is what the reports of one agent process tell: how far its
// writes are reported, and its clock against the control plane's.
type agentReports struct {
	incarnation uint64
	// through: every write this process was answered about before it is
	// in a report received (the control plane's clock, conservatively).
	through time.Time
	// offLow <= the control plane's clock minus the agent's <= offHigh,
	// once known: offLow from the last answer's server time and when the
	// agent got it, offHigh from a heartbeat's send and receive times.
	offLow, offHigh           time.Duration
	offLowKnown, offHighKnown bool
}

// replacedAgent is an agent process another process replaced under the
// same node id: its writes after through were never reported, and it
// wrote none appended after expires + F.
type replacedAgent struct{ through, expires time.Time }

type lastBypass struct {
	at   time.Time
	what string
}

type proxyWatch struct {
	parts map[int32]*attribution
	ready bool // start offsets known
	// began is before the start offsets were read: what is judged was
	// appended after it.
	began time.Time
	// span is the topic's PROXY span watched (ControlPlane.proxySpans).
	span uint64
}

// attribution is one partition's: what agents acked, what the replicator
// read and has not judged yet, and when attribution was incomplete.
type attribution struct {
	start   int64 // offsets below were written before the watch began
	judged  int64 // offsets below are judged
	acked   offsetset.Set
	pending []sourceRead
	unknown []timeSpan
	evented map[int64]time.Time // producer id -> last event
}

// sourceRead is a run of batches of one producer read from S: appended
// after after (zero: unknown), and seen in S by first (the first batch)
// and last (the last).
type sourceRead struct {
	start, end, pid    int64
	after, first, last time.Time
}

type timeSpan struct{ from, until time.Time }

type completeWatch struct {
	ends      map[int32]int64
	nextPoll  time.Time
	inEpisode bool
	lastGrown time.Time
}

func newBypass() *bypass {
	return &bypass{proxy: map[string]*proxyWatch{}, complete: map[string]*completeWatch{}, last: map[string]lastBypass{},
		reports: map[string]*agentReports{}}
}

func (w *proxyWatch) part(p int32) *attribution {
	a := w.parts[p]
	if a == nil {
		a = &attribution{start: -1, evented: map[int64]time.Time{}}
		w.parts[p] = a
	}
	return a
}

// LastBypass reports the newest forgotten producer seen writing topic's
// source while it was PROXY: when it was judged, and what (partition,
// offset, producer id). For the cutover gate. It is kept in memory: a
// restarted control plane starts with none (the event log keeps them).
func (cp *ControlPlane) LastBypass(topic string) (when time.Time, what string, ok bool) {
	cp.byp.mu.Lock()
	defer cp.byp.mu.Unlock()
	l, ok := cp.byp.last[topic]
	return l.at, l.what, ok
}

// noteSourceRead is the replicator's OnSourceRead: queue the batch to be
// judged once the grace passed.
func (cp *ControlPlane) noteSourceRead(r replicator.SourceRead) {
	b := cp.byp
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.proxy[r.Topic]
	if w == nil {
		return
	}
	a := w.part(r.Partition)
	if r.End <= a.judged || (a.start >= 0 && r.End <= a.start) {
		return // judged already (a retried copy reads again), or from before the watch
	}
	if n := len(a.pending); n > 0 {
		last := &a.pending[n-1]
		if last.pid == r.ProducerID && last.end == r.BaseOffset && r.Seen.Sub(last.first) < time.Second {
			last.end, last.last = r.End, maxTime(last.last, r.Seen) // one producer's run of batches: one entry
			return
		}
	}
	if len(a.pending) >= maxPendingReads {
		// Not judged: incomplete for its while rather than a guess.
		drop := a.pending[0]
		a.pending = a.pending[1:]
		a.judged = max(a.judged, drop.end)
		cp.bypassMetrics.unknown.WithLabelValues(r.Topic).Add(float64(drop.end - drop.start))
	}
	// Reports are awaited from when the batch was known to be in S (an
	// agent was answered about then), not from when the copy got to it.
	a.pending = append(a.pending, sourceRead{start: r.BaseOffset, end: r.End, pid: r.ProducerID, after: r.After, first: r.Seen, last: r.Seen})
}

// noteWrites takes an agent's heartbeat report of what it wrote: its acked
// ranges, and its spans of unknown offsets moved to the control plane's
// clock (within the bounds its heartbeats give on the agent's clock) and
// widened by F on both sides (an acks=0 write is appended up to F after it
// was sent); and how far its reports now reach. prevExpires is the
// agent's lease expiry before this heartbeat.
func (cp *ControlPlane) noteWrites(now time.Time, req *batonv1.HeartbeatRequest, prevExpires time.Time) {
	f := cp.cfg.forward
	b := cp.byp
	b.mu.Lock()
	defer b.mu.Unlock()
	ar := b.reports[req.GetNodeId()]
	if ar == nil || ar.incarnation != req.GetIncarnation() {
		if ar != nil {
			// A new process under the node id: what the last one wrote
			// after its last report is lost.
			b.replaced = append(b.replaced, replacedAgent{through: ar.through, expires: prevExpires})
		}
		ar = &agentReports{incarnation: req.GetIncarnation()}
		b.reports[req.GetNodeId()] = ar
	}
	sentAt := req.GetSentAt()
	if sentAt != nil {
		if d := now.Sub(sentAt.AsTime()); !ar.offHighKnown || d < ar.offHigh {
			ar.offHigh, ar.offHighKnown = d, true
		}
	}
	if srv, got := req.GetLastServerTime(), req.GetLastAnsweredAt(); srv != nil && got != nil {
		if d := srv.AsTime().Sub(got.AsTime()); !ar.offLowKnown || d > ar.offLow {
			ar.offLow, ar.offLowKnown = d, true
		}
	}
	if ar.offLowKnown && ar.offHighKnown && ar.offLow > ar.offHigh {
		// The agent's clock jumped: start over, from this heartbeat's own
		// upper bound.
		ar.offLowKnown, ar.offHighKnown = false, false
		if sentAt != nil {
			ar.offHigh, ar.offHighKnown = now.Sub(sentAt.AsTime()), true
		}
	}
	truncated := false
	for _, d := range req.GetTopics() {
		truncated = truncated || d.GetWritesTruncated()
	}
	if sentAt != nil && ar.offLowKnown && !truncated {
		ar.through = maxTime(ar.through, sentAt.AsTime().Add(ar.offLow))
	}
	lo, hi := ar.offLow, ar.offHigh
	if !ar.offHighKnown {
		hi = 0
	}
	if !ar.offLowKnown {
		lo = hi - cp.cfg.lease
	}
	for _, d := range req.GetTopics() {
		w := b.proxy[d.GetTopic()]
		if w == nil {
			continue
		}
		for _, pw := range d.GetWrites() {
			a := w.part(pw.GetPartition())
			for _, r := range pw.GetAcked() {
				if r.GetEnd() > a.judged {
					a.acked.Add(max(r.GetStart(), a.judged), r.GetEnd())
				}
			}
			if a.acked.Len() > maxAckedRanges {
				a.acked.DropLowest(maxAckedRanges)
				a.addUnknown(timeSpan{now.Add(-cp.bypassGrace() - f), now.Add(f)})
			}
			if pw.GetUnknownFrom() != nil {
				a.addUnknown(timeSpan{pw.GetUnknownFrom().AsTime().Add(lo - f), pw.GetUnknownUntil().AsTime().Add(hi + f)})
			}
		}
	}
}

func (a *attribution) addUnknown(s timeSpan) {
	for i := range a.unknown {
		u := &a.unknown[i]
		if !s.from.After(u.until) && !s.until.Before(u.from) {
			u.from, u.until = minTime(u.from, s.from), maxTime(u.until, s.until)
			return
		}
	}
	a.unknown = append(a.unknown, s)
	if len(a.unknown) > maxUnknownSpans {
		// Merge the two oldest: wider, never narrower.
		a.unknown[1].from = minTime(a.unknown[0].from, a.unknown[1].from)
		a.unknown = a.unknown[1:]
	}
}

// incomplete says whether a batch appended between after and at may be an
// agent's write whose offsets nobody learned.
func (a *attribution) incomplete(after, at time.Time) bool {
	for _, u := range a.unknown {
		if !u.from.After(at) && (after.IsZero() || !u.until.Before(after)) {
			return true
		}
	}
	return false
}

func (cp *ControlPlane) bypassGrace() time.Duration {
	if cp.cfg.bypassGrace > 0 {
		return cp.cfg.bypassGrace
	}
	return 2 * cp.cfg.lease
}

// bypassLoop keeps the watches in step with the topics' states, judges
// what the grace let through, and polls COMPLETE topics' source ends.
func (cp *ControlPlane) bypassLoop() {
	tick := min(cp.bypassGrace()/8, 250*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-cp.ctx.Done():
			return
		case <-t.C:
		}
		topics := cp.Topics()
		cp.syncProxyWatches(cp.proxySpansNow())
		cp.judge(cp.now())
		cp.pollComplete(topics)
	}
}

// bypassWatched says whether a topic in state s has its source watched
// for writes around the agents.
func bypassWatched(s migration.State) bool {
	return s == migration.Proxy || s == migration.Migrating
}

// proxySpansNow copies the topics' current PROXY spans.
func (cp *ControlPlane) proxySpansNow() map[string]uint64 {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return maps.Clone(cp.proxySpans)
}

// syncProxyWatches starts a watch for every span a topic spends in PROXY
// or MIGRATING (from S's end offsets then: what was written before is not
// judged) and ends the watches of spans that ended. A topic that left
// PROXY and came back since the last sync is a new span: what was written
// to S while it was not managed is not a forgotten producer's.
func (cp *ControlPlane) syncProxyWatches(spans map[string]uint64) {
	b := cp.byp
	b.mu.Lock()
	defer b.mu.Unlock()
	for name, w := range b.proxy {
		if spans[name] != w.span {
			delete(b.proxy, name)
		}
	}
	for name, span := range spans {
		if b.proxy[name] != nil {
			continue
		}
		// Watching before reading the ends: a report of a write above
		// them that lands meanwhile is kept.
		w := &proxyWatch{parts: map[int32]*attribution{}, began: cp.now(), span: span}
		b.proxy[name] = w
		cp.wg.Add(1)
		go func() {
			defer cp.wg.Done()
			cp.startProxyWatch(name, w)
		}()
	}
}

func (cp *ControlPlane) startProxyWatch(name string, w *proxyWatch) {
	for cp.ctx.Err() == nil {
		b := cp.byp
		b.mu.Lock()
		current := b.proxy[name] == w
		b.mu.Unlock()
		if !current {
			return // the topic left PROXY: the watch was dropped
		}
		ctx, cancel := context.WithTimeout(cp.ctx, 10*time.Second)
		ends, err := cp.cfg.repl.SourceEndOffsets(ctx, name)
		cancel()
		if err == nil {
			b.mu.Lock()
			for p, end := range ends {
				a := w.part(p)
				a.start, a.judged = end, max(a.judged, end)
				a.acked.DropBelow(end)
				a.pending = slices.DeleteFunc(a.pending, func(r sourceRead) bool { return r.end <= end })
			}
			w.ready = true
			b.mu.Unlock()
			return
		}
		cp.log.Debug("bypass detection: reading the source's end offsets", "topic", name, "err", err)
		select {
		case <-cp.ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// writer is an agent process that may have written a batch: its newest
// lease's expiry, how far its reports reach, and whether more may come.
type writer struct {
	expires, through time.Time
	replaced         bool
}

// verdict is what is known of a batch's writers.
type verdict int

const (
	verdictReported verdict = iota // every writer reported past it
	verdictWait                    // a writer may still report it
	verdictUnknown                 // a writer will never report it
)

// of judges sr (appended after after) against the writers. unleased is
// how long after its lease's end an agent may still write the topic:
// migration.UnleasedForward for a topic the source fences at the cutover
// (agents forward it without a lease), else zero.
func (sr sourceRead) of(writers []writer, after time.Time, f, unleased time.Duration) verdict {
	v := verdictReported
	for _, w := range writers {
		last := w.expires.Add(unleased) // its last write sent by then
		if last.Add(f).Before(after) {
			continue // its writes were all appended before this batch
		}
		// A write sent before last is answered by last + F, and one
		// appended by sr.last was sent before it: a report made after the
		// earlier of the two plus F holds the write, or its unknown span.
		if w.through.After(minTime(sr.last, last).Add(f)) {
			continue
		}
		if w.replaced {
			return verdictUnknown
		}
		v = verdictWait
	}
	return v
}

// judge decides every batch its writers have reported past, and those the
// grace ran out on.
func (cp *ControlPlane) judge(now time.Time) {
	grace, f := cp.bypassGrace(), cp.cfg.forward
	cp.mu.Lock()
	type lease struct {
		node    string
		expires time.Time
	}
	leases := make([]lease, 0, len(cp.agents))
	for _, a := range cp.agents {
		leases = append(leases, lease{a.Node, a.ExpiresAt})
	}
	fenced := map[string]bool{}
	for n, t := range cp.topics {
		if t.FenceAtCutover {
			fenced[n] = true
		}
	}
	cp.mu.Unlock()

	type found struct {
		topic string
		info  BypassInfo
		why   string
	}
	var events []found
	b := cp.byp
	b.mu.Lock()
	// A replaced process wrote nothing appended after its expiry + F, but
	// the copy may read such a batch much later (a lagging replicator):
	// it is kept for a day, at most maxReplaced of them.
	b.replaced = slices.DeleteFunc(b.replaced, func(r replacedAgent) bool { return now.Sub(r.expires) > replacedKept })
	if n := len(b.replaced); n > maxReplaced {
		b.replaced = b.replaced[n-maxReplaced:]
	}
	writers := make([]writer, 0, len(leases)+len(b.replaced))
	for _, l := range leases {
		w := writer{expires: l.expires}
		if ar := b.reports[l.node]; ar != nil {
			w.through = ar.through
		}
		writers = append(writers, w)
	}
	for _, r := range b.replaced {
		writers = append(writers, writer{expires: r.expires, through: r.through, replaced: true})
	}
	for topic, w := range b.proxy {
		if !w.ready {
			continue
		}
		for p, a := range w.parts {
			if a.start < 0 {
				continue // a partition added after the watch began
			}
			n := 0
			for ; n < len(a.pending); n++ {
				r := a.pending[n]
				after := r.after
				if after.IsZero() {
					after = w.began
				}
				unleased := time.Duration(0)
				if fenced[topic] {
					unleased = migration.UnleasedForward
				}
				v := r.of(writers, after, f, unleased)
				if v == verdictWait {
					if now.Before(r.first.Add(grace)) {
						break // judged in order: the next ones wait too
					}
					v = verdictUnknown // a writer that reports late is no evidence
				}
				from := max(r.start, a.judged)
				if from >= r.end {
					continue
				}
				missing := a.acked.Missing(from, r.end)
				a.judged = r.end
				if missing == 0 {
					continue
				}
				if v == verdictUnknown || a.incomplete(r.after, r.last) {
					cp.bypassMetrics.unknown.WithLabelValues(topic).Add(float64(missing))
					continue
				}
				cp.bypassMetrics.unattributed.WithLabelValues(topic).Add(float64(missing))
				what := fmt.Sprintf("partition %d offset %d: %d records of producer id %d that no agent wrote", p, from, missing, r.pid)
				b.last[topic] = lastBypass{at: now, what: what}
				if last, ok := a.evented[r.pid]; ok && now.Sub(last) < DefaultBypassDedupe {
					continue
				}
				a.evented[r.pid] = now
				events = append(events, found{topic, BypassInfo{Partition: p, Offset: from, Records: missing, ProducerID: r.pid}, what})
			}
			a.pending = a.pending[n:]
			a.acked.DropBelow(a.judged)
			// Kept as long as replaced writers: the copy may read a batch
			// from inside a span long after it (maxUnknownSpans bounds them).
			a.unknown = slices.DeleteFunc(a.unknown, func(u timeSpan) bool { return now.Sub(u.until) > replacedKept })
			maps.DeleteFunc(a.evented, func(_ int64, at time.Time) bool { return now.Sub(at) >= DefaultBypassDedupe })
		}
	}
	b.mu.Unlock()
	for _, e := range events {
		info := e.info
		reason := e.why + ": a producer writes the source around the agents and would be forgotten at the cutover " +
			"(nobody copies the source after it). Find it by its producer id (kafka-producers --describe, or the " +
			"broker's request log) and point it at its Baton agent before migrating"
		cp.log.Warn("forgotten producer: "+e.why, "topic", e.topic, "partition", info.Partition, "offset", info.Offset,
			"producer_id", info.ProducerID, "records", info.Records,
			"what_to_do", "find the producer by its id and point it at its Baton agent before migrating")
		cp.event(cp.ctx, Event{Topic: e.topic, Kind: EventForgottenProducer, Actor: ActorControlPlane, Reason: reason, Bypass: &info})
	}
}

// pollComplete reads S.T's end offsets every poll for topics COMPLETE for
// less than the watch, and raises growth. A restarted control plane starts
// again from the ends it reads then, until the stored COMPLETE time plus
// the watch.
func (cp *ControlPlane) pollComplete(topics []Topic) {
	if cp.cfg.bypassWatch <= 0 {
		return
	}
	now := cp.now()
	b := cp.byp
	live := map[string]bool{}
	for _, t := range topics {
		if t.State != migration.Complete {
			continue
		}
		at := t.CompletedAt
		if at.IsZero() {
			at = t.UpdatedAt // completed before CompletedAt was stored
		}
		if now.Sub(at) >= cp.cfg.bypassWatch {
			continue
		}
		live[t.Name] = true
		b.mu.Lock()
		w := b.complete[t.Name]
		if w == nil {
			w = &completeWatch{}
			b.complete[t.Name] = w
		}
		due := !now.Before(w.nextPoll)
		b.mu.Unlock()
		if !due {
			continue
		}
		ctx, cancel := context.WithTimeout(cp.ctx, cp.cfg.bypassPoll)
		ends, err := cp.cfg.repl.SourceEndOffsets(ctx, t.Name)
		cancel()
		b.mu.Lock()
		w.nextPoll = now.Add(cp.cfg.bypassPoll)
		if err != nil {
			b.mu.Unlock()
			cp.log.Debug("watching the source after COMPLETE: reading end offsets", "topic", t.Name, "err", err)
			continue
		}
		if w.ends == nil {
			w.ends = ends
			b.mu.Unlock()
			continue
		}
		grown := map[int32]int64{}
		var total int64
		for p, end := range ends {
			if d := end - w.ends[p]; d > 0 {
				grown[p] = d
				total += d
			}
		}
		w.ends = ends
		if total == 0 {
			if w.inEpisode && now.Sub(w.lastGrown) >= bypassEpisodeQuiet {
				w.inEpisode = false
			}
			b.mu.Unlock()
			continue
		}
		cp.bypassMetrics.afterComplete.WithLabelValues(t.Name).Add(float64(total))
		w.lastGrown = now
		first := !w.inEpisode
		w.inEpisode = true
		b.mu.Unlock()
		if !first {
			continue
		}
		parts := make([]string, 0, len(grown))
		for _, p := range slices.Sorted(maps.Keys(grown)) {
			parts = append(parts, fmt.Sprintf("%d: %d", p, grown[p]))
		}
		what := fmt.Sprintf("%d records written to the source after COMPLETE (partition: records %s)", total, strings.Join(parts, ", "))
		cp.log.Warn("source written after COMPLETE: "+what, "topic", t.Name,
			"what_to_do", "a producer still writes the source around the agents and nobody copies it: find it (the source's "+
				"DescribeProducers for the partitions named, or the broker's request log), point it at its Baton agent, and copy "+
				"or replay what it wrote to the destination")
		cp.event(cp.ctx, Event{Topic: t.Name, Kind: EventSourceWrittenAfterComplete, Actor: ActorControlPlane, Reason: what,
			Bypass: &BypassInfo{Grown: grown, Records: total}})
	}
	b.mu.Lock()
	for name := range b.complete {
		if !live[name] {
			delete(b.complete, name)
		}
	}
	b.mu.Unlock()
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
