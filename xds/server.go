package xds

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
)

// Target says which nodes get a topic's shadow features. An empty list
// matches every value.
type Target struct {
	Namespaces []string `json:"namespaces,omitempty"`
	Workloads  []string `json:"workloads,omitempty"`
}

// Matches reports whether a node in namespace running workload is targeted.
func (t Target) Matches(namespace, workload string) bool {
	return (len(t.Namespaces) == 0 || slices.Contains(t.Namespaces, namespace)) &&
		(len(t.Workloads) == 0 || slices.Contains(t.Workloads, workload))
}

// Resources is everything the server serves, at one config version.
type Resources struct {
	Version  uint64
	Routes   []*batonv1.TopicRoute
	Targets  map[string]Target // by topic; absent: every node
	Clusters []*batonv1.Cluster
}

// Nack is a response a node refused.
type Nack struct {
	Type    string    `json:"type"`
	Version string    `json:"version"`
	Error   string    `json:"error"`
	At      time.Time `json:"at"`
}

// NodeStatus is what the server knows of one node.
type NodeStatus struct {
	ID        string `json:"id"`
	Namespace string `json:"namespace"`
	Workload  string `json:"workload"`
	Connected bool   `json:"connected"`
	// AckedVersion is the newest TopicRoute config version the node ACKed.
	AckedVersion uint64 `json:"ackedVersion"`
	// AckedClusterVersion is the newest Cluster version it ACKed.
	AckedClusterVersion string    `json:"ackedClusterVersion,omitempty"`
	Nacks               int       `json:"nacks"`
	LastNack            *Nack     `json:"lastNack,omitempty"`
	LastSeen            time.Time `json:"lastSeen"`
}

// Opt configures NewServer.
type Opt interface{ apply(*serverConfig) }

type optFunc func(*serverConfig)

func (f optFunc) apply(c *serverConfig) { f(c) }

type serverConfig struct {
	log *slog.Logger
	now func() time.Time
}

// WithLogger sets the server's logger (default slog.Default()).
func WithLogger(l *slog.Logger) Opt { return optFunc(func(c *serverConfig) { c.log = l }) }

// WithClock sets the clock stamped on node status (default time.Now).
func WithClock(now func() time.Time) Opt { return optFunc(func(c *serverConfig) { c.now = now }) }

// Server is Baton's ADS server. Create it with NewServer, register it on a
// grpc.Server with Register, publish with Update.
type Server struct {
	log   *slog.Logger
	now   func() time.Time
	cache *groupCache
	ads   server.Server

	// pubMu orders snapshot publication: Update and first-sight of a node
	// group set snapshots under it, so a stale snapshot never lands last.
	pubMu          sync.Mutex
	cur            Resources
	clusterVersion uint64
	groups         map[string][2]string

	mu      sync.Mutex
	nodes   map[string]*NodeStatus
	streams map[streamKey]*streamState
	changed chan struct{}
}

// streamKey names a stream: go-control-plane numbers SotW and delta streams
// apart, from 1 each.
type streamKey struct {
	delta bool
	id    int64
}

type streamState struct {
	node *core.Node
	// sent maps the nonce of each response in flight to its version_info
	// (SotW) or system_version_info (delta): a delta ACK carries no version,
	// so the version it acknowledges is the one sent with its nonce.
	sent map[string]string
}

// groupHash keys snapshots by node group (namespace, workload): nodes of a
// group share one snapshot.
type groupHash struct{}

func (groupHash) ID(n *core.Node) string {
	ns, wl := nodeLabels(n)
	return ns + "/" + wl
}

// NewServer returns a server serving nothing at version 0.
func NewServer(opts ...Opt) *Server {
	cfg := serverConfig{log: slog.Default(), now: time.Now}
	for _, o := range opts {
		o.apply(&cfg)
	}
	s := &Server{
		log: cfg.log.With("component", "xds"), now: cfg.now,
		cache:  newGroupCache(),
		groups: map[string][2]string{}, nodes: map[string]*NodeStatus{},
		streams: map[streamKey]*streamState{}, changed: make(chan struct{}),
	}
	s.ads = server.NewServer(context.Background(), s.cache, server.CallbackFuncs{
		StreamClosedFunc:   func(id int64, n *core.Node) { s.onClosed(streamKey{id: id}, n) },
		StreamRequestFunc:  s.onRequest,
		StreamResponseFunc: s.onResponse,

		DeltaStreamClosedFunc:   func(id int64, n *core.Node) { s.onClosed(streamKey{delta: true, id: id}, n) },
		StreamDeltaRequestFunc:  s.onDeltaRequest,
		StreamDeltaResponseFunc: s.onDeltaResponse,
	})
	return s
}

// Register serves ADS on g: both state-of-the-world
// (StreamAggregatedResources) and incremental (DeltaAggregatedResources).
func (s *Server) Register(g *grpc.Server) {
	discovery.RegisterAggregatedDiscoveryServiceServer(g, s.ads)
}

// Update publishes res to every node group. Versions must not go down.
func (s *Server) Update(res Resources) {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if !slices.EqualFunc(s.cur.Clusters, res.Clusters, func(a, b *batonv1.Cluster) bool { return proto.Equal(a, b) }) {
		s.clusterVersion++
	}
	s.cur = res
	for key, g := range s.groups {
		s.setLocked(key, g[0], g[1])
	}
}

