package shadow

import (
	"context"
	"fmt"
	"maps"
	"slices"
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

// bypass is the detection's state, under its own lock.
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
	// span is the topic's PROXY span watched (Job.spans).
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
func (j *Job) LastBypass(topic string) (when time.Time, what string, ok bool) {
	j.byp.mu.Lock()
	defer j.byp.mu.Unlock()
	l, ok := j.byp.last[topic]
	return l.at, l.what, ok
}

// WatchState is where bypass detection of one topic is.
type WatchState struct {
	// Watching: its PROXY (or MIGRATING) span is watched from the
	// source's end offsets then (only what was appended later is judged).
	Watching bool
	// Judged is, per partition watched, the first offset not judged yet;
	// Pending the runs of batches read that wait to be judged.
	Judged  map[int32]int64
	Pending int
	// AfterComplete: the topic is COMPLETE and its source's end offsets
	// were read at least once since (growth from them is raised).
	AfterComplete bool
}

// WatchState says where bypass detection of topic is.
func (j *Job) WatchState(topic string) WatchState {
	b := j.byp
	b.mu.Lock()
	defer b.mu.Unlock()
	var st WatchState
	if w := b.proxy[topic]; w != nil && w.ready {
		st.Watching, st.Judged = true, map[int32]int64{}
		for p, a := range w.parts {
			st.Judged[p] = a.judged
			st.Pending += len(a.pending)
		}
	}
	if w := b.complete[topic]; w != nil && w.ends != nil {
		st.AfterComplete = true
	}
	return st
}

// NoteSourceRead is the replicator's OnSourceRead: it queues the batch to
// be judged once the grace passed.
func (j *Job) NoteSourceRead(r replicator.SourceRead) {
	b := j.byp
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
		j.metrics.unknown.WithLabelValues(r.Topic).Add(float64(drop.end - drop.start))
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
func (j *Job) noteWrites(now time.Time, req *batonv1.HeartbeatRequest, prevExpires time.Time) {
	f := j.forward
	b := j.byp
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
		lo = hi - j.lease
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
				a.addUnknown(timeSpan{now.Add(-j.bypassGrace() - f), now.Add(f)})
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

// Grace is how long a batch read from a PROXY topic's source waits for its
// writers' reports (BypassGrace).
func (j *Job) Grace() time.Duration { return j.bypassGrace() }

func (j *Job) bypassGrace() time.Duration {
	if j.cfg.grace > 0 {
		return j.cfg.grace
	}
	return 2 * j.lease
}

// bypassLoop keeps the watches in step with the topics' states, judges
// what the grace let through, and polls COMPLETE topics' source ends.
func (j *Job) bypassLoop() {
	tick := min(j.bypassGrace()/8, 250*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-j.ctx.Done():
			return
		case <-t.C:
		}
		topics := j.view.Topics()
		j.syncProxyWatches(j.proxySpansNow())
		j.judge(j.now(), topics)
		j.pollComplete(topics)
	}
}

// bypassWatched says whether a topic in state s has its source watched
// for writes around the agents.
func bypassWatched(s migration.State) bool {
	return s == migration.Proxy || s == migration.Migrating
}

// proxySpansNow copies the topics' current PROXY spans.
func (j *Job) proxySpansNow() map[string]uint64 {
	j.spansMu.Lock()
	defer j.spansMu.Unlock()
	return maps.Clone(j.spans)
}

// syncProxyWatches starts a watch for every span a topic spends in PROXY
// or MIGRATING (from S's end offsets then: what was written before is not
// judged) and ends the watches of spans that ended. A topic that left
// PROXY and came back since the last sync is a new span: what was written
// to S while it was not managed is not a forgotten producer's.
func (j *Job) syncProxyWatches(spans map[string]uint64) {
	b := j.byp
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
		w := &proxyWatch{parts: map[int32]*attribution{}, began: j.now(), span: span}
		b.proxy[name] = w
		j.wg.Add(1)
		go func() {
			defer j.wg.Done()
			j.startProxyWatch(name, w)
		}()
	}
}

func (j *Job) startProxyWatch(name string, w *proxyWatch) {
	for j.ctx.Err() == nil {
		b := j.byp
		b.mu.Lock()
		current := b.proxy[name] == w
		b.mu.Unlock()
		if !current {
			return // the topic left PROXY: the watch was dropped
		}
		ctx, cancel := context.WithTimeout(j.ctx, 10*time.Second)
		ends, err := j.source.SourceEndOffsets(ctx, name)
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
		j.log.Debug("bypass detection: reading the source's end offsets", "topic", name, "err", err)
		select {
		case <-j.ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
