package replicator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"
)

// produceClients is how many clients, each with connections of its own,
// copy steps produce to D with (Replicator.produceTo).
const produceClients = 8

// Defaults of the options below.
const (
	DefaultWorkers        = 4
	DefaultFetchMaxBytes  = 4 << 20
	DefaultSampleInterval = 250 * time.Millisecond
	DefaultRequestTimeout = 30 * time.Second
	DefaultMaxBackoff     = 5 * time.Second
)

// Errors. Per-partition errors are reported in Status and wrap these.
var (
	// ErrBadConfig names the option at fault.
	ErrBadConfig = errors.New("replicator: bad config")
	// ErrUnknownTopic is returned for a topic the replicator does not manage.
	ErrUnknownTopic = errors.New("replicator: topic not managed")
	// ErrSourceTopicMissing is reported for a managed topic that S does not
	// have (never created, or deleted while replicating). D is left alone.
	ErrSourceTopicMissing = errors.New("replicator: topic missing on source")
	// ErrDestinationDiverged is reported when D.T.p holds records the
	// replicator did not put there, or fewer partitions do not line up.
	ErrDestinationDiverged = errors.New("replicator: destination diverged")
	// ErrUnsupported is reported for source data the replicator cannot copy
	// exactly: pre-v2 (magic 0 or 1) record batches.
	ErrUnsupported = errors.New("replicator: unsupported source data")
	// ErrDestinationRejected is reported for a partition whose batch D
	// refuses with a non-retriable error (MESSAGE_TOO_LARGE,
	// TOPIC_AUTHORIZATION_FAILED...), which it wraps with the topic,
	// partition and source offset. The partition stops advancing and is
	// retried with backoff until D accepts the batch; nothing is skipped.
	ErrDestinationRejected = errors.New("replicator: destination rejected the write")
	// ErrSourceTopicRecreated is reported for a topic that S deleted and
	// created again after D.T was copied from the old one (a different
	// topic id): copying it onto D.T would splice two topics at the same
	// offsets. D.T is left alone; delete it to copy the new topic.
	ErrSourceTopicRecreated = errors.New("replicator: topic re-created on source")
	// ErrSourceDataLost is reported when S deleted records (retention)
	// before they were copied: the offset map records the gap.
	ErrSourceDataLost = errors.New("replicator: source records deleted before they were copied")
	// ErrBadBatch is returned for bytes that are not a well-formed v2
	// record batch.
	ErrBadBatch = errors.New("replicator: bad record batch")
	// ErrNotRunning is returned by SyncGroups (and other calls that use
	// Run's clients and copy progress) when Run is not running.
	ErrNotRunning = errors.New("replicator: not running")
	// ErrGroupSync wraps the failures of one group offset sync.
	ErrGroupSync = errors.New("replicator: group offset sync failed")
	// ErrLeaseLost is reported for a partition whose lease (Leases) ended
	// or was not long enough for one more write: another worker may copy
	// it now, so this one writes nothing more to it.
	ErrLeaseLost = errors.New("replicator: partition lease lost")
)

// Opt configures a Replicator.
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	source, destination []string
	topics              []string
	workers             int
	fetchMaxBytes       int32
	sampleInterval      time.Duration
	requestTimeout      time.Duration
	maxBackoff          time.Duration
	mapTopic            string
	groupSyncInterval   time.Duration
	configSyncInterval  time.Duration
	recentWindow        time.Duration
	recentBatches       int
	now                 func() time.Time
	log                 *slog.Logger
	registry            prometheus.Registerer
	srcOpts, dstOpts    []kgo.Opt
	leases              PartitionLeases
}

// Source sets the source cluster's bootstrap brokers. Required.
func Source(bootstrap ...string) Opt { return optFunc(func(c *config) { c.source = bootstrap }) }

// Destination sets the destination cluster's bootstrap brokers. Required.
func Destination(bootstrap ...string) Opt {
	return optFunc(func(c *config) { c.destination = bootstrap })
}

// Topics sets the topics replicated from the start, overriding none. Start
// adds more later.
func Topics(t ...string) Opt { return optFunc(func(c *config) { c.topics = t }) }

// Workers sets how many partitions are copied at once, overriding 4. Which
// partitions go first is Schedule's decision. The partitions of a migrating
// topic (SetMigrating) are copied besides them, each on a lane of its own:
// a cutover's catch-up never waits for a worker.
func Workers(n int) Opt { return optFunc(func(c *config) { c.workers = n }) }

// FetchMaxBytes bounds one fetch from S (and so one copy step of a
// partition), overriding 4 MiB.
func FetchMaxBytes(n int32) Opt { return optFunc(func(c *config) { c.fetchMaxBytes = n }) }

