// Package shadow owns the control plane's watch over the PROXY phase
// (docs/design.md §12): bypass detection (a producer writing a PROXY
// topic's source around the agents, and any write to the source after
// COMPLETE), the agents' open findings, and the destination latency
// profiles pushed for latency emulation and the headroom check. It keeps
// that state under its own locks and never holds one while it calls the
// control plane.
//
// It knows nothing of package controlplane: it reads the topics and the
// agents' leases through View, appends events through Recorder, has the
// routes published again through Publisher, and reads the source and the
// replicator through EndOffsets and LatencySource. The control plane
// tells it every topic state it publishes (NoteStates), every agent's
// heartbeat (Heartbeat) and every batch the replicator reads from the
// source (NoteSourceRead).
package shadow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
)

// ErrBadConfig refuses the job's settings; the message names the setting.
var ErrBadConfig = errors.New("shadow: bad config")

// Kinds of the events the job appends, declared here once: the control
// plane's event log names them after these.
const (
	// EventFinding: an agent reported a finding that opened.
	EventFinding = "finding"
	// EventForgottenProducer: a producer writes a PROXY topic's source
	// around the agents.
	EventForgottenProducer = "forgotten_producer"
	// EventSourceWrittenAfterComplete: the source of a COMPLETE topic grew.
	EventSourceWrittenAfterComplete = "source_written_after_complete"
)

// Topic is a managed topic as the job reads it.
type Topic struct {
	Name  string
	State migration.State
	// CompletedAt is when it reached COMPLETE.
	CompletedAt time.Time
	// FenceAtCutover: the source is fenced at its cutover, so agents may
	// forward it for migration.UnleasedForward past their lease.
	FenceAtCutover bool
	// Latency: its route carries the destination's latency (PROXY, with
	// latency emulation or the headroom check on).
	Latency bool
}

// Lease is an agent's newest lease.
type Lease struct {
	Node      string
	ExpiresAt time.Time
}

// View is what the job reads of the control plane's state.
type View interface {
	// Topics returns every managed topic.
	Topics() []Topic
	// Leases returns every known agent's lease.
	Leases() []Lease
}

// Event is an event the job appends to the control plane's log.
type Event struct {
	Topic  string
	Kind   string // EventFinding, EventForgottenProducer, EventSourceWrittenAfterComplete
	Agent  string
	Reason string
	Bypass *BypassInfo
}

// Recorder appends the job's events to the control plane's log; it logs
// its own errors.
type Recorder interface {
	Record(ctx context.Context, e Event)
}

// Publisher has the routes published again, at the current config
// version, with the job's profiles (Profiles); changed are the profiles
// that changed since, for the replicas that push what the leader pushed.
type Publisher interface {
	PushLatency(ctx context.Context, changed map[string]Profile)
}

// EndOffsets reads a topic's end offsets on the source.
type EndOffsets interface {
	SourceEndOffsets(ctx context.Context, topic string) (map[int32]int64, error)
}

// LatencySource is what latency emulation needs from the replicator
// (docs/design.md §12): the destination's produce ack latency per topic. A
// replication that implements it has its measurements pushed to the agents
// of PROXY topics with latency emulation or the headroom check on.
type LatencySource interface {
	// DestinationLatency is topic's destination produce ack latency over
	// a recent window; false when nothing was measured in it.
	DestinationLatency(topic string) (replicator.Latency, bool)
}

// Deps is what New requires.
type Deps struct {
	View      View
	Recorder  Recorder
	Publisher Publisher
	Source    EndOffsets
	// Latency measures the destination; nil: no profiles are pushed.
	Latency LatencySource
	// Registry is where the job's metrics register.
	Registry prometheus.Registerer
	Log      *slog.Logger
	Now      func() time.Time
	// Lease and Forward are the agents' lease and F.
	Lease, Forward time.Duration
	// Pushed are the profiles a previous leader pushed: pushed the same
	// until measured again.
	Pushed map[string]Profile
}

// Opt configures New.
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	grace          time.Duration // 0: twice the lease
	watch, poll    time.Duration
	latencyRefresh time.Duration
}

// BypassGrace sets how long a batch the replicator read from a PROXY
// topic's source waits for every agent that may have written it to report
// past it (default: twice the lease, 10 s). An agent reports with every
// heartbeat (every lease/3), so one that is answered reports within
// lease/3 + F; past the grace the batch is unattributable rather than a
// guess.
func BypassGrace(d time.Duration) Opt { return optFunc(func(c *config) { c.grace = d }) }

// BypassWatch sets how long after COMPLETE S.T's end offsets are watched
// for writes (default DefaultBypassWatch, 24 h; 0: off).
func BypassWatch(d time.Duration) Opt { return optFunc(func(c *config) { c.watch = d }) }

// BypassPoll sets how often S.T's end offsets are read while watched after
// COMPLETE (default DefaultBypassPoll, 5 s).
func BypassPoll(d time.Duration) Opt { return optFunc(func(c *config) { c.poll = d }) }

