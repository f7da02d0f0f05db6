// Package agent owns Baton's sidecar: the listener producers connect to,
// Kafka framing and per-connection pipelining, the upstream broker pools
// for the source and destination clusters, and the router that sends each
// request where its topic's migration state says. Filters (package filter)
// run between the connection and the router, in the order chain.go
// declares.
//
// The agent presents itself as a one-broker cluster: Metadata and
// FindCoordinator name only the agent, leader epochs are synthetic and only
// grow, and KIP-951 leader hints are stripped from responses.
package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"google.golang.org/grpc"

	"github.com/baton-kafka/baton/agent/internal/framing"
	"github.com/baton-kafka/baton/agent/internal/upstream"
	"github.com/baton-kafka/baton/bpf"
	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/authcheck"
	"github.com/baton-kafka/baton/filter/pidmap"
	"github.com/baton-kafka/baton/internal/errprefix"
	"github.com/baton-kafka/baton/migration"
)

// Defaults of the options below.
const (
	DefaultListen        = "127.0.0.1:9092"
	DefaultMaxFrameBytes = 100 << 20
	DefaultConnBuffered  = 100 << 20
	DefaultBuffered      = 256 << 20
	DefaultFrameTimeout  = 30 * time.Second
	DefaultIdleTimeout   = 10 * time.Minute
	DefaultUpstreamConns = 2
	DefaultNodeID        = 0
)

// Opt configures an Agent.
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	listen          string
	advertise       string
	admin           string
	source          []string
	destination     []string
	srcSec, dstSec  Security
	clientSec       ClientSecurity
	routes          *RouteTable
	maxFrame        int32
	connBuffered    int64
	buffered        int64
	frameTimeout    time.Duration
	idleTimeout     time.Duration
	forwardDeadline time.Duration
	upstreamConns   int
	nodeID          int32
	filters         []filter.Factory
	log             *slog.Logger
	registry        *prometheus.Registry
	cpConn          grpc.ClientConnInterface
	cpNode          *core.Node
	producerIDs     int
	producerIDIdle  time.Duration
	byteCounters    bpf.Mode
	headroomWindow  time.Duration // 0: headroom.DefaultWindow
	writeRanges     WriteRangesMode
	noLeaseForward  bool
	authCheck       AuthCheckConfig
	stateDir        string
}

// StateDir sets a directory, held by this agent alone, where it keeps what a
// restart must not forget: the destination producer ids it mapped
// idempotent producers to (docs/design.md §9). It MUST outlive the agent's
// process (an emptyDir volume in Kubernetes outlives a container). Default
// none: in memory only, and an agent restarted while a producer's batches
// to the destination were outstanding may write their retries there a
// second time.
func StateDir(dir string) Opt { return optFunc(func(c *config) { c.stateDir = dir }) }

// Listen sets the address producers connect to, overriding 127.0.0.1:9092.
func Listen(addr string) Opt { return optFunc(func(c *config) { c.listen = addr }) }

// Advertise sets the host:port the agent names in Metadata, overriding the
// listener's own address.
func Advertise(addr string) Opt { return optFunc(func(c *config) { c.advertise = addr }) }

// Admin sets the address of /metrics, /healthz, /readyz and /routes,
// overriding none (off).
func Admin(addr string) Opt { return optFunc(func(c *config) { c.admin = addr }) }

// Source sets the source cluster's bootstrap brokers. Required.
func Source(bootstrap ...string) Opt { return optFunc(func(c *config) { c.source = bootstrap }) }

// Destination sets the destination cluster's bootstrap brokers. Required.
func Destination(bootstrap ...string) Opt {
	return optFunc(func(c *config) { c.destination = bootstrap })
}

// Security is how the agent connects to one cluster: the zero value is
// plaintext without SASL.
type Security struct {
	// TLS, if set, wraps every connection to the cluster (mTLS with a
	// client certificate in it). An empty ServerName is set per broker to
	// the host of its address.
	TLS *tls.Config
	// SASL, if set, authenticates every connection as the agent's own
	// principal (franz-go's plain, scram or oauth mechanisms), right after
	// the TLS handshake and before anything else goes on it. A broker
	// that ends SASL sessions (connections.max.reauth.ms) gets a fresh,
	// authenticated connection a tenth of the lifetime before the end;
	// the old one closes once its requests are answered.
	SASL sasl.Mechanism
}

// SourceSecurity sets how the agent connects to the source, overriding
// plaintext.
func SourceSecurity(s Security) Opt { return optFunc(func(c *config) { c.srcSec = s }) }