// SampleInterval sets how often source end offsets are sampled for the lag,
// overriding 250 ms. It is the lag's resolution.
func SampleInterval(d time.Duration) Opt { return optFunc(func(c *config) { c.sampleInterval = d }) }

// RequestTimeout bounds one request to either cluster, overriding 30 s.
func RequestTimeout(d time.Duration) Opt { return optFunc(func(c *config) { c.requestTimeout = d }) }

// MaxBackoff caps the backoff between retries of a failing partition,
// overriding 5 s (backoff starts at 100 ms and doubles).
func MaxBackoff(d time.Duration) Opt { return optFunc(func(c *config) { c.maxBackoff = d }) }

// OffsetMapTopic names the compacted topic on D that holds offset maps,
// overriding "__baton_offset_map".
func OffsetMapTopic(t string) Opt { return optFunc(func(c *config) { c.mapTopic = t }) }

// Clock sets the time source of lag samples, overriding time.Now.
func Clock(now func() time.Time) Opt { return optFunc(func(c *config) { c.now = now }) }

// Logger sets the logger, overriding slog.Default().
func Logger(l *slog.Logger) Opt { return optFunc(func(c *config) { c.log = l }) }

// Registry sets where metrics register, overriding a new private registry.
func Registry(r prometheus.Registerer) Opt { return optFunc(func(c *config) { c.registry = r }) }

// SourceClientOpts adds franz-go options (TLS, SASL) to the source client.
func SourceClientOpts(o ...kgo.Opt) Opt {
	return optFunc(func(c *config) { c.srcOpts = append(c.srcOpts, o...) })
}

// DestinationClientOpts adds franz-go options (TLS, SASL) to the
// destination client.
func DestinationClientOpts(o ...kgo.Opt) Opt {
	return optFunc(func(c *config) { c.dstOpts = append(c.dstOpts, o...) })
}

// Replicator copies topics from S to D. Create it with New, run it with
// Run; Start, Stop, Pause, Resume, SetMigrating, Lag and Status may be
// called from any goroutine, before or while it runs.
type Replicator struct {
	cfg     config
	log     *slog.Logger
	now     func() time.Time
	metrics *metrics

	src, dst *kgo.Client
	// produceTo are the clients copy steps produce to D with, each with a
	// connection of its own to each broker: a broker answers one request
	// of a connection at a time, so steps sharing one would wait for each
	// other's produce. Worker (and lane) i uses produceTo[i%len].
	produceTo      []*kgo.Client
	srcAdm, dstAdm *kadm.Client

	mu     sync.Mutex
	topics map[string]*topicState
	maps   map[string]OffsetMap // by topic; loaded by Run
	// handoffs are topics whose copy stopped (Stop), by topic: their
	// groups are still synced, through these offsets. Loaded by Run.
	handoffs map[string]map[int32]partProgress
	// sourceIDs are the S topic ids D's topics were copied from, by topic
	// (kept on D, loaded by Run).
	sourceIDs map[string][16]byte
	// diverged holds, by topic and partition, the first
	// ErrDestinationDiverged seen there. It outlives the error (a retry
	// resumes from D's end, which then includes the foreign records) and
	// Stop and Start: D.T.p no longer mirrors S.T.p, whatever comes next.
	diverged map[string]map[int32]error
	changed  chan struct{} // closed and replaced on every state change
	// sampleNow asks the sampler for a sample at once (buffer 1): a topic
	// set migrating is copied to the source's end without waiting a tick.
	sampleNow chan struct{}
	running   bool
	// lanes is how many copy goroutines run besides the workers, for the
	// partitions of migrating topics (laneKeeper).
	lanes int
	pid   producerID // the run's shared producer id, zero before InitProducerId
	order string     // last schedule, for the debug log

	onRead     atomic.Pointer[func(SourceRead)] // OnSourceRead's callback
	onProgress atomic.Pointer[func(string)]     // OnProgress's callback

	configMu       sync.Mutex                   // guards lastSrcConfigs (SyncConfigs)
	lastSrcConfigs map[string]map[string]string // S's mirrored dynamic configs at the last pass, by topic

	latMu   sync.Mutex                // guards latency (the map; each window has its own lock)
	latency map[string]*latencyWindow // destination ack latency by topic (latency.go)
}

type producerID struct {
	id    int64
	epoch int16
}

type topicState struct {
	name      string
	migrating bool
	paused    bool
	stopping  bool
	ready     bool // D.T exists with S.T's partitions
	err       error
	parts     map[int32]*partState
}

