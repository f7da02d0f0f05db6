package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane/acl"
	"github.com/baton-kafka/baton/controlplane/cutover"
	"github.com/baton-kafka/baton/controlplane/nodeauth"
	"github.com/baton-kafka/baton/controlplane/shadow"
	"github.com/baton-kafka/baton/controlplane/txngate"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/xds"
)

// Defaults of the options below (docs/design.md §5, §6).
const (
	DefaultCutoverTimeout = 10 * time.Second
	DefaultPollInterval   = 25 * time.Millisecond
	DefaultGuardResync    = 10 * time.Second
	// ActorControlPlane is the actor of events the control plane decides.
	ActorControlPlane = "controlplane"
)

// Opt configures New.
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	store        Store
	xds          *xds.Server
	repl         Replication
	guard        WriteGuard
	fence        SourceFence
	lease        time.Duration
	forward      time.Duration
	timeout      time.Duration
	poll         time.Duration
	guardResync  time.Duration
	source, dest *batonv1.Cluster
	log          *slog.Logger
	now          func() time.Time
	nodeAuth     *nodeauth.Checker
	// forgottenWindow: gates.go.
	forgottenWindow time.Duration
	// replica, takeover and records: replicas.go, package replicas.
	replica  string
	takeover time.Duration
	records  Records
	registry prometheus.Registerer
	// shadow configures the shadow job (shadowhost.go).
	shadow []shadow.Opt

	// txns and txnWindow: gates.go, package txngate.
	txns      txngate.Reader
	txnWindow time.Duration
	// reports: reports.go.
	reports ReportObserver
}

// WithStore sets the state store (required).
func WithStore(s Store) Opt { return optFunc(func(c *config) { c.store = s }) }

// WithXDS sets the xDS server routes are published on (default: a new one,
// see XDS).
func WithXDS(s *xds.Server) Opt { return optFunc(func(c *config) { c.xds = s }) }

// WithReplication sets the replicator driver (required).
func WithReplication(r Replication) Opt { return optFunc(func(c *config) { c.repl = r }) }

// WithGuard sets the destination write guard (default NoGuard).
func WithGuard(g WriteGuard) Opt { return optFunc(func(c *config) { c.guard = g }) }

// WithSourceFence sets the source fence (default NoFence). With one, every
// topic's routes say so (source_fenced): agents may keep forwarding it
// without a lease, and each cutover fences the topic on the source before
// it reads the source's end offsets (docs/design.md §6.1).
func WithSourceFence(f SourceFence) Opt { return optFunc(func(c *config) { c.fence = f }) }

// ReplicaID names this control plane among replicas on one etcd: it is
// recorded with every lease it grants (default: none).
func ReplicaID(id string) Opt { return optFunc(func(c *config) { c.replica = id }) }

// TakeoverMargin is how long after this control plane started a replica
// that led before it may still have granted leases (its etcd session's
// TTL: it stops within that): every known agent counts as granted a lease
// that late (default 0, for a single control plane).
func TakeoverMargin(d time.Duration) Opt { return optFunc(func(c *config) { c.takeover = d }) }

// LeaseDuration sets the agents' lease (default 5 s).
func LeaseDuration(d time.Duration) Opt { return optFunc(func(c *config) { c.lease = d }) }

// ForwardDeadline sets F, pushed to agents and waited for silent agents
// (default 2 s; must be below the lease).
func ForwardDeadline(d time.Duration) Opt { return optFunc(func(c *config) { c.forward = d }) }

// CutoverTimeout bounds every wait of a cutover (default 10 s); the gate
// wants time lag <= timeout/4.
func CutoverTimeout(d time.Duration) Opt { return optFunc(func(c *config) { c.timeout = d }) }

// PollInterval is how often waits re-check the replicator (default 25 ms).
func PollInterval(d time.Duration) Opt { return optFunc(func(c *config) { c.poll = d }) }

// GuardResync is how often the write guard of every REJECT and PROXY topic
// is applied again (default 10 s): a write grant made on the destination
// after the guard went up is denied at the next pass.
func GuardResync(d time.Duration) Opt { return optFunc(func(c *config) { c.guardResync = d }) }

// Clusters names the default source and destination clusters served as
// Cluster resources (required).
func Clusters(source, destination *batonv1.Cluster) Opt {
	return optFunc(func(c *config) { c.source, c.dest = source, destination })
}

// Clock sets the clock (default time.Now).
func Clock(now func() time.Time) Opt { return optFunc(func(c *config) { c.now = now }) }

// Logger sets the logger (default slog.Default()).
func Logger(l *slog.Logger) Opt { return optFunc(func(c *config) { c.log = l }) }