// DestinationSecurity sets how the agent connects to the destination,
// overriding plaintext.
func DestinationSecurity(s Security) Opt { return optFunc(func(c *config) { c.dstSec = s }) }

// Routes sets the route table, overriding an empty one (every topic passes
// through to the source).
func Routes(t *RouteTable) Opt { return optFunc(func(c *config) { c.routes = t }) }

// MaxFrameBytes bounds a request frame, overriding 100 MiB. A larger frame
// closes its connection.
func MaxFrameBytes(n int32) Opt { return optFunc(func(c *config) { c.maxFrame = n }) }

// ConnBufferedBytes bounds the request bytes one connection has read but
// not yet answered, pipelined requests included, overriding 100 MiB (or
// BufferedBytes, when that is lower). At the
// bound the agent stops reading from the connection until answers free
// space (TCP back-pressure); a single frame larger than the bound closes
// the connection.
func ConnBufferedBytes(n int64) Opt { return optFunc(func(c *config) { c.connBuffered = n }) }

// BufferedBytes bounds the request bytes read but not yet answered across
// all connections, overriding 256 MiB. At the bound the agent stops
// reading from connections until answers free space. Buffers come in
// power-of-two sizes, so the heap they take can reach about twice this.
func BufferedBytes(n int64) Opt { return optFunc(func(c *config) { c.buffered = n }) }

// FrameTimeout bounds how long a request frame may take to arrive once its
// first byte has, overriding 30 s (a client's request timeout); a frame not
// finished in time closes its connection. Time spent waiting for the
// connection's earlier requests to be answered does not count; waiting for
// agent-wide buffer space (BufferedBytes) does.
func FrameTimeout(d time.Duration) Opt { return optFunc(func(c *config) { c.frameTimeout = d }) }

// IdleTimeout closes a connection that sends no request for this long,
// overriding 10 minutes (Kafka's connections.max.idle.ms).
func IdleTimeout(d time.Duration) Opt { return optFunc(func(c *config) { c.idleTimeout = d }) }

// ForwardDeadline bounds a forwarded produce, overriding 2 s: a produce not
// answered upstream in time is answered with the retriable error.
func ForwardDeadline(d time.Duration) Opt {
	return optFunc(func(c *config) { c.forwardDeadline = d })
}

// UpstreamConns sets connections per upstream broker, overriding 2. Each
// client connection sticks to one, which keeps its requests in order.
func UpstreamConns(n int) Opt { return optFunc(func(c *config) { c.upstreamConns = n }) }

// NodeID sets the broker id the agent reports for itself, overriding 0.
func NodeID(id int32) Opt { return optFunc(func(c *config) { c.nodeID = id }) }

// Filters sets the listener's own filters, in request order. They run
// first in every connection's chain, before the agent's (see chain.go).
func Filters(f ...filter.Factory) Opt { return optFunc(func(c *config) { c.filters = f }) }

// Logger sets the logger, overriding slog.Default().
func Logger(l *slog.Logger) Opt { return optFunc(func(c *config) { c.log = l }) }

// Registry sets the Prometheus registry metrics register in, overriding a
// new private one.
func Registry(r *prometheus.Registry) Opt { return optFunc(func(c *config) { c.registry = r }) }

// Agent is a running sidecar.
type Agent struct {
	cfg      config
	log      *slog.Logger
	routes   *RouteTable
	src      *upstream.Cluster
	dst      *upstream.Cluster
	nodeID   int32
	metrics  *metrics
	budget   *framing.Budget
	epochs   *epochs
	pidmap   *pidmap.Factory  // agent-wide: one producer may use several connections
	state    *agentState      // the state directory, nil without one
	auth     filter.Factory   // the client SASL filter, nil without SASL
	cp       *cpLink          // nil with static routes
	filters  []filter.Factory // every connection's chain (see chain.go)
	inflight inflight
	acked    ackedEnds     // the end of what each source partition acked, for the drain
	writes   *sourceWrites // what was written to the source, for bypass detection
	// principals are the client principals' upstream clusters
	// (SASLForward, see clientsec.go).
	principals principals
	// fenceSeen are the topics whose fence refusal was logged
	// (sourceFenceRefused).
	fenceSeen sync.Map
	// findings are what the PROXY-phase checks found (findings.go), and
	// authCheck the auth check's filter (authcheck.go).
	findings  *findings
	authCheck *authcheck.Factory

	port    *reservedPort // bound at New, listened on once ready
	ln      net.Listener
	adminLn net.Listener
	self    kmsg.MetadataResponseBroker

	advCache  atomic.Pointer[advertisedCache]
	tlsWarned atomic.Int64 // unix nanoseconds of the last WARN of a failed client TLS handshake
	connSeq   atomic.Uint64
	wg        sync.WaitGroup
	mu        sync.Mutex
	conns     map[uint64]net.Conn
	closing   atomic.Bool
	ready     atomic.Bool
	serving   chan struct{} // closed once the listener accepts

	counters bpf.Counters // client connections' bytes (counters.go)
	tracked  trackedConns
}