type partState struct {
	topic string
	p     int32

	busy     bool
	inited   bool
	usedPID  bool // this partition has written with the shared producer id
	next     int64
	dstEnd   int64
	delta    int64 // src - dst in force for the next batch
	prod     producerID
	seq      int32
	lag      lagClock
	err      error
	failures int
	retryAt  time.Time
	lost     int64 // source records deleted before they were copied
	recent   recentBatches
	seeded   bool // recent was read back from the source (seedRecent)
	// resync: under Leases, the partition may have been another worker's
	// since this one set it up, so its set-up reads its offset map
	// segments from D again. Set at first and whenever its lease lapses.
	resync bool
	// gone: its topic was forgotten (Forget); nothing more is written.
	gone bool

	srcLeader, dstLeader int32
	// produceTo is the client the step in flight produces with (its
	// worker's).
	produceTo *kgo.Client
}

// New validates the options. Run connects and copies.
func New(opts ...Opt) (*Replicator, error) {
	cfg := config{
		workers:            DefaultWorkers,
		fetchMaxBytes:      DefaultFetchMaxBytes,
		sampleInterval:     DefaultSampleInterval,
		requestTimeout:     DefaultRequestTimeout,
		maxBackoff:         DefaultMaxBackoff,
		mapTopic:           DefaultOffsetMapTopic,
		groupSyncInterval:  DefaultGroupSyncInterval,
		configSyncInterval: DefaultConfigSyncInterval,
		recentWindow:       DefaultRecentWindow,
		recentBatches:      DefaultRecentBatches,
		now:                time.Now,
	}
	for _, o := range opts {
		o.apply(&cfg)
	}
	switch {
	case len(cfg.source) == 0:
		return nil, fmt.Errorf("%w: source brokers are required", ErrBadConfig)
	case len(cfg.destination) == 0:
		return nil, fmt.Errorf("%w: destination brokers are required", ErrBadConfig)
	case cfg.workers < 1:
		return nil, fmt.Errorf("%w: workers must be at least 1, got %d", ErrBadConfig, cfg.workers)
	case cfg.fetchMaxBytes < 1<<10:
		return nil, fmt.Errorf("%w: fetch max bytes must be at least 1 KiB, got %d", ErrBadConfig, cfg.fetchMaxBytes)
	case cfg.sampleInterval <= 0:
		return nil, fmt.Errorf("%w: sample interval must be positive, got %v", ErrBadConfig, cfg.sampleInterval)
	case cfg.requestTimeout <= 0:
		return nil, fmt.Errorf("%w: request timeout must be positive, got %v", ErrBadConfig, cfg.requestTimeout)
	case cfg.maxBackoff <= 0:
		return nil, fmt.Errorf("%w: max backoff must be positive, got %v", ErrBadConfig, cfg.maxBackoff)
	case cfg.mapTopic == "":
		return nil, fmt.Errorf("%w: offset map topic is required", ErrBadConfig)
	case cfg.groupSyncInterval < 0:
		return nil, fmt.Errorf("%w: group sync interval must not be negative, got %v", ErrBadConfig, cfg.groupSyncInterval)
	case cfg.configSyncInterval < 0:
		return nil, fmt.Errorf("%w: config sync interval must not be negative, got %v", ErrBadConfig, cfg.configSyncInterval)
	case cfg.recentWindow <= 0:
		return nil, fmt.Errorf("%w: recent window must be positive, got %v", ErrBadConfig, cfg.recentWindow)
	case cfg.recentBatches < 1:
		return nil, fmt.Errorf("%w: recent batches must be at least 1, got %d", ErrBadConfig, cfg.recentBatches)
	}
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	if cfg.registry == nil {
		cfg.registry = prometheus.NewRegistry()
	}
	m, err := newMetrics(cfg.registry)
	if err != nil {
		return nil, err
	}
	r := &Replicator{
		cfg: cfg, log: cfg.log.With("component", "replicator"), now: cfg.now, metrics: m,
		topics: map[string]*topicState{}, changed: make(chan struct{}), sampleNow: make(chan struct{}, 1),
		lastSrcConfigs: map[string]map[string]string{},
	}
	if err := cfg.registry.Register(newLatencyCollector(r)); err != nil {
		return nil, err
	}
	for _, t := range cfg.topics {
		r.Start(t)
	}
	return r, nil
}

// clientVersions caps Fetch and Produce at v12: v13 names topics by id,
// which differ between clusters.
func clientVersions() *kversion.Versions {
	v := kversion.Stable()
	v.SetMaxKeyVersion(0, 12) // Produce
	v.SetMaxKeyVersion(1, 12) // Fetch
	return v
}

