package xds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/migration"
)

// Client defaults.
const (
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
)

// ClientOpt configures NewClient and NewLeaseKeeper.
type ClientOpt interface{ applyClient(*clientConfig) }

type clientOptFunc func(*clientConfig)

func (f clientOptFunc) applyClient(c *clientConfig) { f(c) }

// Protocol is an xDS protocol variant a Client speaks.
type Protocol int

const (
	// Delta is incremental xDS (DeltaAggregatedResources): after the first
	// response, a change of one topic sends each node that TopicRoute alone
	// (or its removal). The default.
	Delta Protocol = iota
	// SotW is state-of-the-world xDS (StreamAggregatedResources): every
	// response carries every resource of its type.
	SotW
)

func (p Protocol) String() string {
	switch p {
	case Delta:
		return "delta"
	case SotW:
		return "sotw"
	}
	return "Protocol(" + strconv.Itoa(int(p)) + ")"
}

type clientConfig struct {
	protocol   Protocol
	onRoutes   func(version uint64, routes []*batonv1.TopicRoute) error // nil: accept everything
	onClusters func(version string, clusters []*batonv1.Cluster) error  // nil: accept everything
	minBackoff time.Duration
	maxBackoff time.Duration
	log        *slog.Logger
	now        func() time.Time
	delivered  func(topics []*batonv1.TopicDrain) // nil: nobody asks
	findings   func() []*batonv1.Finding          // nil: heartbeats carry none
}

// OnRoutes sets the callback applying each TopicRoute response: version is
// the response's config version, routes the full set the node now has,
// sorted by topic, in either protocol (with Delta the client keeps the
// routes and applies each response's changes to them first). An error NACKs
// the response with the error's text and leaves the acked version and the
// routes where they were. Default: accept everything (and with Delta, keep
// only each route's version, not the routes).
func OnRoutes(f func(version uint64, routes []*batonv1.TopicRoute) error) ClientOpt {
	return clientOptFunc(func(c *clientConfig) { c.onRoutes = f })
}

// OnClusters sets the callback applying each Cluster response, like OnRoutes.
func OnClusters(f func(version string, clusters []*batonv1.Cluster) error) ClientOpt {
	return clientOptFunc(func(c *clientConfig) { c.onClusters = f })
}

// UseProtocol sets the xDS protocol variant (default Delta).
func UseProtocol(p Protocol) ClientOpt {
	return clientOptFunc(func(c *clientConfig) { c.protocol = p })
}

// Backoff bounds the wait between reconnects, doubling from min to max
// (default 100 ms to 5 s).
func Backoff(min, max time.Duration) ClientOpt {
	return clientOptFunc(func(c *clientConfig) { c.minBackoff, c.maxBackoff = min, max })
}

// ClientLogger sets the logger (default slog.Default()).
func ClientLogger(l *slog.Logger) ClientOpt {
	return clientOptFunc(func(c *clientConfig) { c.log = l })
}

// ClientClock sets the lease clock of a LeaseKeeper (default time.Now).
func ClientClock(now func() time.Time) ClientOpt {
	return clientOptFunc(func(c *clientConfig) { c.now = now })
}

// OnDelivered sets a callback a LeaseKeeper calls with a heartbeat's topic
// reports once the control plane answered it (granted or not): what they
// carried need not be sent again (default: none).
func OnDelivered(f func(topics []*batonv1.TopicDrain)) ClientOpt {
	return clientOptFunc(func(c *clientConfig) { c.delivered = f })
}

// LeaseFindings sets what every heartbeat of a LeaseKeeper reports as the
// agent's open findings (default: none). f is called once per heartbeat
// and owns the bound (the control plane reads at most MaxFindings).
func LeaseFindings(f func() []*batonv1.Finding) ClientOpt {
	return clientOptFunc(func(c *clientConfig) { c.findings = f })
}

// MaxFindings bounds the findings one heartbeat carries, and the control
// plane reads no more. An agent keeps no more open ones than that, so every
// heartbeat carries all of them: the control plane closes a finding no
// heartbeat carried for three leases, and one left out for others seen
// more recently would close while the agent still holds it open (and a
// cutover gate would pass on it). About 64 KiB at most.
const MaxFindings = 256