// New validates the options and binds the listeners. Run serves.
func New(opts ...Opt) (_ *Agent, err error) {
	cfg := config{
		listen:          DefaultListen,
		maxFrame:        DefaultMaxFrameBytes,
		buffered:        DefaultBuffered,
		frameTimeout:    DefaultFrameTimeout,
		idleTimeout:     DefaultIdleTimeout,
		forwardDeadline: migration.DefaultForwardDeadline,
		upstreamConns:   DefaultUpstreamConns,
		nodeID:          DefaultNodeID,
		producerIDs:     DefaultProducerIDs,
		producerIDIdle:  DefaultProducerIDIdle,
		noLeaseForward:  true,
	}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	if cfg.connBuffered == 0 {
		cfg.connBuffered = min(DefaultConnBuffered, cfg.buffered)
	}
	if cfg.registry == nil {
		cfg.registry = prometheus.NewRegistry()
	}
	if cfg.routes == nil {
		cfg.routes = NewRouteTable(nil)
	}
	switch {
	case len(cfg.source) == 0:
		return nil, fmt.Errorf("%w: source: bootstrap brokers required", ErrBadConfig)
	case len(cfg.destination) == 0:
		return nil, fmt.Errorf("%w: destination: bootstrap brokers required", ErrBadConfig)
	case cfg.maxFrame < 1<<10:
		return nil, fmt.Errorf("%w: max frame bytes: %d is below 1 KiB", ErrBadConfig, cfg.maxFrame)
	case cfg.connBuffered < 1<<10:
		return nil, fmt.Errorf("%w: conn buffered bytes: %d is below 1 KiB", ErrBadConfig, cfg.connBuffered)
	case cfg.buffered < cfg.connBuffered:
		return nil, fmt.Errorf("%w: buffered bytes: %d is below conn buffered bytes (%d)", ErrBadConfig, cfg.buffered, cfg.connBuffered)
	case cfg.frameTimeout <= 0:
		return nil, fmt.Errorf("%w: frame timeout: must be positive, got %s", ErrBadConfig, cfg.frameTimeout)
	case cfg.idleTimeout <= 0:
		return nil, fmt.Errorf("%w: idle timeout: must be positive, got %s", ErrBadConfig, cfg.idleTimeout)
	case cfg.forwardDeadline <= 0:
		return nil, fmt.Errorf("%w: forward deadline: must be positive, got %s", ErrBadConfig, cfg.forwardDeadline)
	case cfg.upstreamConns < 1:
		return nil, fmt.Errorf("%w: upstream conns: must be at least 1, got %d", ErrBadConfig, cfg.upstreamConns)
	case cfg.nodeID < 0:
		return nil, fmt.Errorf("%w: node id: must not be negative, got %d", ErrBadConfig, cfg.nodeID)
	case cfg.producerIDs < 1:
		return nil, fmt.Errorf("%w: producer ids: must be at least 1, got %d", ErrBadConfig, cfg.producerIDs)
	case cfg.producerIDIdle <= 0:
		return nil, fmt.Errorf("%w: producer id idle: must be positive, got %s", ErrBadConfig, cfg.producerIDIdle)
	case cfg.headroomWindow < 0:
		return nil, fmt.Errorf("%w: headroom window: must not be negative, got %s", ErrBadConfig, cfg.headroomWindow)
	}
	if err := checkClientSecurity(&cfg.clientSec); err != nil {
		return nil, err
	}
	for _, b := range append(append([]string(nil), cfg.source...), cfg.destination...) {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return nil, fmt.Errorf("%w: bootstrap %q: %w", ErrBadConfig, b, err)
		}
	}
	a := &Agent{
		cfg:    cfg,
		log:    cfg.log,
		routes: cfg.routes,
		nodeID: cfg.nodeID,
		epochs: newEpochs(time.Now()),
		conns:  map[uint64]net.Conn{},

		principals: principals{m: map[string]*principalPair{}},

		serving: make(chan struct{}),
	}
	a.metrics = newMetrics(cfg.registry)
	a.writes = newSourceWrites(cfg.writeRanges == WriteRangesOn || (cfg.writeRanges == WriteRangesAuto && cfg.cpConn != nil), cfg.routes)
	a.findings = newFindings(a.log, cfg.registry)
	a.budget = framing.NewBudget(cfg.buffered, cfg.connBuffered)
	cfg.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "baton_agent_buffered_request_bytes",
		Help: "Request bytes read from clients and not yet answered (bounded by BufferedBytes).",
	}, func() float64 { return float64(a.budget.Held()) }))
	if cfg.stateDir != "" {
		if a.state, err = openState(cfg.stateDir); err != nil {
			return nil, err
		}
		st := a.state
		defer func() {
			if err != nil {
				st.close()
			}
		}()
	}
	a.pidmap = a.newPIDMap()
	cfg.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "baton_agent_producer_ids",
		Help: "Source producers (id, epoch) mapped to a destination producer id.",
	}, func() float64 { return float64(a.pidmap.Producers()) }))
	if cfg.cpConn != nil {
		if a.cp, err = a.newCPLink(); err != nil {
			return nil, err
		}
		cfg.registry.MustRegister(a.cp.leaseGauge())
		a.inflight.settled = a.settled
	}
	if a.auth, err = a.saslFilter(); err != nil {
		return nil, err
	}
	if a.authCheck, err = a.newAuthCheck(); err != nil {
		return nil, err
	}
	a.filters = a.chain()
	readTO := 60 * time.Second
	a.src = upstream.New(upstream.Config{
		Name: "source", Bootstrap: cfg.source, PoolSize: cfg.upstreamConns,
		DialTimeout: 10 * time.Second, ReadTimeout: readTO, Log: a.log,
		Security:  upstream.Security{TLS: cfg.srcSec.TLS, SASL: cfg.srcSec.SASL},
		StartNote: "until it answers, the agent refuses client connections and /healthz answers 503",
	})
	a.dst = upstream.New(upstream.Config{
		Name: "destination", Bootstrap: cfg.destination, PoolSize: cfg.upstreamConns,
		DialTimeout: 10 * time.Second, ReadTimeout: readTO, Log: a.log,
		Security: upstream.Security{TLS: cfg.dstSec.TLS, SASL: cfg.dstSec.SASL},
	})

	reserved, err := reservePort(cfg.listen)
	if err != nil {
		return nil, fmt.Errorf("%w: listen %q: %w", ErrBadConfig, cfg.listen, err)
	}
	a.port = reserved
	adv := cfg.advertise
	if adv == "" {
		adv = reserved.Addr().String()
	}
	host, portStr, err := net.SplitHostPort(adv)
	port, perr := strconv.Atoi(portStr)
	if err != nil || perr != nil {
		reserved.Close()
		return nil, fmt.Errorf("%w: advertise %q: want host:port", ErrBadConfig, adv)
	}
	a.self = kmsg.NewMetadataResponseBroker()
	a.self.NodeID, a.self.Host, a.self.Port = cfg.nodeID, host, int32(port)
	if cfg.admin != "" {
		if a.adminLn, err = net.Listen("tcp", cfg.admin); err != nil {
			reserved.Close()
			return nil, fmt.Errorf("%w: admin listen %q: %w", ErrBadConfig, cfg.admin, err)
		}
	}
	if err := a.openCounters(); err != nil {
		reserved.Close()
		if a.adminLn != nil {
			a.adminLn.Close()
		}
		return nil, err
	}
	return a, nil
}