// NodeIdentity makes the gRPC services refuse a node id the connection's
// client certificate does not vouch for (nodeauth.Checker), overriding no
// check. The gRPC server MUST require and verify client certificates
// (tls.RequireAndVerifyClientCert) and take its interceptors from
// ServerOptions.
func NodeIdentity(rules []nodeauth.Rule) Opt {
	return optFunc(func(c *config) { c.nodeAuth = nodeauth.New(rules) })
}

// Registry sets where the control plane's metrics register (default: a
// private registry).
func Registry(r prometheus.Registerer) Opt { return optFunc(func(c *config) { c.registry = r }) }

// ControlPlane runs the state machine, leases and cutovers. Create it with
// New; Register it on a gRPC server (ADS and the Lease service), serve
// its HTTP API (package httpapi), and Run it.
type ControlPlane struct {
	batonv1.UnimplementedLeaseServer

	cfg   config
	log   *slog.Logger
	now   func() time.Time
	store Store

	ctx    context.Context // cutover goroutines' lifetime
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// gateChecks are the cutover gates after the time lag, in check
	// order; set in New.
	gateChecks []gateCheck

	mu      sync.Mutex
	version uint64
	topics  map[string]*Topic
	agents  map[string]*Agent
	dirty   map[string]bool
	runs    map[string]*run
	changed chan struct{}
	// keeper restores the destination write guard in the background and
	// serializes it with the cutover's Lift; it keeps its own state and
	// locks, and may be called with cp.mu held (aclhost.go).
	keeper *acl.Keeper
	// catchUp holds, per topic whose cutover waits for the copy to reach
	// the source's end offsets, the channel (buffer 1) that noteProgress
	// signals at each advance (driver.go).
	catchUp sync.Map

	// recorded is, per agent, the etcd revision of the last record a
	// follower made that was merged (replicas.go).
	recorded map[string]int64

	// shadow is the PROXY phase's watch: bypass detection, agents'
	// findings, destination latency profiles (shadowhost.go).
	shadow *shadow.Job
	// txns is the transactional-producer gate, and names a rolled-back
	// cutover's open transactions (package txngate).
	txns *txngate.Gate
	// cutoverMetrics are the cutovers' histograms (metrics.go).
	cutoverMetrics cutoverMetrics
}

type run struct {
	cancel  context.CancelFunc
	done    chan struct{}
	aborted bool
	actor   string
	reason  string
}

// newConfig is the defaults with opts applied.
func newConfig(opts []Opt) config {
	cfg := config{guard: NoGuard{}, fence: NoFence{}, lease: migration.DefaultLease, forward: migration.DefaultForwardDeadline,
		timeout: DefaultCutoverTimeout, poll: DefaultPollInterval, guardResync: DefaultGuardResync, log: slog.Default(), now: time.Now,
		forgottenWindow: DefaultForgottenProducerWindow,
		txnWindow:       txngate.DefaultWindow, reports: noReports{}}
	for _, o := range opts {
		o.apply(&cfg)
	}
	return cfg
}