// Run connects to both clusters and copies until ctx ends. It returns after
// every produce in flight to D has been answered (or has timed out), so a
// later Run resumes from what D holds with no duplicate.
func (r *Replicator) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.running {
		r.mu.Unlock()
		return fmt.Errorf("%w: Run called twice", ErrBadConfig)
	}
	r.running = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.running, r.lanes = false, 0 // every lane ended with ctx
		r.srcAdm, r.dstAdm = nil, nil
		r.pid = producerID{}
		for _, t := range r.topics {
			t.ready = false
			for _, p := range t.parts {
				p.inited, p.busy, p.usedPID, p.srcLeader, p.dstLeader = false, false, false, -1, -1
				p.produceTo = nil // closed with the Run
			}
		}
		r.notifyLocked()
		r.mu.Unlock()
	}()

	common := []kgo.Opt{kgo.MaxVersions(clientVersions()),
		kgo.RequestTimeoutOverhead(r.cfg.requestTimeout), kgo.WithLogger(nil)}
	var err error
	if r.src, err = kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(r.cfg.source...)}, common...), r.cfg.srcOpts...)...); err != nil {
		return fmt.Errorf("replicator: source client: %w", err)
	}
	defer r.src.Close()
	if r.dst, err = kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(r.cfg.destination...)}, common...), r.cfg.dstOpts...)...); err != nil {
		return fmt.Errorf("replicator: destination client: %w", err)
	}
	defer r.dst.Close()
	// Emptied before the clients are made, so that a Run returning while
	// making them leaves no closed client for the next Run.
	r.produceTo = make([]*kgo.Client, 0, produceClients)
	defer func() { r.produceTo = nil }() // after every copy step ended
	for range produceClients {
		cl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(r.cfg.destination...)}, common...), r.cfg.dstOpts...)...)
		if err != nil {
			return fmt.Errorf("replicator: destination client: %w", err)
		}
		defer cl.Close()
		r.produceTo = append(r.produceTo, cl)
	}
	r.mu.Lock() // SyncGroups reads them from other goroutines
	r.srcAdm, r.dstAdm = kadm.NewClient(r.src), kadm.NewClient(r.dst)
	r.mu.Unlock()

	if err := r.loadMaps(ctx); err != nil {
		return err
	}

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); r.sampler(ctx) }()
	if r.cfg.groupSyncInterval > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); r.groupSyncer(ctx, r.cfg.groupSyncInterval) }()
	}
	if r.cfg.configSyncInterval > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); r.configSyncer(ctx, r.cfg.configSyncInterval) }()
	}
	for i := range r.cfg.workers {
		wg.Add(1)
		go func() { defer wg.Done(); r.worker(ctx, false, r.produceTo[i%len(r.produceTo)]) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); r.laneKeeper(ctx, &wg) }()
	wg.Wait()
	return nil
}