func newClientConfig(opts []ClientOpt) (clientConfig, error) {
	cfg := clientConfig{protocol: Delta, minBackoff: DefaultMinBackoff, maxBackoff: DefaultMaxBackoff,
		log: slog.Default(), now: time.Now}
	for _, o := range opts {
		o.applyClient(&cfg)
	}
	if cfg.protocol != Delta && cfg.protocol != SotW {
		return cfg, fmt.Errorf("%w: protocol %v", ErrBadConfig, cfg.protocol)
	}
	if cfg.minBackoff <= 0 || cfg.maxBackoff < cfg.minBackoff {
		return cfg, fmt.Errorf("%w: backoff %v..%v", ErrBadConfig, cfg.minBackoff, cfg.maxBackoff)
	}
	return cfg, nil
}

// Client subscribes to Baton's resources over ADS for one node, applies
// every response through its callbacks and ACKs or NACKs it. Run keeps it
// connected; with Delta, a reconnect subscribes with the versions of the
// resources held (initial_resource_versions), so only what changed since is
// sent again.
type Client struct {
	cfg  clientConfig
	conn grpc.ClientConnInterface
	node *core.Node

	// Delta state, touched only by Run's goroutine: per type URL, the
	// version of every resource held, and the resources themselves where a
	// callback needs the full set (clusters always, routes with OnRoutes).
	vers map[string]map[string]string
	msgs map[string]map[string]proto.Message

	outage    atomic.Bool  // a stream ended and none has answered since
	olderSeen atomic.Int64 // route sets older than the ones applied, not applied (tests)

	mu         sync.Mutex
	acked      uint64
	clusterVer string
	connected  bool
	changed    chan struct{}
}

// NewClient returns a client for node (see NodeMeta) over conn.
func NewClient(conn grpc.ClientConnInterface, node *core.Node, opts ...ClientOpt) (*Client, error) {
	cfg, err := newClientConfig(opts)
	if err != nil {
		return nil, err
	}
	if node.GetId() == "" {
		return nil, fmt.Errorf("%w: node id is required", ErrBadConfig)
	}
	return &Client{cfg: cfg, conn: conn, node: node, changed: make(chan struct{}),
		vers: map[string]map[string]string{}, msgs: map[string]map[string]proto.Message{}}, nil
}

// AckedVersion is the newest TopicRoute version applied and ACKed (with
// Delta, the system_version_info of the response: the config version the
// server built it from).
func (c *Client) AckedVersion() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acked
}

// WaitVersion waits until the client ACKed TopicRoute version v or newer.
func (c *Client) WaitVersion(ctx context.Context, v uint64) error {
	for {
		c.mu.Lock()
		acked, ch := c.acked, c.changed
		c.mu.Unlock()
		if acked >= v {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("xds: waiting for version %d (acked %d): %w", v, acked, ctx.Err())
		case <-ch:
		}
	}
}

// Run subscribes and reconnects with backoff until ctx ends; it returns nil
// then.
func (c *Client) Run(ctx context.Context) error {
	backoff := c.cfg.minBackoff
	for ctx.Err() == nil {
		start := time.Now()
		var err error
		if c.cfg.protocol == Delta {
			err = c.streamDelta(ctx)
		} else {
			err = c.stream(ctx)
		}
		c.setConnected(false)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errOlderRoutes) {
			// Not an outage: the replica catches up within its watch's
			// delay.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(c.cfg.minBackoff):
			}
			continue
		}
		if time.Since(start) > c.cfg.maxBackoff {
			backoff = c.cfg.minBackoff
		}
		// One WARN per outage; the attempts until a stream answers again
		// are DEBUG (a control plane down for minutes is one record).
		if c.outage.CompareAndSwap(false, true) {
			c.cfg.log.Warn("xds stream ended; reconnecting (routes stay as last applied; further attempts are logged at DEBUG until it is back)",
				"node", c.node.GetId(), "protocol", c.cfg.protocol, "err", err, "in", backoff)
		} else {
			c.cfg.log.Debug("xds stream ended; reconnecting", "node", c.node.GetId(), "protocol", c.cfg.protocol,
				"err", err, "in", backoff)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, c.cfg.maxBackoff)
	}
	return nil
}

// streamUp notes that a stream answered: an outage logged at WARN ends
// with one INFO.
func (c *Client) streamUp() {
	if c.outage.CompareAndSwap(true, false) {
		c.cfg.log.Info("xds stream back", "node", c.node.GetId(), "protocol", c.cfg.protocol)
	}
}