// New loads the state from the store, decides any cutover a previous
// process (or leader) left in flight (COMPLETE when every step but that
// one was done, StepDone, before the attempt's deadline; else back to
// PROXY), restarts replication of managed topics and publishes the routes.
func New(ctx context.Context, opts ...Opt) (*ControlPlane, error) {
	cfg := newConfig(opts)
	switch {
	case cfg.store == nil:
		return nil, fmt.Errorf("%w: a store is required", ErrBadConfig)
	case cfg.repl == nil:
		return nil, fmt.Errorf("%w: a replication driver is required", ErrBadConfig)
	case cfg.source == nil || cfg.dest == nil || cfg.source.GetName() == "" || cfg.dest.GetName() == "":
		return nil, fmt.Errorf("%w: named source and destination clusters are required", ErrBadConfig)
	case cfg.lease <= 0 || cfg.forward <= 0 || cfg.forward >= cfg.lease:
		return nil, fmt.Errorf("%w: want 0 < forward deadline (%v) < lease (%v)", ErrBadConfig, cfg.forward, cfg.lease)
	case cfg.timeout <= 0 || cfg.poll <= 0 || cfg.guardResync <= 0:
		return nil, fmt.Errorf("%w: cutover timeout, poll interval and guard resync must be positive", ErrBadConfig)
	case cfg.forgottenWindow < 0:
		return nil, fmt.Errorf("%w: forgotten producer window %v is negative (0 turns the gate off)", ErrBadConfig, cfg.forgottenWindow)
	case cfg.txnWindow < 0:
		return nil, fmt.Errorf("%w: transactional producer window %v is negative (0 turns the gate off)", ErrBadConfig, cfg.txnWindow)
	}
	if _, etcd := cfg.store.(*EtcdStore); !etcd || cfg.replica == "" {
		cfg.records = nil // no other replica writes records
	} else if cfg.records == nil {
		return nil, fmt.Errorf("%w: a replica on etcd needs WithRecords (replicas.NewRecords) to know the leases the others grant", ErrBadConfig)
	}
	if cfg.registry == nil {
		cfg.registry = prometheus.NewRegistry()
	}
	cm, err := newCutoverMetrics(cfg.registry)
	if err != nil {
		return nil, err
	}
	if cfg.xds == nil {
		cfg.xds = xds.NewServer(xds.WithLogger(cfg.log), xds.WithClock(cfg.now))
	}
	cp := &ControlPlane{cfg: cfg, log: cfg.log.With("component", "controlplane"), now: cfg.now, store: cfg.store,
		topics: map[string]*Topic{}, agents: map[string]*Agent{}, dirty: map[string]bool{},
		runs: map[string]*run{}, changed: make(chan struct{}),
		recorded: map[string]int64{}, cutoverMetrics: cm}
	cp.txns = &txngate.Gate{Reader: cfg.txns, Window: cfg.txnWindow, Now: cfg.now, Log: cp.log}
	cp.gateChecks = cp.gates()
	cp.keeper = newKeeper(cp)
	if err := cfg.registry.Register(stateCollector{cp}); err != nil {
		return nil, fmt.Errorf("%w: registry: %w", ErrBadConfig, err)
	}
	cp.ctx, cp.cancel = context.WithCancel(context.Background())
	version, topics, agents, err := cfg.store.Load(ctx)
	if err != nil {
		return nil, err
	}
	cp.version = version
	var agentsRev int64
	var pushed map[string]shadow.Profile
	if es := cp.replicaStore(); es != nil {
		// The records followers made count too, and are watched from the
		// revision read at on.
		recs, rev, err := es.ReadAgents(ctx)
		if err != nil {
			return nil, err
		}
		agents, agentsRev = agents[:0], rev
		// The profiles the last leader pushed, which the followers push:
		// pushed the same until measured again.
		st, err := es.LoadRouteState(ctx)
		if err != nil {
			return nil, err
		}
		pushed = st.latency
		for _, r := range recs {
			agents = append(agents, r.Agent)
			cp.recorded[r.Node] = r.Rev
		}
	}
	if cp.shadow, err = newShadow(cp, pushed); err != nil {
		return nil, err
	}
	start := cp.now()
	for _, a := range agents {
		a.Report = nil
		// Grants given after the last flush were not stored. That includes
		// an agent stored with no grant: it is stored at its first
		// heartbeat, usually refused (it had not applied the routes yet),
		// and the grants that followed may all have been after the last
		// flush.
		if at, exp, raised := cutover.TakeoverGrant(start, cfg.takeover, cfg.lease, a.GrantedAt); raised {
			a.GrantedAt, a.ExpiresAt = at, exp
		}
		cp.agents[a.Node] = &a
	}
	var inFlight []Topic
	for _, t := range topics {
		cp.topics[t.Name] = &t
		if t.State == migration.Migrating {
			inFlight = append(inFlight, t)
		}
	}
	cp.mu.Lock()
	cp.publishLocked()
	cp.mu.Unlock()
	if ng, none := cfg.guard.(NoGuard); none {
		cp.log.Warn(ng.warning())
	}
	if r := cfg.records; r != nil {
		cp.wg.Add(1)
		go func() { defer cp.wg.Done(); r.Watch(cp.ctx, cp, agentsRev) }()
	}
	cp.wg.Add(2)
	go func() { defer cp.wg.Done(); cp.keeper.Run(cp.ctx) }()
	go func() { defer cp.wg.Done(); cp.shadow.Run(cp.ctx) }()
	if r, ok := cfg.repl.(SourceReader); ok {
		r.OnSourceRead(cp.shadow.NoteSourceRead)
	}
	if r, ok := cfg.repl.(ProgressNotifier); ok {
		r.OnProgress(cp.noteProgress)
	}
	for _, t := range inFlight {
		co := Cutover{Attempt: t.Attempts, Actor: ActorControlPlane}
		if t.Cutover != nil {
			co = *t.Cutover
		}
		// COMPLETE only before the deadline, as the cutover itself would.
		if cutover.Recover(cp.now(), co.Step, co.Deadline) {
			if err := cp.resume(ctx, t.Name, co); err != nil {
				cp.Close()
				return nil, err
			}
			continue
		}
		cp.event(ctx, Event{Topic: t.Name, Kind: EventRecovered, Actor: ActorControlPlane, Attempt: co.Attempt,
			StartedAt: co.StartedAt, Reason: fmt.Sprintf("found MIGRATING at step %q after a restart; rolling back", co.Step)})
		if err := cp.rollback(ctx, t.Name, co, "", ActorControlPlane, "control plane restarted mid-cutover"); err != nil {
			cp.Close()
			return nil, err
		}
	}
	if err := cp.keeper.PromiseAll(ctx); err != nil {
		cp.Close()
		return nil, err
	}
	for _, t := range cp.Topics() {
		if t.State == migration.Reject || t.State == migration.Proxy {
			// In the background: a destination that is down must not keep
			// the control plane (and every agent's lease) from starting.
			cp.keeper.Restore(t.Name, false)
			if err := cp.cfg.repl.Start(t.Name); err != nil {
				cp.Close()
				return nil, fmt.Errorf("controlplane: starting replication of %s: %w", t.Name, err)
			}
		}
	}
	return cp, nil
}