// Addr is the listener's address.
func (a *Agent) Addr() string { return a.port.Addr().String() }

// AdminAddr is the admin listener's address, or "" when off.
func (a *Agent) AdminAddr() string {
	if a.adminLn == nil {
		return ""
	}
	return a.adminLn.Addr().String()
}

// Ready is closed once the agent serves: it reached the source and its
// listener accepts. Before, connections to Addr are refused.
func (a *Agent) Ready() <-chan struct{} { return a.serving }

// Routes is the agent's route table.
func (a *Agent) Routes() *RouteTable { return a.routes }

// Run learns what both clusters support, then serves until ctx ends; it
// closes every connection before it returns.
func (a *Agent) Run(ctx context.Context) error {
	defer a.state.close()    // last: no connection records a mapping any more
	defer a.counters.Close() // after every connection closed (LIFO)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if a.adminLn != nil {
		srv := &http.Server{Handler: a.adminHandler(), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(a.adminLn)
		defer srv.Close()
	}
	acDone := make(chan struct{})
	go func() { defer close(acDone); a.authCheck.Run(ctx) }()
	defer func() { cancel(); <-acDone }()
	if a.cp != nil {
		cpDone := make(chan struct{})
		go func() { defer close(cpDone); a.cp.run(ctx) }()
		defer func() { cancel(); <-cpDone }()
	}
	// Until the source answered, the port refuses connections (see
	// reservedPort) and /healthz says not ready.
	if err := a.learnVersions(ctx); err != nil {
		a.port.Close()
		return err
	}
	ln, err := a.port.listen()
	if err != nil {
		a.port.Close()
		return fmt.Errorf("agent: %w", err)
	}
	a.ln = ln
	a.ready.Store(true)
	close(a.serving)
	a.log.Info("agent serving", "listen", a.Addr(), "advertise", net.JoinHostPort(a.self.Host, strconv.Itoa(int(a.self.Port))),
		"source", strings.Join(a.cfg.source, ","), "destination", strings.Join(a.cfg.destination, ","))

	go func() {
		<-ctx.Done()
		a.closing.Store(true)
		a.ln.Close()
	}()
	for {
		nc, err := a.ln.Accept()
		if err != nil {
			if a.closing.Load() {
				break
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			a.log.Error("accept failed", "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		id := a.connSeq.Add(1)
		a.mu.Lock()
		a.conns[id] = nc
		a.mu.Unlock()
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.serveConn(ctx, id, nc)
			a.mu.Lock()
			delete(a.conns, id)
			a.mu.Unlock()
		}()
	}
	a.mu.Lock()
	for _, nc := range a.conns {
		nc.Close()
	}
	a.mu.Unlock()
	a.wg.Wait()
	a.src.CloseConns(errShuttingDown)
	a.dst.CloseConns(errShuttingDown)
	return nil
}

// learnVersions asks both clusters for ApiVersions, retrying until the
// source answers. The destination may be down at start (REJECT and PROXY
// do not write to it); then the agent advertises what the source supports
// and keeps asking the destination in the background.
func (a *Agent) learnVersions(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		err := a.src.LoadVersions(ctx)
		if err == nil {
			break
		}
		// upstream.Cluster.Ask said at WARN, once, that no broker answers.
		a.log.Debug("source cluster not answering ApiVersions yet", "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent: source cluster never answered: %w", errprefix.Nested(errPrefix, err))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := a.dst.LoadVersions(dctx)
	cancel()
	if err != nil {
		a.log.Warn("destination cluster not answering; advertising source versions only until it does", "err", err)
		go func() {
			for ctx.Err() == nil && !a.dst.HasVersions() {
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Second):
					if err := a.dst.LoadVersions(ctx); err == nil {
						a.log.Info("destination cluster answered ApiVersions")
					}
				}
			}
		}()
	}
	return nil
}