func (s *Server) setLocked(key, namespace, workload string) {
	snap := buildSnapshot(&s.cur, "c"+FormatVersion(s.clusterVersion), namespace, workload)
	if err := s.cache.set(key, snap); err != nil {
		s.log.Error("setting snapshot", "group", key, "err", err)
	}
}

// ensureGroup gives a node's group a snapshot the first time it is seen.
func (s *Server) ensureGroup(n *core.Node) {
	key := groupHash{}.ID(n)
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if _, ok := s.groups[key]; ok {
		return
	}
	ns, wl := nodeLabels(n)
	s.groups[key] = [2]string{ns, wl}
	s.setLocked(key, ns, wl)
}

func (s *Server) onRequest(id int64, req *discovery.DiscoveryRequest) error {
	s.record(streamKey{id: id}, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail().GetMessage(),
		req.GetErrorDetail() != nil, func(string) string { return req.GetVersionInfo() })
	return nil
}

func (s *Server) onResponse(_ context.Context, id int64, _ *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	s.sent(streamKey{id: id}, resp.GetNonce(), resp.GetVersionInfo())
}

// onDeltaRequest records a delta ACK or NACK like a SotW one. The delta
// server calls it before filling in a request's node from the stream's
// first request, so the node is taken from the stream's state.
func (s *Server) onDeltaRequest(id int64, req *discovery.DeltaDiscoveryRequest) error {
	// A delta ACK carries no version: it acknowledges what was sent with
	// its nonce, whose system_version_info is the snapshot version.
	s.record(streamKey{delta: true, id: id}, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(),
		req.GetErrorDetail().GetMessage(), req.GetErrorDetail() != nil, func(sent string) string { return sent })
	return nil
}

func (s *Server) onDeltaResponse(id int64, _ *discovery.DeltaDiscoveryRequest, resp *discovery.DeltaDiscoveryResponse) {
	s.sent(streamKey{delta: true, id: id}, resp.GetNonce(), resp.GetSystemVersionInfo())
}

// record updates the node of stream key on a request: a subscription (no
// nonce), an ACK, or a NACK (nack, with errMsg). acked returns the version
// an ACK acknowledges given the version sent with its nonce ("" if unknown).
func (s *Server) record(key streamKey, n *core.Node, typeURL, nonce, errMsg string, nack bool, acked func(sent string) string) {
	s.mu.Lock()
	st := s.streams[key]
	if st == nil {
		st = &streamState{node: n, sent: map[string]string{}}
		s.streams[key] = st
	}
	if n == nil {
		n = st.node
	}
	s.mu.Unlock()
	s.ensureGroup(n)
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.nodes[n.GetId()]
	if ns == nil {
		ns = &NodeStatus{ID: n.GetId()}
		s.nodes[n.GetId()] = ns
	}
	ns.Namespace, ns.Workload = nodeLabels(n)
	ns.Connected, ns.LastSeen = true, s.now()
	if nonce == "" {
		return // a subscription, not an answer
	}
	sentVersion, known := st.sent[nonce]
	delete(st.sent, nonce)
	if nack {
		ns.Nacks++
		if !known {
			sentVersion = "?"
		}
		ns.LastNack = &Nack{Type: typeURL, Version: sentVersion, Error: errMsg, At: s.now()}
		s.log.Warn("NACK", "node", n.GetId(), "type", typeURL, "version", sentVersion, "err", errMsg)
		s.notifyLocked()
		return
	}
	version := acked(sentVersion)
	switch typeURL {
	case TopicRouteType:
		if version == "" {
			s.log.Debug("ACK of an unknown response", "node", n.GetId(), "nonce", nonce)
			return
		}
		v, err := ParseVersion(version)
		if err != nil {
			s.log.Warn("ACK with a bad version", "node", n.GetId(), "err", err)
			return
		}
		ns.AckedVersion = max(ns.AckedVersion, v)
	case ClusterType:
		if version == "" {
			return
		}
		ns.AckedClusterVersion = version
	}
	s.notifyLocked()
}

// sent records the version of a response about to be sent on stream key.
func (s *Server) sent(key streamKey, nonce, version string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.streams[key]; st != nil {
		if len(st.sent) > 16 { // answers to these will never come
			clear(st.sent)
		}
		st.sent[nonce] = version
	}
}

func (s *Server) onClosed(key streamKey, n *core.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.streams, key)
	for _, st := range s.streams {
		if st.node.GetId() == n.GetId() {
			return // another stream of the node is open
		}
	}
	if ns := s.nodes[n.GetId()]; ns != nil {
		ns.Connected = false
		s.notifyLocked()
	}
}

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Nodes returns every node seen, sorted by id.
func (s *Server) Nodes() []NodeStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]NodeStatus, 0, len(s.nodes))
	for _, n := range s.nodes {
		c := *n
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Node returns one node's status.
func (s *Server) Node(id string) (NodeStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[id]
	if !ok {
		return NodeStatus{}, false
	}
	return *n, true
}

// Changed returns a channel closed at the next ACK, NACK or disconnect.
func (s *Server) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}