// XDS returns the xDS server routes are published on.
func (cp *ControlPlane) XDS() *xds.Server { return cp.cfg.xds }

// Register serves ADS and the Lease service on g, and the Replication
// service when replication is by workers (replication.WorkerPool).
func (cp *ControlPlane) Register(g *grpc.Server) {
	cp.cfg.xds.Register(g)
	batonv1.RegisterLeaseServer(g, cp)
	if w, ok := cp.cfg.repl.(batonv1.ReplicationServer); ok {
		batonv1.RegisterReplicationServer(g, w)
	}
}

// ServerOptions returns the gRPC server options the control plane's checks
// need (NodeIdentity's interceptors); none without them.
func (cp *ControlPlane) ServerOptions() []grpc.ServerOption { return cp.cfg.serverOptions(cp.log) }

func (c *config) serverOptions(log *slog.Logger) []grpc.ServerOption {
	if c.nodeAuth == nil {
		return nil
	}
	return c.nodeAuth.ServerOptions(log)
}

// Run flushes agents' lease state to the store every lease/3 until ctx
// ends, then stops every cutover goroutine (leaving an in-flight cutover
// MIGRATING in the store, for the next start to complete or roll back: see
// New) and flushes once more.
func (cp *ControlPlane) Run(ctx context.Context) error {
	t := time.NewTicker(cp.cfg.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			cp.Close()
			fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			cp.flush(fctx)
			return nil
		case <-t.C:
			cp.flush(ctx)
			cp.dropSourceBatches(ctx)
		}
	}
}

// SourceBatchesKept is how long a COMPLETE route carries the source
// batches copied before its cutover (docs/design.md §9): longer than any
// client retries one batch (librdkafka's message timeout is 5 minutes).
const SourceBatchesKept = 15 * time.Minute

// dropSourceBatches takes the source batches out of the routes of topics
// COMPLETE for longer than SourceBatchesKept, at a new version. A failed
// write is tried again at the next tick.
func (cp *ControlPlane) dropSourceBatches(ctx context.Context) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, t := range cp.topics {
		// A MIGRATING topic at StepDone holds its batches for COMPLETE;
		// no one but its cutover writes it.
		if t.State != migration.Complete || len(t.SourceBatches) == 0 || cp.now().Before(t.SourceBatchesUntil) {
			continue
		}
		nt := *t
		nt.SourceBatches, nt.SourceBatchesUntil = nil, time.Time{}
		if err := cp.commitLocked(ctx, nt, false); err != nil {
			cp.log.Debug("dropping a COMPLETE topic's source batches", "topic", t.Name, "err", err)
			return
		}
	}
}

// Close stops cutover goroutines without resolving them (a crash, as far
// as the store knows) and waits for them.
func (cp *ControlPlane) Close() {
	cp.cancel()
	cp.wg.Wait()
}

func (cp *ControlPlane) flush(ctx context.Context) {
	cp.mu.Lock()
	var out []Agent
	for n := range cp.dirty {
		if a := cp.agents[n]; a != nil {
			out = append(out, copyAgent(a))
		}
	}
	clear(cp.dirty)
	cp.mu.Unlock()
	if err := cp.store.PutAgents(ctx, out); err != nil {
		cp.log.Warn("storing agents' lease state", "err", err)
		cp.mu.Lock()
		for _, a := range out {
			cp.dirty[a.Node] = true
		}
		cp.mu.Unlock()
	}
}