// laneKeeper keeps one lane per partition of the migrating topics running
// (laneWantLocked) until ctx ends. A lane is a worker that copies only
// migrating topics' partitions, so that the final catch-up of a cutover
// copies every partition of the topic at once, none waiting for one of the
// Workers to finish a step of another. A lane with nothing to copy ends
// when there are more lanes than wanted. The keeper is one of wg's own,
// so that the lanes it adds are waited for by Run.
func (r *Replicator) laneKeeper(ctx context.Context, wg *sync.WaitGroup) {
	for {
		r.mu.Lock()
		for want := r.laneWantLocked(); r.lanes < want; r.lanes++ {
			cl := r.produceTo[(r.cfg.workers+r.lanes)%len(r.produceTo)]
			wg.Add(1)
			go func() { defer wg.Done(); r.worker(ctx, true, cl) }()
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

// laneWantLocked is how many lanes the migrating topics want: one per
// partition of each that is being copied. r.mu is held.
func (r *Replicator) laneWantLocked() int {
	n := 0
	for _, t := range r.topics {
		if t.migrating && t.ready && !t.paused && !t.stopping {
			n += len(t.parts)
		}
	}
	return n
}

// loadMaps creates the offset map topic if needed and reads it, retrying
// until ctx ends.
func (r *Replicator) loadMaps(ctx context.Context) error {
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, r.cfg.maxBackoff) {
		err := ensureMapTopic(ctx, r.dstAdm, r.cfg.mapTopic)
		var loaded mapTopicT
		if err == nil {
			loaded, err = loadMapTopic(ctx, r.cfg.destination, r.cfg.mapTopic, r.cfg.dstOpts...)
		}
		if err == nil {
			maps, handoffs := loaded.maps, loaded.handoffs
			r.mu.Lock()
			r.maps = maps
			if r.sourceIDs == nil {
				r.sourceIDs = map[string][16]byte{}
			}
			for topic, id := range loaded.sourceIDs {
				if _, ok := r.sourceIDs[topic]; !ok {
					r.sourceIDs[topic] = id
				}
			}
			if r.handoffs == nil {
				r.handoffs = map[string]map[int32]partProgress{}
			}
			for topic, h := range handoffs {
				if _, ok := r.handoffs[topic]; !ok { // a Stop meanwhile wins
					r.handoffs[topic] = h.progress()
				}
			}
			r.mu.Unlock()
			return nil
		}
		r.log.Warn("loading offset maps from the destination", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
}

// notifyLocked wakes everyone waiting for a state change. r.mu is held.
func (r *Replicator) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// writeHandoff keeps h on D, acks=all.
func (r *Replicator) writeHandoff(ctx context.Context, h Handoff) error {
	r.mu.Lock()
	running := r.dstAdm != nil // set, under r.mu, after r.dst
	r.mu.Unlock()
	if !running {
		return ErrNotRunning
	}
	if r.cfg.leases == nil {
		v, err := json.Marshal(h)
		if err != nil {
			return err
		}
		return r.writeMap(ctx, []*kgo.Record{{Topic: r.cfg.mapTopic, Partition: 0, Key: handoffKey(h.Topic), Value: v}})
	}
	// Workers stop one topic each for its own partitions: one record per
	// partition, which loading merges, so none overwrites another's.
	recs := make([]*kgo.Record, 0, len(h.Partitions))
	for _, p := range h.Partitions {
		v, err := json.Marshal(Handoff{Topic: h.Topic, Partitions: []HandoffPartition{p}})
		if err != nil {
			return err
		}
		recs = append(recs, &kgo.Record{Topic: r.cfg.mapTopic, Partition: 0, Key: partitionHandoffKey(h.Topic, p.Partition), Value: v})
	}
	if len(recs) == 0 {
		return nil
	}
	return r.writeMap(ctx, recs)
}

// Start adds topic to the replicated set (a no-op if it is there, except
// that a paused topic resumes).
func (r *Replicator) Start(topic string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.topics[topic]; ok && !t.stopping {
		t.paused = false
		r.notifyLocked()
		return
	}
	r.topics[topic] = &topicState{name: topic, parts: map[int32]*partState{}}
	// Copied again (a rollback after Stop): its groups follow the copy's
	// progress, not the handoff. A handoff kept on D is ignored while the
	// topic is managed and overwritten by the next Stop.
	delete(r.handoffs, topic)
	r.notifyLocked()
}

// SetMigrating marks topic as being cut over, which puts it first in the
// copy order. Marking it samples the source's end offsets at once: a
// partition is copied only up to what a sample (or its last fetch) showed,
// and the cutover, which has just drained the agents, waits for the copy
// to reach the source's end, not for the next tick of the sampler.
func (r *Replicator) SetMigrating(topic string, migrating bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.topics[topic]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownTopic, topic)
	}
	t.migrating = migrating
	if migrating {
		select {
		case r.sampleNow <- struct{}{}:
		default: // one is asked for already
		}
	}
	r.notifyLocked()
	return nil
}

// Pause stops copying topic after the copy steps in flight; its lag keeps
// being measured. Resume (or Start) continues.
func (r *Replicator) Pause(topic string) error { return r.setPaused(topic, true) }

// Resume continues copying a paused topic.
func (r *Replicator) Resume(topic string) error { return r.setPaused(topic, false) }

func (r *Replicator) setPaused(topic string, paused bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.topics[topic]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownTopic, topic)
	}
	t.paused = paused
	r.notifyLocked()
	return nil
}

// Stopped is where a topic's copy stopped.
type Stopped struct {
	// Partitions are each partition's final state: Next is the first
	// source offset not copied, DestinationEnd D's end offset.
	Partitions []PartitionStatus
	// Recent are the last batches of each idempotent source producer
	// session and partition copied within RecentWindow, at most
	// RecentBatches of them (the newest), by partition and offset.
	Recent []SourceBatch
}

