package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

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
	if err := cfg.validate(); err != nil {
		return nil, err
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
	st, err := loadStored(ctx, cfg.store, cp.replicaStore())
	if err != nil {
		return nil, err
	}
	if cp.shadow, err = newShadow(cp, st.pushed); err != nil {
		return nil, err
	}
	inFlight := cp.adoptStored(st)
	cp.mu.Lock()
	cp.publishLocked()
	cp.mu.Unlock()
	if ng, none := cfg.guard.(NoGuard); none {
		cp.log.Warn(ng.warning())
	}
	if r := cfg.records; r != nil {
		cp.wg.Add(1)
		go func() { defer cp.wg.Done(); r.Watch(cp.ctx, cp, st.agentsRev) }()
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
	if err := cp.recover(ctx, inFlight); err != nil {
		cp.Close()
		return nil, err
	}
	return cp, nil
}

// validate refuses a config New cannot run by.
func (c *config) validate() error {
	switch {
	case c.store == nil:
		return fmt.Errorf("%w: a store is required", ErrBadConfig)
	case c.repl == nil:
		return fmt.Errorf("%w: a replication driver is required", ErrBadConfig)
	case c.source == nil || c.dest == nil || c.source.GetName() == "" || c.dest.GetName() == "":
		return fmt.Errorf("%w: named source and destination clusters are required", ErrBadConfig)
	case c.lease <= 0 || c.forward <= 0 || c.forward >= c.lease:
		return fmt.Errorf("%w: want 0 < forward deadline (%v) < lease (%v)", ErrBadConfig, c.forward, c.lease)
	case c.timeout <= 0 || c.poll <= 0 || c.guardResync <= 0:
		return fmt.Errorf("%w: cutover timeout, poll interval and guard resync must be positive", ErrBadConfig)
	case c.forgottenWindow < 0:
		return fmt.Errorf("%w: forgotten producer window %v is negative (0 turns the gate off)", ErrBadConfig, c.forgottenWindow)
	case c.txnWindow < 0:
		return fmt.Errorf("%w: transactional producer window %v is negative (0 turns the gate off)", ErrBadConfig, c.txnWindow)
	}
	if _, etcd := c.store.(*EtcdStore); !etcd || c.replica == "" {
		c.records = nil // no other replica writes records
	} else if c.records == nil {
		return fmt.Errorf("%w: a replica on etcd needs WithRecords (replicas.NewRecords) to know the leases the others grant", ErrBadConfig)
	}
	return nil
}

// stored is what a starting control plane reads from its store.
type stored struct {
	version uint64
	topics  []Topic
	agents  []Agent
	// recorded and agentsRev: with replicas, the etcd revision of each
	// agent's record and the one they were read at (watched from on).
	recorded  map[string]int64
	agentsRev int64
	// pushed are the profiles the last leader pushed (nil: none).
	pushed map[string]shadow.Profile
}

// loadStored reads the state from s and, with replicas (es not nil), the
// records followers made, which count too, and the latency profiles the
// last leader pushed, which the followers push: pushed the same until
// measured again.
func loadStored(ctx context.Context, s Store, es *EtcdStore) (stored, error) {
	var st stored
	var err error
	if st.version, st.topics, st.agents, err = s.Load(ctx); err != nil || es == nil {
		return st, err
	}
	recs, rev, err := es.ReadAgents(ctx)
	if err != nil {
		return st, err
	}
	rs, err := es.LoadRouteState(ctx)
	if err != nil {
		return st, err
	}
	st.agents, st.agentsRev, st.pushed, st.recorded = st.agents[:0], rev, rs.Latency, map[string]int64{}
	for _, r := range recs {
		st.agents = append(st.agents, r.Agent)
		st.recorded[r.Node] = r.Rev
	}
	return st, nil
}

// adoptStored takes st as the control plane's state, before anything
// runs, and returns the topics a previous process left MIGRATING.
func (cp *ControlPlane) adoptStored(st stored) []Topic {
	cp.version = st.version
	maps.Copy(cp.recorded, st.recorded)
	start := cp.now()
	for _, a := range st.agents {
		a.Report = nil
		// Grants given after the last flush were not stored. That includes
		// an agent stored with no grant: it is stored at its first
		// heartbeat, usually refused (it had not applied the routes yet),
		// and the grants that followed may all have been after the last
		// flush.
		if at, exp, raised := cutover.TakeoverGrant(start, cp.cfg.takeover, cp.cfg.lease, a.GrantedAt); raised {
			a.GrantedAt, a.ExpiresAt = at, exp
		}
		cp.agents[a.Node] = &a
	}
	var inFlight []Topic
	for _, t := range st.topics {
		cp.topics[t.Name] = &t
		if t.State == migration.Migrating {
			inFlight = append(inFlight, t)
		}
	}
	return inFlight
}

// recover decides the cutovers a previous process left in flight, then
// restores the guard of, and starts replicating, every REJECT and PROXY
// topic.
func (cp *ControlPlane) recover(ctx context.Context, inFlight []Topic) error {
	for _, t := range inFlight {
		co := Cutover{Attempt: t.Attempts, Actor: ActorControlPlane}
		if t.Cutover != nil {
			co = *t.Cutover
		}
		// COMPLETE only before the deadline, as the cutover itself would.
		if cutover.Recover(cp.now(), co.Step, co.Deadline) {
			if err := cp.resume(ctx, t.Name, co); err != nil {
				return err
			}
			continue
		}
		cp.event(ctx, Event{Topic: t.Name, Kind: EventRecovered, Actor: ActorControlPlane, Attempt: co.Attempt,
			StartedAt: co.StartedAt, Reason: fmt.Sprintf("found MIGRATING at step %q after a restart; rolling back", co.Step)})
		if err := cp.rollback(ctx, t.Name, co, "", ActorControlPlane, "control plane restarted mid-cutover"); err != nil {
			return err
		}
	}
	if err := cp.keeper.PromiseAll(ctx); err != nil {
		return err
	}
	for _, t := range cp.Topics() {
		if t.State == migration.Reject || t.State == migration.Proxy {
			// In the background: a destination that is down must not keep
			// the control plane (and every agent's lease) from starting.
			cp.keeper.Restore(t.Name, false)
			if err := cp.cfg.repl.Start(t.Name); err != nil {
				return fmt.Errorf("controlplane: starting replication of %s: %w", t.Name, err)
			}
		}
	}
	return nil
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

// Close stops cutover goroutines without resolving them (a crash, as far
// as the store knows) and waits for them.
func (cp *ControlPlane) Close() {
	cp.cancel()
	cp.wg.Wait()
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

// Events returns the log after seq, for topic ("" for all).
func (cp *ControlPlane) Events(ctx context.Context, topic string, after uint64) ([]Event, error) {
	return cp.store.Events(ctx, topic, after)
}

// Follow streams the log after seq until ctx ends.
func (cp *ControlPlane) Follow(ctx context.Context, topic string, after uint64) (<-chan Event, error) {
	return cp.store.Follow(ctx, topic, after)
}