func copyAgent(a *Agent) Agent {
	c := *a
	c.Topics = make(map[string]TopicDrain, len(a.Topics))
	for k, v := range a.Topics {
		c.Topics[k] = v
	}
	return c
}

// renderRoute renders a topic as its TopicRoute: forward is the control
// plane's F, lat the topic's pushed destination latency profile (nil: none).
func renderRoute(t *Topic, forward time.Duration, lat *batonv1.LatencyProfile) *batonv1.TopicRoute {
	r := &batonv1.TopicRoute{Topic: t.Name, State: t.State.Proto(), Version: t.Version,
		SourceCluster: t.Source, DestinationCluster: t.Destination,
		HoldMax: durationpb.New(cmp(t.HoldMax, migration.DefaultHoldMax)), ForwardDeadline: durationpb.New(cmp(t.ForwardDeadline, forward))}
	if mode, err := migration.ParseHoldMode(t.Mode); err == nil {
		r.Mode = mode.Proto() // validated when the topic was added
	}
	for _, b := range t.SourceBatches {
		r.SourceBatches = append(r.SourceBatches, &batonv1.SourceBatch{Partition: b.Partition, ProducerId: b.ProducerID,
			ProducerEpoch: int32(b.Epoch), BaseSequence: b.BaseSeq, Records: b.Records, Offset: b.Offset})
	}
	if s := t.Shadow; s != (Shadow{}) {
		r.Shadow = &batonv1.ShadowFeatures{LatencyEmulation: s.LatencyEmulation, AuthCheck: s.AuthCheck,
			AuthEnforce: s.AuthEnforce, Tagging: s.Tagging, Headroom: s.Headroom}
	}
	r.DestinationLatency = lat
	r.SourceFenced = t.FenceAtCutover
	return r
}

// route renders t as this control plane pushes it. cp.mu is held.
func (cp *ControlPlane) route(t *Topic) *batonv1.TopicRoute {
	return renderRoute(t, cp.cfg.forward, latencyProfile(t, cp.shadow.Profiles()))
}