func (c *Client) setConnected(b bool) {
	c.mu.Lock()
	c.connected = b
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// adsStream is one ADS stream as the client's loop uses it: state of the
// world (DiscoveryRequest, DiscoveryResponse) or delta.
type adsStream[Req, Resp any] interface {
	Send(Req) error
	Recv() (Resp, error)
}

// runStream runs one ADS stream of either protocol: it sends the
// subscriptions, then answers every response with the ACK or NACK answer
// makes of it, until the stream ends or answer ends it with an error.
func runStream[Req, Resp any](c *Client, st adsStream[Req, Resp], subscribe []Req, answer func(Resp) (Req, error)) error {
	for _, r := range subscribe {
		if err := st.Send(r); err != nil {
			return err
		}
	}
	c.setConnected(true)
	for {
		resp, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return errors.New("xds: server closed the stream")
		}
		if err != nil {
			return err
		}
		c.streamUp()
		req, err := answer(resp)
		if err != nil {
			return err
		}
		if err := st.Send(req); err != nil {
			return err
		}
	}
}

// stream runs one state-of-the-world stream, subscribed with the versions
// applied.
func (c *Client) stream(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	acked, clusterVer := c.acked, c.clusterVer
	c.mu.Unlock()
	routeVer := ""
	if acked > 0 {
		routeVer = FormatVersion(acked)
	}
	// Clusters first: routes name them.
	return runStream(c, st, []*discovery.DiscoveryRequest{
		{Node: c.node, TypeUrl: ClusterType, VersionInfo: clusterVer},
		{Node: c.node, TypeUrl: TopicRouteType, VersionInfo: routeVer},
	}, func(resp *discovery.DiscoveryResponse) (*discovery.DiscoveryRequest, error) {
		return c.apply(resp), nil
	})
}

// older reports whether TopicRoute version v is below the one applied: a
// control-plane replica that lags behind the one the client came from
// (watch delay) sends an older route set. It is not applied: a topic's
// route never goes back, a MIGRATING one to PROXY say. State of the world
// acknowledges it (the next response holds every route anyway); delta
// starts the stream again (errOlderRoutes).
func (c *Client) older(v uint64) bool {
	acked := c.AckedVersion()
	if v >= acked {
		return false
	}
	c.olderSeen.Add(1)
	c.cfg.log.Info("routes older than the ones applied: kept the applied ones (a control-plane replica behind the last one; "+
		"if the control plane's state was reset, restart the agent)", "node", c.node.GetId(), "version", v, "applied", acked)
	return true
}

// apply decodes and applies one response, and returns its ACK or NACK.
func (c *Client) apply(resp *discovery.DiscoveryResponse) *discovery.DiscoveryRequest {
	req := &discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}
	err := c.applyErr(resp)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.cfg.log.Warn("NACK", "node", c.node.GetId(), "type", resp.GetTypeUrl(), "version", resp.GetVersionInfo(), "err", err)
		req.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
		if resp.GetTypeUrl() == ClusterType {
			req.VersionInfo = c.clusterVer
		} else if c.acked > 0 {
			req.VersionInfo = FormatVersion(c.acked)
		}
		return req
	}
	req.VersionInfo = resp.GetVersionInfo()
	if resp.GetTypeUrl() == ClusterType {
		c.clusterVer = resp.GetVersionInfo()
	} else {
		v, _ := ParseVersion(resp.GetVersionInfo())
		c.acked = max(c.acked, v)
	}
	close(c.changed)
	c.changed = make(chan struct{})
	return req
}