// Stop removes topic from the replicated set. It returns once no copy step
// of the topic is in flight, that is after the last produce to D was
// acknowledged (or failed), with where the copy stopped.
func (r *Replicator) Stop(ctx context.Context, topic string) (Stopped, error) {
	r.mu.Lock()
	t, ok := r.topics[topic]
	if !ok {
		r.mu.Unlock()
		return Stopped{}, fmt.Errorf("%w: %s", ErrUnknownTopic, topic)
	}
	t.stopping = true
	r.notifyLocked()
	for {
		busy := false
		for _, p := range t.parts {
			busy = busy || p.busy
		}
		if !busy {
			break
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			r.mu.Lock()
			t.stopping = false
			r.notifyLocked()
			r.mu.Unlock()
			return Stopped{}, ctx.Err()
		case <-ch:
		}
		r.mu.Lock()
	}
	st := r.topicStatusLocked(t)
	// A worker answers for the partitions it holds only: the others' state
	// here is another worker's copy as it was when this one last held it.
	held := r.leasedLocked()
	recent := make([]recentBatches, 0, len(t.parts))
	for _, p := range t.parts {
		if held == nil || held[p] {
			recent = append(recent, p.recent)
		}
	}
	if held != nil {
		parts := st.Partitions[:0:0]
		for _, ps := range st.Partitions {
			if held[t.parts[ps.Partition]] {
				parts = append(parts, ps)
			}
		}
		st.Partitions = parts
	}
	out := Stopped{Partitions: st.Partitions}
	var dropped int
	out.Recent, dropped = newest(recent, r.now().Add(-r.cfg.recentWindow), r.cfg.recentBatches)
	delete(r.topics, topic)
	r.forgetLatency(topic)
	h := Handoff{Topic: topic}
	for _, p := range st.Partitions {
		if p.Next < 0 {
			continue // never set up: nothing known to sync groups through
		}
		h.Partitions = append(h.Partitions, HandoffPartition{Partition: p.Partition, Source: p.Next, Destination: p.DestinationEnd})
	}
	if r.handoffs == nil {
		r.handoffs = map[string]map[int32]partProgress{}
	}
	r.handoffs[topic] = h.progress() // a worker's: the group sync covers its own partitions
	r.configMu.Lock()
	delete(r.lastSrcConfigs, topic)
	r.configMu.Unlock()
	r.metrics.forget(topic, t.parts)
	r.notifyLocked()
	r.mu.Unlock()
	// Kept on D so that a restarted replicator keeps syncing the groups.
	// The copy itself is done: a failure here costs only that.
	if err := r.writeHandoff(ctx, h); err != nil {
		r.log.Error("recording where the copy stopped; a restarted replicator will not sync this topic's groups",
			"topic", topic, "err", err)
	}
	if dropped > 0 {
		r.log.Warn("more recent idempotent batches than the bound; a client's retry of one left out after the cutover is written to the destination again (a duplicate): raise the replicator's recent batches bound",
			"topic", topic, "kept", len(out.Recent), "left_out", dropped)
	}
	return out, nil
}

// worker copies one partition step at a time, in Schedule's order; a lane
// (laneKeeper) only the partitions of migrating topics, and it ends when
// it has nothing to copy and more lanes run than are wanted.
func (r *Replicator) worker(ctx context.Context, lane bool, dst *kgo.Client) {
	for {
		p, wait, retryIn, end := r.pick(lane)
		if end {
			return
		}
		if p == nil {
			select {
			case <-ctx.Done():
				return
			case <-wait:
			case <-time.After(min(r.cfg.sampleInterval, retryIn)):
			}
			continue
		}
		p.produceTo = dst
		err := r.step(ctx, p)
		r.mu.Lock()
		p.busy = false
		if errors.Is(err, ErrLeaseLost) {
			// Not a failure of the copy: the partition waits for its
			// lease, and resumes from D's state when it has it again.
			p.resync = true
			r.log.Debug("copy step ended: partition lease lost", "topic", p.topic, "partition", p.p, "err", err)
			err = nil
		} else if err != nil && ctx.Err() == nil {
			p.failures++
			backoff := min(r.cfg.maxBackoff, 100*time.Millisecond<<min(p.failures-1, 10))
			p.retryAt = time.Now().Add(backoff)
			kind := errKind(err)
			if p.err == nil || p.err.Error() != err.Error() {
				// Logged when the error changes, not on every retry.
				lvl := slog.LevelWarn
				if errors.Is(err, ErrDestinationRejected) {
					lvl = slog.LevelError
				}
				r.log.Log(ctx, lvl, "copy step failed", "topic", p.topic, "partition", p.p, "kind", kind, "err", err,
					"source_next", p.next, "retry_in", backoff)
			}
			r.setPartitionErrLocked(p, err)
			r.metrics.errors.WithLabelValues(p.topic, kind).Inc()
		} else if err == nil {
			if p.err != nil {
				r.log.Info("copy resumed", "topic", p.topic, "partition", p.p, "after_failures", p.failures)
			}
			r.setPartitionErrLocked(p, nil)
			p.failures = 0
		}
		r.notifyLocked()
		r.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
	}
}