// LatencyRefresh sets how often destination latencies are read and pushed
// (default DefaultLatencyRefresh, 5 s).
func LatencyRefresh(d time.Duration) Opt { return optFunc(func(c *config) { c.latencyRefresh = d }) }

// Job is the PROXY phase's watch. Create it with New and Run it.
type Job struct {
	cfg            config
	view           View
	rec            Recorder
	pub            Publisher
	source         EndOffsets
	src            LatencySource
	log            *slog.Logger
	now            func() time.Time
	lease, forward time.Duration
	metrics        *bypassMetrics
	wg             sync.WaitGroup  // the goroutines Run started
	ctx            context.Context // Run's: the goroutines' lifetime
	byp            *bypass
	findings       findingSet
	lat            latencyState
	spansMu        sync.Mutex
	spans          map[string]uint64 // see NoteStates
	spanSeq        uint64
}

// New validates the options and registers the job's metrics. It starts
// nothing: Run does.
func New(d Deps, opts ...Opt) (*Job, error) {
	cfg := config{watch: DefaultBypassWatch, poll: DefaultBypassPoll, latencyRefresh: DefaultLatencyRefresh}
	for _, o := range opts {
		o.apply(&cfg)
	}
	switch {
	case d.View == nil || d.Recorder == nil || d.Publisher == nil || d.Source == nil || d.Registry == nil || d.Log == nil || d.Now == nil:
		return nil, fmt.Errorf("%w: view, recorder, publisher, source, registry, logger and clock are required", ErrBadConfig)
	case d.Lease <= 0 || d.Forward <= 0:
		return nil, fmt.Errorf("%w: lease %v and forward deadline %v must be positive", ErrBadConfig, d.Lease, d.Forward)
	case cfg.latencyRefresh <= 0:
		return nil, fmt.Errorf("%w: latency refresh %v must be positive", ErrBadConfig, cfg.latencyRefresh)
	case cfg.watch < 0:
		return nil, fmt.Errorf("%w: bypass watch %v is negative (0 turns it off)", ErrBadConfig, cfg.watch)
	case cfg.grace < 0 || cfg.poll <= 0:
		return nil, fmt.Errorf("%w: bypass grace %v must not be negative, bypass poll %v must be positive", ErrBadConfig, cfg.grace, cfg.poll)
	}
	m, err := newBypassMetrics(d.Registry)
	if err != nil {
		return nil, err
	}
	j := &Job{cfg: cfg, view: d.View, rec: d.Recorder, pub: d.Publisher, source: d.Source, src: d.Latency, log: d.Log,
		now: d.Now, lease: d.Lease, forward: d.Forward, metrics: m, ctx: context.Background(), byp: newBypass(),
		spans: map[string]uint64{}}
	j.findings.open, j.findings.started = map[migration.FindingKey]*Finding{}, j.now()
	j.lat.pushed = map[string]Profile{}
	for name, p := range d.Pushed {
		j.lat.pushed[name] = p
	}
	if err := d.Registry.Register(findingsCollector{j}); err != nil {
		return nil, fmt.Errorf("%w: metrics: %w", ErrBadConfig, err)
	}
	return j, nil
}

// Run watches until ctx ends, then waits for every goroutine it started.
// It is called once.
func (j *Job) Run(ctx context.Context) {
	j.ctx = ctx
	defer j.wg.Wait()
	if j.src != nil {
		j.wg.Add(1)
		go func() { defer j.wg.Done(); j.latencyLoop() }()
	}
	j.bypassLoop()
}

// Heartbeat takes what an agent's heartbeat (or a follower's record of
// one) reports: its writes, for bypass detection, and its findings. now
// is its arrival, prevExpires the agent's lease expiry before it.
func (j *Job) Heartbeat(ctx context.Context, now time.Time, req *batonv1.HeartbeatRequest, prevExpires time.Time) {
	j.noteWrites(now, req, prevExpires)
	if fs := req.GetFindings(); len(fs) > 0 {
		j.noteFindings(ctx, req.GetNodeId(), fs, now)
	}
}

// NoteStates takes every managed topic's state, at each publish of the
// routes (every change of a topic's state publishes), and numbers each
// unbroken span a topic spends in PROXY or MIGRATING: a topic that left
// and came back between two ticks of the bypass loop is a new span,
// watched from its new start. The caller may hold its own lock: NoteStates
// calls nothing back.
func (j *Job) NoteStates(states map[string]migration.State) {
	j.spansMu.Lock()
	defer j.spansMu.Unlock()
	for name, s := range states {
		if _, ok := j.spans[name]; !ok && bypassWatched(s) {
			j.spanSeq++
			j.spans[name] = j.spanSeq
		}
	}
	for name := range j.spans {
		if s, ok := states[name]; !ok || !bypassWatched(s) {
			delete(j.spans, name)
		}
	}
}