func (c *Client) applyErr(resp *discovery.DiscoveryResponse) error {
	switch resp.GetTypeUrl() {
	case TopicRouteType:
		v, err := ParseVersion(resp.GetVersionInfo())
		if err != nil {
			return err
		}
		if c.older(v) {
			return nil
		}
		routes := make([]*batonv1.TopicRoute, 0, len(resp.GetResources()))
		for i, a := range resp.GetResources() {
			r := &batonv1.TopicRoute{}
			if err := a.UnmarshalTo(r); err != nil {
				return fmt.Errorf("%w: resources[%d]: %v", ErrBadResource, i, err)
			}
			if err := ValidateRoute(r); err != nil {
				return fmt.Errorf("resources[%d]: %w", i, err)
			}
			routes = append(routes, r)
		}
		if c.cfg.onRoutes == nil {
			return nil
		}
		return c.cfg.onRoutes(v, routes)
	case ClusterType:
		cls := make([]*batonv1.Cluster, 0, len(resp.GetResources()))
		for i, a := range resp.GetResources() {
			cl := &batonv1.Cluster{}
			if err := a.UnmarshalTo(cl); err != nil {
				return fmt.Errorf("%w: resources[%d]: %v", ErrBadResource, i, err)
			}
			if cl.GetName() == "" || len(cl.GetBootstrap()) == 0 {
				return fmt.Errorf("%w: resources[%d]: cluster needs a name and bootstrap brokers", ErrBadResource, i)
			}
			cls = append(cls, cl)
		}
		if c.cfg.onClusters == nil {
			return nil
		}
		return c.cfg.onClusters(resp.GetVersionInfo(), cls)
	default:
		return fmt.Errorf("%w: unexpected type %s", ErrBadResource, resp.GetTypeUrl())
	}
}

// streamDelta runs one delta stream, subscribed with the versions of the
// resources held.
func (c *Client) streamDelta(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(c.conn).DeltaAggregatedResources(ctx)
	if err != nil {
		return err
	}
	// Clusters first: routes name them. "*" subscribes to every resource of
	// the type; the versions held tell the server what not to send again.
	var subscribe []*discovery.DeltaDiscoveryRequest
	for i, typ := range []string{ClusterType, TopicRouteType} {
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: typ, ResourceNamesSubscribe: []string{"*"},
			InitialResourceVersions: c.vers[typ]}
		if i == 0 {
			req.Node = c.node // the server keeps the node of a stream's first request
		}
		subscribe = append(subscribe, req)
	}
	return runStream(c, st, subscribe, func(resp *discovery.DeltaDiscoveryResponse) (*discovery.DeltaDiscoveryRequest, error) {
		if resp.GetTypeUrl() == TopicRouteType {
			if v, err := ParseVersion(resp.GetSystemVersionInfo()); err == nil && c.older(v) {
				// An ACK would tell the server the client holds the older
				// set, and its next deltas would be computed from that
				// (a route removed meanwhile would never be removed here):
				// start again, telling it what is held.
				return nil, errOlderRoutes
			}
		}
		return c.applyDelta(resp), nil
	})
}

// applyDelta applies one delta response, all of it or none, and returns its
// ACK or NACK. A delta ACK carries no version: the server knows what it sent
// with the nonce.
func (c *Client) applyDelta(resp *discovery.DeltaDiscoveryResponse) *discovery.DeltaDiscoveryRequest {
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}
	v, err := c.applyDeltaErr(resp)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.cfg.log.Warn("NACK", "node", c.node.GetId(), "type", resp.GetTypeUrl(), "version", resp.GetSystemVersionInfo(), "err", err)
		req.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
		return req
	}
	if resp.GetTypeUrl() == ClusterType {
		c.clusterVer = resp.GetSystemVersionInfo()
	} else {
		c.acked = max(c.acked, v)
	}
	close(c.changed)
	c.changed = make(chan struct{})
	return req
}

// held is one resource's state before a delta response changed it, to undo
// the change if the response is refused.
type held struct {
	name    string
	version string
	msg     proto.Message
	had     bool
}