// pick chooses the next partition to copy and marks it busy, or returns a
// channel that is closed when the state changes and how long until the
// first partition waiting out a failure's backoff may be retried. For a
// lane it chooses among migrating topics' partitions only, and says the
// lane ends (end) instead when none is to be copied and more lanes run
// than are wanted.
func (r *Replicator) pick(lane bool) (_ *partState, _ <-chan struct{}, _ time.Duration, end bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	wall := time.Now()
	var cands []Candidate
	byKey := map[Candidate]*partState{}
	retryIn := time.Duration(math.MaxInt64)
	held := r.leasedLocked()
	for _, t := range r.topics {
		if !t.ready || t.paused || t.stopping || (lane && !t.migrating) {
			continue
		}
		for _, p := range t.parts {
			if p.busy {
				continue
			}
			if wall.Before(p.retryAt) {
				retryIn = min(retryIn, p.retryAt.Sub(wall))
				continue
			}
			if held != nil && !held[p] {
				continue // another worker's
			}
			if p.inited && p.lag.end() <= p.next {
				continue // caught up as far as the samples show
			}
			c := Candidate{Topic: t.name, Partition: p.p, Lag: p.lag.lag(now, p.next), Migrating: t.migrating}
			cands = append(cands, c)
			byKey[c] = p
		}
	}
	if len(cands) == 0 {
		if lane && r.lanes > r.laneWantLocked() {
			r.lanes--
			return nil, nil, 0, true
		}
		return nil, r.changed, retryIn, false
	}
	order := Schedule(cands)
	if r.log.Enabled(context.Background(), slog.LevelDebug) {
		s := fmt.Sprint(order)
		if s != r.order {
			r.order = s
			r.log.Debug("schedule", "order", s)
		}
	}
	p := byKey[order[0]]
	p.busy = true
	return p, nil, 0, false
}

// leasedLocked returns, under Leases, the partitions (of every topic,
// paused or not) this replicator may write now, and forgets where the copy
// of each other one stands: it may be another worker's until it is this
// one's again, and then it resumes from what D holds, not from here. A
// partition with a step in flight keeps its state for the step, which
// stops at its next write (ErrLeaseLost). Without leases it returns nil:
// every partition. r.mu is held.
func (r *Replicator) leasedLocked() map[*partState]bool {
	if r.cfg.leases == nil {
		return nil
	}
	held := map[*partState]bool{}
	for _, t := range r.topics {
		for _, p := range t.parts {
			if _, ok := r.mayWrite(t.name, p.p); ok {
				held[p] = true
			} else if !p.busy {
				p.inited, p.resync, p.next, p.dstEnd = false, true, -1, -1
			}
		}
	}
	return held
}