func (a *Agent) selfBroker() kmsg.MetadataResponseBroker { return a.self }

func (a *Agent) describeCluster(version int16) kmsg.Response {
	resp := kmsg.NewPtrDescribeClusterResponse()
	resp.SetVersion(version)
	if id := a.src.ClusterID(); id != nil {
		resp.ClusterID = *id
	}
	resp.ControllerID = a.nodeID
	b := kmsg.NewDescribeClusterResponseBroker()
	b.NodeID, b.Host, b.Port = a.self.NodeID, a.self.Host, a.self.Port
	resp.Brokers = []kmsg.DescribeClusterResponseBroker{b}
	return resp
}

func (a *Agent) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(a.cfg.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.ready.Load() {
			http.Error(w, "waiting for the source cluster", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if reason := a.notReady(); reason != "" {
			http.Error(w, reason, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/routes", func(w http.ResponseWriter, _ *http.Request) {
		routes, v := a.routes.Snapshot()
		fmt.Fprintf(w, "version %d\n", v)
		for _, r := range routes {
			if r.State == migration.Proxy && r.LatencyEmulation && r.Latency != nil {
				fmt.Fprintf(w, "%s\t%s\tlatency emulation p50 %v p99 %v\n", r.Topic, r.State, r.Latency.P50, r.Latency.P99)
				continue
			}
			fmt.Fprintf(w, "%s\t%s\n", r.Topic, r.State)
		}
	})
	return mux
}

// notReady says why /readyz answers 503, or "" when the agent is ready for
// its producers: it serves (it reached the source, as /healthz says) and,
// with a control plane, it applied routes from it at least once and holds
// a lease now. A lease that runs out makes it not ready again until the
// control plane renews it.
func (a *Agent) notReady() string {
	switch {
	case !a.ready.Load():
		return "waiting for the source cluster"
	case a.cp == nil:
		return ""
	case !a.cp.routed.Load():
		return "waiting for the first routes from the control plane"
	case !a.cp.keeper.Valid():
		return "no lease from the control plane"
	}
	return ""
}