func (c *Client) applyDeltaErr(resp *discovery.DeltaDiscoveryResponse) (uint64, error) {
	typ := resp.GetTypeUrl()
	var v uint64
	switch typ {
	case TopicRouteType:
		var err error
		if v, err = ParseVersion(resp.GetSystemVersionInfo()); err != nil {
			return 0, err
		}
	case ClusterType:
	default:
		return 0, fmt.Errorf("%w: unexpected type %s", ErrBadResource, typ)
	}
	// Decode and check everything before changing anything.
	keep := typ == ClusterType || c.cfg.onRoutes != nil
	msgs := make([]proto.Message, len(resp.GetResources()))
	for i, r := range resp.GetResources() {
		m, err := decodeDelta(typ, r)
		if err != nil {
			return 0, fmt.Errorf("resources[%d]: %w", i, err)
		}
		msgs[i] = m
	}
	vers, all := c.vers[typ], c.msgs[typ]
	if vers == nil {
		vers, all = map[string]string{}, map[string]proto.Message{}
		c.vers[typ], c.msgs[typ] = vers, all
	}
	undo := make([]held, 0, len(msgs)+len(resp.GetRemovedResources()))
	save := func(name string) {
		ver, had := vers[name]
		undo = append(undo, held{name: name, version: ver, msg: all[name], had: had})
	}
	for i, r := range resp.GetResources() {
		save(r.GetName())
		vers[r.GetName()] = r.GetVersion()
		if keep {
			all[r.GetName()] = msgs[i]
		}
	}
	removed := resp.GetRemovedResources()
	for _, rn := range resp.GetRemovedResourceNames() {
		removed = append(removed, rn.GetName())
	}
	for _, name := range removed {
		if _, ok := vers[name]; ok {
			save(name)
			delete(vers, name)
			delete(all, name)
		}
	}
	if err := c.deltaCallback(typ, v, resp.GetSystemVersionInfo(), all); err != nil {
		for _, h := range slices.Backward(undo) {
			if h.had {
				vers[h.name] = h.version
				if h.msg != nil {
					all[h.name] = h.msg
				}
			} else {
				delete(vers, h.name)
				delete(all, h.name)
			}
		}
		return 0, err
	}
	return v, nil
}

// deltaCallback hands the full set of typ, after a delta response, to its
// callback.
func (c *Client) deltaCallback(typ string, v uint64, version string, all map[string]proto.Message) error {
	names := func() []string { return slices.Sorted(maps.Keys(all)) }
	switch {
	case typ == TopicRouteType && c.cfg.onRoutes != nil:
		routes := make([]*batonv1.TopicRoute, 0, len(all))
		for _, n := range names() {
			routes = append(routes, all[n].(*batonv1.TopicRoute))
		}
		return c.cfg.onRoutes(v, routes)
	case typ == ClusterType && c.cfg.onClusters != nil:
		cls := make([]*batonv1.Cluster, 0, len(all))
		for _, n := range names() {
			cls = append(cls, all[n].(*batonv1.Cluster))
		}
		return c.cfg.onClusters(version, cls)
	}
	return nil
}

// decodeDelta decodes and checks one delta resource of typ. Its name must
// be the topic (the cluster name): the client keys what it holds by it.
func decodeDelta(typ string, r *discovery.Resource) (proto.Message, error) {
	a := r.GetResource()
	if r.GetName() == "" || a == nil {
		return nil, fmt.Errorf("%w: a resource needs a name and a body", ErrBadResource)
	}
	switch typ {
	case TopicRouteType:
		tr := &batonv1.TopicRoute{}
		if err := a.UnmarshalTo(tr); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBadResource, r.GetName(), err)
		}
		if err := ValidateRoute(tr); err != nil {
			return nil, err
		}
		if tr.GetTopic() != r.GetName() {
			return nil, fmt.Errorf("%w: resource %s carries topic %s", ErrBadResource, r.GetName(), tr.GetTopic())
		}
		return tr, nil
	default:
		cl := &batonv1.Cluster{}
		if err := a.UnmarshalTo(cl); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBadResource, r.GetName(), err)
		}
		if cl.GetName() != r.GetName() || len(cl.GetBootstrap()) == 0 {
			return nil, fmt.Errorf("%w: resource %s: cluster %q needs its name and bootstrap brokers", ErrBadResource,
				r.GetName(), cl.GetName())
		}
		return cl, nil
	}
}

// ValidateRoute checks what every agent relies on in a TopicRoute.
func ValidateRoute(r *batonv1.TopicRoute) error {
	switch {
	case r.GetTopic() == "":
		return fmt.Errorf("%w: topic is empty", ErrBadResource)
	case r.GetState() == batonv1.State_STATE_UNSPECIFIED || batonv1.State_name[int32(r.GetState())] == "":
		return fmt.Errorf("%w: topic %s: state %v", ErrBadResource, r.GetTopic(), r.GetState())
	case r.GetHoldMax().AsDuration() < 0, r.GetForwardDeadline().AsDuration() < 0:
		return fmt.Errorf("%w: topic %s: negative duration", ErrBadResource, r.GetTopic())
	}
	return nil
}