// sampler samples source end offsets of every topic, sets up topics not yet
// ready and keeps lag gauges current.
func (r *Replicator) sampler(ctx context.Context) {
	tick := time.NewTicker(r.cfg.sampleInterval)
	defer tick.Stop()
	lastIDCheck := time.Now()
	for {
		r.sampleOnce(ctx)
		if time.Since(lastIDCheck) >= identityCheckInterval {
			lastIDCheck = time.Now()
			r.checkIdentities(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-r.sampleNow:
		}
	}
}

// identityCheckInterval is how often copied topics' source ids are
// compared with the ids D's copies were made from.
const identityCheckInterval = 5 * time.Second

// checkIdentities stops copying a topic that S deleted and created again
// between two samples (the deletion itself went unseen): its id changed,
// and copying on would splice the new topic onto D's copy of the old one.
// Setup then reports ErrSourceTopicRecreated.
func (r *Replicator) checkIdentities(ctx context.Context) {
	r.mu.Lock()
	want := map[string][16]byte{}
	for name, t := range r.topics {
		if id, ok := r.sourceIDs[name]; ok && t.ready && !t.stopping {
			want[name] = id
		}
	}
	r.mu.Unlock()
	for name, rec := range want {
		cctx, cancel := context.WithTimeout(ctx, r.cfg.requestTimeout)
		id, err := r.sourceTopicID(cctx, name)
		cancel()
		if err != nil || id == (kadm.TopicID{}) || id == rec {
			continue // missing topics are the sample's to notice
		}
		r.mu.Lock()
		if t, ok := r.topics[name]; ok && t.ready {
			t.ready = false
			r.metrics.forget(t.name, t.parts)
			t.parts = map[int32]*partState{}
			r.log.Error("topic re-created on the source while replicating; its copy stops", "topic", name)
			r.notifyLocked()
		}
		r.mu.Unlock()
	}
}

func (r *Replicator) sampleOnce(ctx context.Context) {
	r.mu.Lock()
	var names []string
	for name := range r.topics {
		names = append(names, name)
	}
	r.mu.Unlock()
	if len(names) == 0 {
		return
	}
	sort.Strings(names)
	for _, name := range names {
		r.mu.Lock()
		t, ok := r.topics[name]
		ready := ok && t.ready
		r.mu.Unlock()
		if ok && !ready {
			err := r.setupTopic(ctx, name)
			r.mu.Lock()
			if t2, ok := r.topics[name]; ok && t2 == t {
				if err != nil && (t.err == nil || t.err.Error() != err.Error()) {
					// Logged when the error changes, not on every sample.
					r.log.Warn("topic setup failed", "topic", name, "err", err)
				}
				if err != nil {
					r.metrics.errors.WithLabelValues(name, errKind(err)).Inc()
				}
				t.err = err
			}
			r.mu.Unlock()
		}
	}
	sctx, cancel := context.WithTimeout(ctx, r.cfg.requestTimeout)
	ends, err := r.srcAdm.ListCommittedOffsets(sctx, names...)
	cancel()
	at := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		ends.Each(func(o kadm.ListedOffset) {
			t, ok := r.topics[o.Topic]
			if !ok {
				return
			}
			if errors.Is(o.Err, kerr.UnknownTopicOrPartition) || errors.Is(o.Err, kerr.UnknownTopicID) {
				if t.ready {
					// Deleted on S while replicating: stop copying; setup
					// reports ErrSourceTopicMissing, or
					// ErrSourceTopicRecreated for a topic created again
					// under the name (a new topic id) while D.T holds
					// the old one's copy. D's copy is never deleted. The
					// partitions start over: a new incarnation is copied
					// from D's end as any topic is.
					t.ready = false
					r.metrics.forget(t.name, t.parts)
					t.parts = map[int32]*partState{}
					if !errors.Is(t.err, ErrSourceTopicMissing) {
						r.log.Error("topic deleted on the source while replicating; the destination keeps its copy",
							"topic", o.Topic)
					}
					t.err = fmt.Errorf("%w: %s (deleted while replicating)", ErrSourceTopicMissing, t.name)
				}
				return
			}
			if o.Err != nil {
				return
			}
			if p, ok := t.parts[o.Partition]; ok {
				p.lag.observe(at, o.Offset)
			} else if t.ready {
				t.ready = false // a partition was added on S: set up again
			}
		})
	} else if ctx.Err() == nil {
		r.log.Warn("sampling source end offsets", "err", err)
	}
	for _, t := range r.topics {
		var topicLag time.Duration
		for _, p := range t.parts {
			l := p.lag.lag(at, p.next)
			topicLag = max(topicLag, l)
			r.metrics.lag.WithLabelValues(t.name, itoa(p.p)).Set(l.Seconds())
		}
		r.metrics.topicLag.WithLabelValues(t.name).Set(topicLag.Seconds())
	}
	r.notifyLocked()
}

// SourceRead is one data batch the replicator read from a source partition
// (not a control batch, not aborted data), for bypass detection
// (docs/design.md §12): the control plane matches it against the offsets
// agents say they wrote.
type SourceRead struct {
	Topic      string
	Partition  int32
	BaseOffset int64
	// End is the offset after the batch's last record.
	End        int64
	ProducerID int64
	// After is a time when the source's end offset was at or below
	// BaseOffset (from the lag samples): the batch was appended after it.
	// Zero when no sample says.
	After time.Time
	// Seen is when a sample of the source's end offsets first showed the
	// batch (else At): it was appended before, whenever the copy got to it.
	Seen time.Time
	// At is when the batch was read.
	At time.Time
}

// OnProgress sets f to be called with a topic's name each time the copy
// of one of its partitions advances (Status's Next moves), from the
// copying goroutines: f must not block. nil stops the calls. A cutover
// waiting for the copy to reach the source's end offsets learns of each
// step at once instead of polling.
func (r *Replicator) OnProgress(f func(topic string)) {
	if f == nil {
		r.onProgress.Store(nil)
		return
	}
	r.onProgress.Store(&f)
}

// OnSourceRead sets f to be called with every data batch read from the
// source, before it is copied (again if its copy is retried), from the
// copying goroutines: f must not block. nil stops the calls.
func (r *Replicator) OnSourceRead(f func(SourceRead)) {
	if f == nil {
		r.onRead.Store(nil)
		return
	}
	r.onRead.Store(&f)
}