func cmp(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// renderResources is every route at version, as the leader and the
// followers publish them alike.
func renderResources(version uint64, topics map[string]*Topic, latency map[string]shadow.Profile, forward time.Duration,
	clusters ...*batonv1.Cluster) xds.Resources {
	res := xds.Resources{Version: version, Targets: map[string]xds.Target{}, Clusters: clusters}
	for _, n := range slices.Sorted(maps.Keys(topics)) {
		t := topics[n]
		res.Routes = append(res.Routes, renderRoute(t, forward, latencyProfile(t, latency)))
		if len(t.Target.Namespaces)+len(t.Target.Workloads) > 0 {
			res.Targets[n] = t.Target
		}
	}
	return res
}

// publishLocked pushes every route at the current version, and tells the
// shadow job the topics' states: every change of a topic's state
// publishes. cp.mu is held.
func (cp *ControlPlane) publishLocked() {
	states := make(map[string]migration.State, len(cp.topics))
	for name, t := range cp.topics {
		states[name] = t.State
	}
	cp.shadow.NoteStates(states)
	cp.cfg.xds.Update(renderResources(cp.version, cp.topics, cp.shadow.Profiles(), cp.cfg.forward, cp.cfg.source, cp.cfg.dest))
}

// commitLocked stores t (or its removal) at the next config version and
// publishes. On a store error nothing changes. cp.mu is held.
func (cp *ControlPlane) commitLocked(ctx context.Context, t Topic, remove bool) error {
	v := cp.version + 1
	t.UpdatedAt = cp.now()
	var err error
	if remove {
		err = cp.store.DeleteTopic(ctx, t.Name, v)
	} else {
		t.Version = v
		err = cp.store.PutTopic(ctx, t, v)
	}
	if err != nil {
		return err
	}
	cp.version = v
	if remove {
		delete(cp.topics, t.Name)
	} else {
		cp.topics[t.Name] = &t
	}
	cp.publishLocked()
	return nil
}

// decideLocked stores t, a MIGRATING topic's COMPLETE or its rollback's
// PROXY, at the next config version, unless its cutover attempt was
// decided already (Store.PutTopicUndecided): then it takes the topic as
// stored (the other decision, by a write that was reported failed but
// applied) and returns it with ErrDecided. cp.mu is held.
func (cp *ControlPlane) decideLocked(ctx context.Context, t Topic, attempt int) (Topic, error) {
	v := cp.version + 1
	t.UpdatedAt, t.Version = cp.now(), v
	stored, err := cp.store.PutTopicUndecided(ctx, t, v, attempt, true)
	if errors.Is(err, ErrDecided) {
		if decision(stored, t.Name) {
			cp.adoptLocked(stored)
		}
		return stored, err
	}
	if err != nil {
		return Topic{}, err
	}
	cp.version = v
	cp.topics[t.Name] = &t
	cp.publishLocked()
	return t, nil
}

// decision reports whether stored, found by a write refused with
// ErrDecided, is what a decision of topic name leaves: COMPLETE or PROXY.
func decision(stored Topic, name string) bool {
	return stored.Name == name && (stored.State == migration.Complete || stored.State == migration.Proxy)
}

// adoptLocked takes a topic as a decision stored it, by a write this
// control plane was told had failed. cp.mu is held.
func (cp *ControlPlane) adoptLocked(stored Topic) {
	cp.version = max(cp.version, stored.Version)
	cp.topics[stored.Name] = &stored
	cp.publishLocked()
}

// event appends e to the log, stamping time; errors are logged.
func (cp *ControlPlane) event(ctx context.Context, e Event) {
	e.Time = cp.now()
	cp.observeCutover(e) // decided whether or not the log takes the event
	if _, err := cp.store.AppendEvent(context.WithoutCancel(ctx), e); err != nil {
		cp.log.Error("appending an event", "event", e, "err", err)
		return
	}
	cp.log.Info("event", "topic", e.Topic, "kind", e.Kind, "actor", e.Actor, "attempt", e.Attempt,
		"agent", e.Agent, "reason", e.Reason)
}

// Version is the current config version.
func (cp *ControlPlane) Version() uint64 {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.version
}

// Topics returns every managed topic, sorted by name.
func (cp *ControlPlane) Topics() []Topic {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	out := make([]Topic, 0, len(cp.topics))
	for _, t := range cp.topics {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Topic returns one managed topic.
func (cp *ControlPlane) Topic(name string) (Topic, error) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	t, ok := cp.topics[name]
	if !ok {
		return Topic{}, fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	return *t, nil
}

// TopicStatus is a topic with its replication state.
type TopicStatus struct {
	Topic
	Lag      time.Duration `json:"lag"`
	LagError string        `json:"lagError,omitempty"`
	// GuardRestore is set while the destination write guard is being
	// restored in the background (after a rollback or a start).
	GuardRestore *GuardRestore `json:"guardRestore,omitempty"`
	// Diverged names the partitions whose destination copy took a write
	// not the replicator's (a cutover is refused): partition -> why.
	Diverged map[int32]string `json:"diverged,omitempty"`
	// Findings are the topic's open findings, as agents report them
	// (docs/design.md §12).
	Findings []shadow.Finding `json:"findings,omitempty"`
	// DestinationLatency is the destination latency agents were last sent
	// for latency emulation (PROXY, emulation on).
	DestinationLatency *DestinationLatency `json:"destinationLatency,omitempty"`
}

// Status returns a topic with its time lag.
func (cp *ControlPlane) Status(name string) (TopicStatus, error) {
	t, err := cp.Topic(name)
	if err != nil {
		return TopicStatus{}, err
	}
	st := TopicStatus{Topic: t}
	if l, ok := cp.shadow.Latency(name); ok && needsLatency(&t) {
		st.DestinationLatency = &DestinationLatency{P50: l.P50, P99: l.P99, Samples: l.Samples, MeasuredAt: l.At}
	}
	st.GuardRestore = failedRestore(cp.keeper, name)
	st.Findings = cp.shadow.OpenFindings(name, "", 0)
	if t.State != migration.Complete {
		if st.Lag, err = cp.cfg.repl.Lag(name); err != nil {
			st.LagError = err.Error()
		}
		st.Diverged = cp.cfg.repl.Diverged(name)
	}
	return st, nil
}

// Agents returns every agent known, with its xDS state.
func (cp *ControlPlane) Agents() []AgentView {
	now := cp.now()
	cp.mu.Lock()
	out := make([]AgentView, 0, len(cp.agents))
	for _, a := range cp.agents {
		out = append(out, AgentView{Agent: copyAgent(a), LeaseValid: now.Before(a.ExpiresAt)})
	}
	cp.mu.Unlock()
	for i := range out {
		out[i].XDS, _ = cp.cfg.xds.Node(out[i].Node)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// Events returns the log after seq, for topic ("" for all).
func (cp *ControlPlane) Events(ctx context.Context, topic string, after uint64) ([]Event, error) {
	return cp.store.Events(ctx, topic, after)
}

// Follow streams the log after seq until ctx ends.
func (cp *ControlPlane) Follow(ctx context.Context, topic string, after uint64) (<-chan Event, error) {
	return cp.store.Follow(ctx, topic, after)
}

// AddTopic starts managing a topic: REJECT or PROXY, replication started.
func (cp *ControlPlane) AddTopic(ctx context.Context, spec TopicSpec, actor string) (Topic, error) {
	if spec.Name == "" {
		return Topic{}, fmt.Errorf("%w: topic name is required", ErrBadConfig)
	}
	if spec.State == migration.Unmanaged {
		spec.State = migration.Proxy
	}
	mode, err := migration.ParseHoldMode(spec.Mode)
	if err != nil {
		return Topic{}, fmt.Errorf("%w: mode: %w", ErrBadConfig, err)
	}
	spec.Mode = mode.String()
	if spec.HoldMax < 0 {
		return Topic{}, fmt.Errorf("%w: holdMax %v is negative", ErrBadConfig, spec.HoldMax)
	}
	if spec.ForwardDeadline < 0 || spec.ForwardDeadline >= cp.cfg.lease {
		return Topic{}, fmt.Errorf("%w: forwardDeadline %v: want 0 (the control plane's, %v) or below the lease (%v)",
			ErrBadConfig, spec.ForwardDeadline, cp.cfg.forward, cp.cfg.lease)
	}
	if spec.Source == "" {
		spec.Source = cp.cfg.source.GetName()
	}
	if spec.Destination == "" {
		spec.Destination = cp.cfg.dest.GetName()
	}
	if err := Transition(migration.Unmanaged, spec.State); err != nil {
		return Topic{}, err
	}
	cp.mu.Lock()
	_, exists := cp.topics[spec.Name]
	cp.mu.Unlock()
	if exists { // checked again below, under the lock: this spares the reads
		return Topic{}, fmt.Errorf("%w: %s", ErrTopicExists, spec.Name)
	}
	promised, leftUp, err := cp.keeper.Adding(ctx, spec.Name)
	if err != nil {
		return Topic{}, err
	}
	if err := cp.cfg.guard.Protect(ctx, spec.Name); err != nil {
		return Topic{}, fmt.Errorf("controlplane: protecting %s on the destination: %w", spec.Name, err)
	}
	cp.mu.Lock()
	if _, ok := cp.topics[spec.Name]; ok {
		cp.mu.Unlock()
		return Topic{}, fmt.Errorf("%w: %s", ErrTopicExists, spec.Name)
	}
	t := Topic{TopicSpec: spec, FenceAtCutover: promised, SourceFenceUp: leftUp}
	err = cp.commitLocked(ctx, t, false)
	t = *cp.topics[spec.Name]
	cp.mu.Unlock()
	if err != nil {
		return Topic{}, err
	}
	if err := cp.cfg.repl.Start(spec.Name); err != nil {
		cp.log.Error("starting replication", "topic", spec.Name, "err", err)
	}
	if leftUp {
		cp.keeper.Restore(spec.Name, false) // lifts the fence an earlier cutover left up
	}
	cp.event(ctx, Event{Topic: t.Name, Kind: EventAdded, To: t.State.String(), Actor: actor, Version: t.Version})
	return t, nil
}

// SetState moves a topic between REJECT and PROXY, or removes it
// (to migration.Unmanaged). MIGRATING and COMPLETE are the cutover's: see
// Migrate. A topic mid-cutover is refused (ErrCutoverRunning): its
// MIGRATING ends in COMPLETE or its rollback's PROXY, or by Abort.
func (cp *ControlPlane) SetState(ctx context.Context, name string, to migration.State, actor string) (Topic, error) {
	return cp.setState(ctx, name, to, actor, nil)
}

// RemoveTopic stops managing a topic, as SetState to migration.Unmanaged
// does, and refuses a COMPLETE one unless force (ErrNeedsForce): agents
// route a topic no route names to the source, so producers still writing
// it through an agent would go back to the source, where the source fence
// kept since the cutover refuses them, or, with none, their records land
// where nothing copies them to the destination any more.
func (cp *ControlPlane) RemoveTopic(ctx context.Context, name, actor string, force bool) (Topic, error) {
	return cp.setState(ctx, name, migration.Unmanaged, actor, func(t *Topic) error {
		if t.State != migration.Complete || force {
			return nil
		}
		fence := "with no source fence up, their records would land on the source, where nothing copies them to the destination"
		if t.SourceFenceUp {
			fence = "the source fence kept since the cutover refuses them (TOPIC_AUTHORIZATION_FAILED)"
		}
		return fmt.Errorf("%w: remove %s: it is COMPLETE, and agents route a topic no route names to the source: producers "+
			"still writing it through an agent would write the source again (%s); point them at the destination's brokers "+
			"directly first; to remove it anyway: baton topic remove %s --force", ErrNeedsForce, name, fence, name)
	})
}

// setState is SetState, refused also by check (nil: none), under cp.mu.
func (cp *ControlPlane) setState(ctx context.Context, name string, to migration.State, actor string, check func(*Topic) error) (Topic, error) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	t, ok := cp.topics[name]
	if !ok {
		return Topic{}, fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	from := t.State
	if _, running := cp.runs[name]; running || from == migration.Migrating {
		step := ""
		if t.Cutover != nil {
			step = ", step " + string(t.Cutover.Step)
		}
		return Topic{}, fmt.Errorf("%w: %s is MIGRATING (attempt %d%s): the cutover ends in COMPLETE, or rolled back in PROXY; "+
			"to end it now: baton topic abort %s", ErrCutoverRunning, name, t.Attempts, step, name)
	}
	if err := Transition(from, to); err != nil {
		return Topic{}, err
	}
	if to == migration.Migrating || to == migration.Complete {
		return Topic{}, fmt.Errorf("%w: %s -> %s: rule %q: use migrate", ErrIllegalTransition, from, to, RuleCompleteByCutover.Name)
	}
	if check != nil {
		if err := check(t); err != nil {
			return Topic{}, err
		}
	}
	if to == migration.Unmanaged && t.SourceFenceUp && from != migration.Complete {
		// Only the restore of a REJECT or PROXY topic lifts it.
		return Topic{}, fmt.Errorf("%w: %s -> %s: %s is fenced on the source since a rolled-back cutover, and the fence is "+
			"lifted in the background (see status): removing it first would leave the fence up with nobody to lift it",
			ErrIllegalTransition, from, to, name)
	}
	nt := *t
	nt.State = to
	if err := cp.commitLocked(ctx, nt, to == migration.Unmanaged); err != nil {
		return Topic{}, err
	}
	kind := EventTransition
	if to == migration.Unmanaged {
		kind = EventRemoved
	}
	cp.event(ctx, Event{Topic: name, Kind: kind, From: from.String(), To: to.String(), Actor: actor, Version: cp.version,
		FenceAtCutover: to == migration.Unmanaged && t.FenceAtCutover})
	if to == migration.Unmanaged {
		return nt, nil
	}
	return *cp.topics[name], nil
}

// Heartbeat implements the Lease service: it records the agent's report
// and grants a lease if the agent applied the current config version.
func (cp *ControlPlane) Heartbeat(ctx context.Context, req *batonv1.HeartbeatRequest) (*batonv1.HeartbeatResponse, error) {
	if req.GetNodeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "node_id is required")
	}
	now := cp.now()
	cp.mu.Lock()
	a, known := cp.agents[req.GetNodeId()]
	if !known {
		a = &Agent{Node: req.GetNodeId()}
		cp.agents[a.Node] = a
	}
	prevExpires := a.ExpiresAt
	a.noteIncarnation(req.GetIncarnation())
	a.Namespace, a.Workload, a.AckedVersion, a.LastHeartbeat = req.GetNamespace(), req.GetWorkload(), req.GetAckedVersion(), now
	a.Topics, a.Replica = DrainReports(req.GetTopics()), cp.cfg.replica
	resp := &batonv1.HeartbeatResponse{Lease: durationpb.New(cp.cfg.lease), RequiredVersion: cp.version,
		ForwardDeadline: durationpb.New(cp.cfg.forward), ServerTime: timestamppb.New(now)}
	// Never counted earlier than a grant counted at a takeover (New).
	if l := cutover.GrantLease(now, cp.cfg.lease, req.GetAckedVersion(), cp.version, a.GrantedAt); !l.Granted {
		a.Refused, resp.Reason = l.Refused, l.Refused
	} else {
		a.Refused, a.GrantedAt, a.ExpiresAt = "", l.GrantedAt, l.ExpiresAt
		resp.Granted, resp.GrantedAt, resp.ExpiresAt = true, timestamppb.New(now), timestamppb.New(a.ExpiresAt)
	}
	close(cp.changed)
	cp.changed = make(chan struct{})
	snapshot := copyAgent(a)
	if known {
		cp.dirty[a.Node] = true
	}
	cp.mu.Unlock()
	cp.cfg.reports.ObserveReport(req, now)
	cp.shadow.Heartbeat(ctx, now, req, prevExpires)
	if !known {
		// A new agent is stored before its first grant is answered, so a
		// restarted control plane knows it may be forwarding.
		if err := cp.store.PutAgents(ctx, []Agent{snapshot}); err != nil {
			return nil, status.Errorf(codes.Unavailable, "storing the agent: %v", err)
		}
	}
	return resp, nil
}