// LeaseKeeper holds an agent's lease: it heartbeats every lease/3 and says
// whether the lease is valid. The lease clock starts when a heartbeat is
// sent (docs/design.md §5), so the agent's expiry is never later than the
// control plane's.
type LeaseKeeper struct {
	cfg    clientConfig
	client batonv1.LeaseClient
	conn   grpc.ClientConnInterface
	node   *core.Node
	report func() (acked uint64, topics []*batonv1.TopicDrain)
	target string // the control plane's address, for logs

	mu         sync.Mutex
	validUntil time.Time
	lease      time.Duration
	last       *batonv1.HeartbeatResponse
	// lastAnsweredAt is when last arrived, if it carried server_time.
	lastAnsweredAt time.Time
	incarnation    uint64
	renewed        chan struct{} // closed, and replaced, at every granted heartbeat

	// sending is held (a token in it) from a heartbeat's report to its
	// answer: heartbeats go one at a time.
	sending chan struct{}
	// kicked holds a heartbeat Kick asked for and Run has not sent yet.
	kicked chan struct{}
}

// NewLeaseKeeper returns a keeper for node; report is called for every
// heartbeat and returns the applied config version and per-topic drain.
func NewLeaseKeeper(conn grpc.ClientConnInterface, node *core.Node,
	report func() (uint64, []*batonv1.TopicDrain), opts ...ClientOpt) (*LeaseKeeper, error) {
	cfg, err := newClientConfig(opts)
	if err != nil {
		return nil, err
	}
	if node.GetId() == "" || report == nil {
		return nil, fmt.Errorf("%w: node id and report are required", ErrBadConfig)
	}
	k := &LeaseKeeper{cfg: cfg, client: batonv1.NewLeaseClient(conn), conn: conn, node: node, report: report, lease: migration.DefaultLease, // until the first grant says otherwise
		renewed: make(chan struct{}), incarnation: rand.Uint64() | 1, sending: make(chan struct{}, 1), kicked: make(chan struct{}, 1)}
	if t, ok := conn.(interface{ Target() string }); ok {
		k.target = t.Target()
	}
	return k, nil
}

// Valid reports whether the agent holds a lease now: it may forward.
func (k *LeaseKeeper) Valid() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cfg.now().Before(k.validUntil)
}

// ValidUntil is when the agent's lease runs out (ran out), by the agent's
// clock; zero before the first grant.
func (k *LeaseKeeper) ValidUntil() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.validUntil
}

// Renewed returns a channel closed at the next heartbeat that grants the
// lease. A lease becomes valid only then, so a write waiting for one waits
// on this channel (and checks Valid again) instead of polling.
func (k *LeaseKeeper) Renewed() <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.renewed
}

// Last returns the last heartbeat answer, nil before the first.
func (k *LeaseKeeper) Last() *batonv1.HeartbeatResponse {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.last
}

// Heartbeat sends one heartbeat and, if granted, extends the lease to
// send time + lease. Heartbeats go one at a time: one waits (within ctx)
// for the one in flight to be answered or to fail before it makes its
// report. The control plane keeps the last report it received, so a
// report made earlier must never reach it after one made later (two
// unary calls at once may arrive in either order).
func (k *LeaseKeeper) Heartbeat(ctx context.Context) (*batonv1.HeartbeatResponse, error) {
	select {
	case k.sending <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-k.sending }()
	// Stamped before the report is made: the report then holds every
	// write answered before sent_at (bypass detection relies on it), and
	// the lease clock starts no later than the request.
	sent := k.cfg.now()
	acked, topics := k.report()
	ns, wl := nodeLabels(k.node)
	var findings []*batonv1.Finding
	if k.cfg.findings != nil {
		findings = k.cfg.findings()
		findings = findings[:min(len(findings), MaxFindings)]
	}
	req := &batonv1.HeartbeatRequest{NodeId: k.node.GetId(), Namespace: ns, Workload: wl,
		AckedVersion: acked, Topics: topics, SentAt: timestamppb.New(sent), Findings: findings, Incarnation: k.incarnation}
	k.mu.Lock()
	if !k.lastAnsweredAt.IsZero() {
		req.LastServerTime, req.LastAnsweredAt = k.last.GetServerTime(), timestamppb.New(k.lastAnsweredAt)
	}
	k.mu.Unlock()
	resp, err := k.client.Heartbeat(ctx, req)
	if err != nil {
		return nil, err
	}
	answered := k.cfg.now()
	if k.cfg.delivered != nil {
		k.cfg.delivered(topics)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.last = resp
	if resp.GetServerTime() != nil {
		k.lastAnsweredAt = answered
	}
	if d := resp.GetLease(); d != nil && d.AsDuration() > 0 {
		k.lease = d.AsDuration()
	}
	if resp.GetGranted() {
		k.validUntil = sent.Add(k.lease)
		close(k.renewed)
		k.renewed = make(chan struct{})
	}
	return resp, nil
}

// Kick asks Run for a heartbeat now rather than at the next renewal (a
// route version applied, a topic drained: the control plane waits on such
// reports), and returns at once. Run sends it after the heartbeat in flight,
// if any, is answered, with a report made then: a change made while a
// heartbeat is in flight reaches the control plane in the next one, never
// overtaken by a report made before it. Kicks not yet sent coalesce into
// one; a kicked heartbeat that fails is retried like any other, at Run's
// backoff rather than at the next renewal, so the report is sent once the
// control plane answers again. A kick before Run starts is covered by
// Run's first heartbeat.
func (k *LeaseKeeper) Kick() {
	select {
	case k.kicked <- struct{}{}:
	default:
	}
}

// Run heartbeats every lease/3 until ctx ends (sooner after a refusal or
// an error, and at once after a Kick), and returns nil then. Losing the
// control plane is logged once at WARN and its return once at INFO; each
// failed attempt in between only at DEBUG, since retries come every few
// hundred milliseconds.
func (k *LeaseKeeper) Run(ctx context.Context) error {
	var lostAt time.Time // zero while the control plane answers
	for {
		// Bounded, so that a control plane that hangs is logged as lost
		// and asked again. It does not move the agent to another replica:
		// gRPC keeps a connection that is still up (design §13.1).
		k.mu.Lock()
		limit := k.lease
		k.mu.Unlock()
		hctx, cancel := context.WithTimeout(ctx, limit)
		// This heartbeat's report is made after now: it covers every
		// kick so far. A kick from here on asks for the next one.
		select {
		case <-k.kicked:
		default:
		}
		resp, err := k.Heartbeat(hctx)
		cancel()
		k.mu.Lock()
		every := k.lease / 3
		validUntil := k.validUntil
		k.mu.Unlock()
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil && lostAt.IsZero():
			lostAt = k.cfg.now()
			k.cfg.log.Warn("control plane unreachable: producers through this agent are refused once the lease runs out",
				"node", k.node.GetId(), "control_plane", k.target, "lease_valid_until", validUntil, "err", err)
		case err != nil:
			k.cfg.log.Debug("heartbeat failed", "node", k.node.GetId(), "control_plane", k.target, "err", err)
		case !lostAt.IsZero():
			k.cfg.log.Info("control plane reachable again", "node", k.node.GetId(), "control_plane", k.target,
				"unreachable_for", k.cfg.now().Sub(lostAt).Round(time.Millisecond))
			lostAt = time.Time{}
		}
		switch {
		case err != nil:
			every = min(every, k.cfg.minBackoff*4)
		case !resp.GetGranted():
			k.cfg.log.Warn("lease refused", "node", k.node.GetId(), "reason", resp.GetReason(),
				"required", resp.GetRequiredVersion())
			every = min(every, k.cfg.minBackoff*4)
		}
		var ready <-chan struct{}
		kicked := k.kicked
		if err != nil {
			ready = k.whenReady(ctx, every)
			// The retry's report covers a kick meanwhile: a kick does not
			// cut the backoff short against a control plane that fails.
			kicked = nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		case <-kicked:
			// A change to report (Kick).
		case <-ready:
			// A replica that was down, or newly elected, accepted the
			// connection: heartbeat now, not at the next retry.
		}
	}
}

// whenReady returns a channel closed once the keeper's connection is (or
// becomes) ready within d; nil for a connection that does not say. A
// connection ready when asked must first leave READY: a heartbeat that
// failed over it was the control plane's answer (or its timeout), retried
// after d, not at once.
func (k *LeaseKeeper) whenReady(ctx context.Context, d time.Duration) <-chan struct{} {
	cc, ok := k.conn.(*grpc.ClientConn)
	if !ok {
		return nil
	}
	ch := make(chan struct{})
	go func() {
		wctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		if s := cc.GetState(); s == connectivity.Ready && !cc.WaitForStateChange(wctx, s) {
			return
		}
		cc.Connect()
		for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
			if !cc.WaitForStateChange(wctx, s) {
				return
			}
		}
		close(ch)
	}()
	return ch
}
