// Package upstream is the agent's own Kafka client to the brokers of one
// cluster: pipelined broker connections (Conn, Call), pools of them per
// broker, the cluster's brokers, partition leaders and coordinators as
// its answers tell them, and the versions it supports. It forwards
// requests the agent already encoded (Send, SendvOn) and asks the cluster
// typed questions (Ask, RoundTrip, Metadata, ...); where each request goes
// and what a failure means for the client is the agent's business.
package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/internal/errprefix"
)

// Config is what New needs to know of a cluster.
type Config struct {
	// Name is the cluster's role ("source", "destination"), in messages
	// and as the "cluster" attribute of log records.
	Name string
	// Bootstrap are the addresses (host:port) asked until a metadata
	// answer lists the brokers, and after the brokers known.
	Bootstrap []string
	// PoolSize is how many pooled connections to keep per broker; at
	// least 1.
	PoolSize int
	// DialTimeout bounds dialing a broker.
	DialTimeout time.Duration
	// ReadTimeout bounds how long the oldest unanswered request on a
	// connection may wait before the connection is given up (a hung
	// broker), pooled or from Dial.
	ReadTimeout time.Duration
	// Log gets the cluster's records (reachability); nil: slog.Default.
	Log *slog.Logger
	// Security is how connections to the cluster are secured; the zero
	// value is plaintext.
	Security Security
	// StartNote, if set, says what the agent does until the cluster first
	// answers: it ends the WARN record when no broker answered yet.
	StartNote string
	// Forwarded says that connections authenticate with a client's
	// credentials (client SASL forward), not the agent's. No broker
	// answering through them is then logged at DEBUG, not WARN: a refusal
	// of the client's credentials is the client's (its SASL
	// authentication fails, and the agent's client SASL filter says so),
	// and the cluster itself being down is said by the agent's own
	// connections to it.
	Forwarded bool
}

// Cluster is one Kafka cluster as the agent sees it: brokers, partition
// leaders, coordinators, supported versions, and pooled connections. It
// is safe for concurrent use.
type Cluster struct {
	name      string
	bootstrap []string
	poolSize  int
	dialTO    time.Duration
	// readTO bounds the oldest unanswered request on a connection from
	// Dial (a client connection's own, for requests a broker may park);
	// stallTO the same on a pooled one.
	readTO  time.Duration
	stallTO time.Duration
	sec     Security
	log     *slog.Logger

	mu         sync.RWMutex
	brokers    map[int32]string
	leaders    map[string][]int32 // topic -> partition -> leader node
	coords     map[coordKey]int32
	versions   map[int16][2]int16
	features   *kmsg.ApiVersionsResponse
	conns      map[string][]*poolSlot
	clusterID  *string
	controller int32
	// versionsSeen counts ApiVersions answers, so that what the agent
	// advertises is recomputed only when they change.
	versionsSeen atomic.Uint64

	health clusterHealth
}

// poolSlot is one pooled connection to a broker. Its own lock serializes
// dialing it, so a broker that takes long to dial holds up only the
// requests for that slot, not the rest of the cluster.
type poolSlot struct {
	dialMu sync.Mutex
	c      atomic.Pointer[Conn]
	// nextRedial (unix nanoseconds): while the connection's SASL session
	// is ending and dialing its replacement failed, no new dial before.
	nextRedial atomic.Int64
}

// redialBackoff spaces the dials of a replacement for a connection whose
// SASL session is ending, after one failed.
const redialBackoff = time.Second

type coordKey struct {
	typ int8
	key string
}

// New returns a client of the cluster cfg describes. It dials nothing
// until asked.
func New(cfg Config) *Cluster {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	return &Cluster{
		name:      cfg.Name,
		bootstrap: cfg.Bootstrap,
		poolSize:  cfg.PoolSize,
		dialTO:    cfg.DialTimeout,
		readTO:    cfg.ReadTimeout,
		stallTO:   cfg.ReadTimeout,
		sec:       cfg.Security,
		log:       log.With("cluster", cfg.Name),
		brokers:   map[int32]string{},
		leaders:   map[string][]int32{},
		coords:    map[coordKey]int32{},
		conns:     map[string][]*poolSlot{},
		health:    clusterHealth{startNote: cfg.StartNote, forwarded: cfg.Forwarded},
	}
}

// Name is the cluster's Config.Name.
func (u *Cluster) Name() string { return u.name }

func (u *Cluster) slot(addr string, idx uint64) *poolSlot {
	i := int(idx % uint64(u.poolSize))
	u.mu.RLock()
	pool := u.conns[addr]
	u.mu.RUnlock()
	if pool != nil {
		return pool[i]
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if pool = u.conns[addr]; pool == nil {
		pool = make([]*poolSlot, u.poolSize)
		for j := range pool {
			pool[j] = &poolSlot{}
		}
		u.conns[addr] = pool
	}
	return pool[i]
}

// conn returns pooled connection idx%poolSize to addr, dialing if it has
// none or the one it had died.
func (u *Cluster) conn(ctx context.Context, addr string, idx uint64) (*Conn, error) {
	s := u.slot(addr, idx)
	now := time.Now()
	usable := func(c *Conn) bool { return c != nil && !c.Dead() && !c.Expiring(now) }
	if c := s.c.Load(); usable(c) {
		return c, nil
	}
	// A connection whose session is ending is still handed out while a
	// replacement failed to dial a moment ago: redial at most once per
	// backoff, not on every request (each would wait out DialTimeout).
	if c := s.c.Load(); c != nil && c.usableUntil(now) && now.UnixNano() < s.nextRedial.Load() {
		return c, nil
	}
	s.dialMu.Lock()
	defer s.dialMu.Unlock()
	old := s.c.Load()
	if usable(old) {
		return old, nil // another request redialed meanwhile
	}
	if old != nil && old.usableUntil(time.Now()) && time.Now().UnixNano() < s.nextRedial.Load() {
		return old, nil // another request's redial just failed
	}
	c, err := dial(ctx, addr, u.dialTO, u.stallTO, u.sec)
	if err != nil {
		if old != nil && old.usableUntil(time.Now()) {
			// Its session has not ended: keep using it, try again later.
			s.nextRedial.Store(time.Now().Add(redialBackoff).UnixNano())
			return old, nil
		}
		return nil, fmt.Errorf("%w: %s cluster: dialing %s: %w", ErrNotSent, u.name, addr, errprefix.Nested(errPrefix, err))
	}
	s.c.Store(c)
	if old != nil {
		old.Retire()
	}
	return c, nil
}

// Dial opens a connection to broker addr outside the pools, for requests
// a broker may hold for long (a Fetch waiting for data, a JoinGroup): on a
// pooled connection they would hold up every request behind them. Its
// oldest unanswered request may wait ReadTimeout. The caller owns it and
// MUST Close it when done.
func (u *Cluster) Dial(ctx context.Context, addr string) (*Conn, error) {
	c, err := dial(ctx, addr, u.dialTO, u.readTO, u.sec)
	if err != nil {
		return nil, fmt.Errorf("%s cluster: dialing %s: %w", u.name, addr, err)
	}
	return c, nil
}

// sendv writes a request body made of segments to addr on pooled
// connection idx. A request that never reached the broker because its
// connection had died (a broker restart noticed only now) is written once
// more on a fresh connection.
func (u *Cluster) sendv(ctx context.Context, addr string, idx uint64, key, ver int16, clientID *string, segs [][]byte, expect bool) (*Call, error) {
	var err error
	for range 2 {
		var c *Conn
		if c, err = u.conn(ctx, addr, idx); err != nil {
			return nil, err
		}
		var cl *Call
		if cl, err = c.sendv(key, ver, clientID, segs, expect, false); err == nil || !errors.Is(err, ErrNotSent) {
			return cl, err
		}
	}
	return nil, err
}

// SendvOn writes a request whose body is the concatenation of segs (one
// writev on TCP, the segments not copied; one write of a copy on TLS; the
// segments are not kept). With want nil it is
// Send: on pooled connection slot, written once more on a fresh
// connection if that one had died.
//
// Otherwise want is the pooled connection earlier requests went on, and it
// writes once, on want only. If want died or the pool moved on from it,
// the request is not sent (ErrNotSent): on a fresh connection it could
// overtake requests in doubt on want. A caller that keeps a partition's
// requests in order (the agent's in-doubt connection rule, filter/route)
// MUST pass the connection its outstanding requests went on (Call.Conn),
// with the slot they were sent with.
func (u *Cluster) SendvOn(ctx context.Context, addr string, slot uint64, want *Conn, key, ver int16, clientID *string, segs [][]byte, expect bool) (*Call, error) {
	if want == nil {
		return u.sendv(ctx, addr, slot, key, ver, clientID, segs, expect)
	}
	// A connection replaced only because its SASL session ends soon is
	// alive, and still takes the requests pinned to it until the end.
	replaced := want.retiring.Load() && want.usableUntil(time.Now())
	if c := u.slot(addr, slot).c.Load(); c != want && !replaced {
		return nil, fmt.Errorf("%w: %w: %s", ErrNotSent, errprefix.Nested(errPrefix, errEarlierInDoubt), addr)
	}
	return want.sendv(key, ver, clientID, segs, expect, true)
}

// Send writes a request body (encoded, without header) of key at version
// ver to addr on pooled connection slot (slot modulo PoolSize), dialing it
// if needed, under a header naming clientID. Requests sent with one slot
// to one broker go on one connection and are answered in order: a caller
// that needs that (a client connection's requests) MUST use one slot for
// them. A request that never reached the broker because its connection had
// died (a broker restart noticed only now) is written once more on a fresh
// connection. An error wrapping ErrNotSent means the broker cannot have
// seen the request. With expect false (acks=0 produce) the Call is nil.
func (u *Cluster) Send(ctx context.Context, addr string, slot uint64, key, ver int16, clientID *string, body []byte, expect bool) (*Call, error) {
	return u.sendv(ctx, addr, slot, key, ver, clientID, [][]byte{body}, expect)
}

// RoundTrip sends a typed request to addr, as the agent, on pooled
// connection 0, and decodes the answer.
func (u *Cluster) RoundTrip(ctx context.Context, addr string, req kmsg.Request) (kmsg.Response, error) {
	cl, err := u.Send(ctx, addr, 0, req.Key(), req.GetVersion(), &agentClientID, req.AppendTo(nil), true)
	if err != nil {
		return nil, err
	}
	body, err := cl.Wait(ctx)
	if err != nil {
		return nil, err
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("%s cluster: decoding %s response from %s: %w", u.name, kmsg.NameForKey(req.Key()), addr, err)
	}
	return resp, nil
}

// agentClientID names the agent in the headers of its own requests.
var agentClientID = "baton-agent"

// ClusterID is the cluster id of the last metadata answer, nil before one.
func (u *Cluster) ClusterID() *string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.clusterID
}

// AnyBrokers returns the addresses of brokers to ask cluster-wide
// questions, in the order to try them: the known brokers, in random order
// to spread load, then the bootstrap addresses.
func (u *Cluster) AnyBrokers() []string {
	u.mu.RLock()
	addrs := make([]string, 0, len(u.brokers)+len(u.bootstrap))
	for _, a := range u.brokers {
		addrs = append(addrs, a)
	}
	u.mu.RUnlock()
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	return append(addrs, u.bootstrap...)
}

// Ask sends req to the first broker that answers (see AnyBrokers) and
// returns its answer and address. When none answers, the error wraps
// ErrNoBrokers, logged at WARN once until a broker answers again.
func (u *Cluster) Ask(ctx context.Context, req kmsg.Request) (kmsg.Response, string, error) {
	var errs []error
	for _, addr := range u.AnyBrokers() {
		resp, err := u.RoundTrip(ctx, addr, req)
		if err == nil {
			u.reachable(addr)
			return resp, addr, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			// The asker gave up: that says nothing about the cluster.
			return nil, "", fmt.Errorf("%s cluster: %w", u.name, errors.Join(errs...))
		}
	}
	err := fmt.Errorf("%w in the %s cluster: %w", ErrNoBrokers, u.name, errprefix.Nested(errPrefix, errors.Join(errs...)))
	u.unreachable(err)
	return nil, "", err
}

// Version returns the highest version of key that every broker asked so
// far supports and that kmsg knows, capped at max; -1 if none.
func (u *Cluster) Version(key, max int16) int16 {
	u.mu.RLock()
	r, ok := u.versions[key]
	u.mu.RUnlock()
	if !ok {
		return -1
	}
	v := min(r[1], max)
	if req := kmsg.RequestForKey(key); req != nil {
		v = min(v, req.MaxVersion())
	}
	if v < r[0] {
		return -1
	}
	return v
}

// LoadVersions asks a broker for its ApiVersions (v3, falling back to v0)
// and keeps what it supports (Versions, Version, Features).
func (u *Cluster) LoadVersions(ctx context.Context) error {
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(3)
	req.ClientSoftwareName = "baton-agent"
	req.ClientSoftwareVersion = "0"
	resp, _, err := u.Ask(ctx, req)
	if err != nil {
		return err
	}
	av := resp.(*kmsg.ApiVersionsResponse)
	if err := kerr.ErrorForCode(av.ErrorCode); err != nil {
		return fmt.Errorf("%s cluster: ApiVersions: %w", u.name, err)
	}
	vs := make(map[int16][2]int16, len(av.ApiKeys))
	for _, k := range av.ApiKeys {
		vs[k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
	}
	u.mu.Lock()
	u.versions = vs
	u.features = av
	u.mu.Unlock()
	u.versionsSeen.Add(1)
	return nil
}

// HasVersions says whether a broker answered LoadVersions.
func (u *Cluster) HasVersions() bool {
	u.mu.RLock()
	defer u.mu.RUnlock()
	return u.versions != nil
}

// Versions is the last ApiVersions answer as key to [min, max] version,
// nil before one. The caller MUST NOT modify it.
func (u *Cluster) Versions() map[int16][2]int16 {
	u.mu.RLock()
	defer u.mu.RUnlock()
	return u.versions
}

// Features is the last ApiVersions answer whole (supported and finalized
// features), nil before one. The caller MUST NOT modify it.
func (u *Cluster) Features() *kmsg.ApiVersionsResponse {
	u.mu.RLock()
	defer u.mu.RUnlock()
	return u.features
}

// VersionsSeen counts ApiVersions answers: what was computed from
// Versions holds while it stays the same.
func (u *Cluster) VersionsSeen() uint64 { return u.versionsSeen.Load() }

// Metadata asks the cluster for topics (nil: all) and caches brokers and
// leaders from the answer.
func (u *Cluster) Metadata(ctx context.Context, topics []string, allowAuto bool) (*kmsg.MetadataResponse, error) {
	req := kmsg.NewPtrMetadataRequest()
	v := u.Version(3, 12)
	if v < 4 {
		v = 4
	}
	req.SetVersion(v)
	req.AllowAutoTopicCreation = allowAuto
	if topics != nil {
		req.Topics = make([]kmsg.MetadataRequestTopic, len(topics))
		for i := range topics {
			req.Topics[i].Topic = &topics[i]
		}
	}
	resp, _, err := u.Ask(ctx, req)
	if err != nil {
		return nil, err
	}
	md := resp.(*kmsg.MetadataResponse)
	u.mu.Lock()
	u.clusterID = md.ClusterID
	u.controller = md.ControllerID
	if len(md.Brokers) > 0 {
		// The answer lists the live brokers: one that left (or is down)
		// must not stay a place to send questions or partitions to.
		u.brokers = make(map[int32]string, len(md.Brokers))
	}
	for _, b := range md.Brokers {
		u.brokers[b.NodeID] = net.JoinHostPort(b.Host, fmt.Sprint(b.Port))
	}
	for _, t := range md.Topics {
		if t.Topic == nil {
			continue
		}
		if t.ErrorCode != 0 {
			delete(u.leaders, *t.Topic)
			continue
		}
		ls := make([]int32, len(t.Partitions))
		for i := range ls {
			ls[i] = -1
		}
		for _, p := range t.Partitions {
			if p.Partition >= 0 && int(p.Partition) < len(ls) && p.ErrorCode == 0 {
				ls[p.Partition] = p.Leader
			}
		}
		u.leaders[*t.Topic] = ls
	}
	u.mu.Unlock()
	return md, nil
}

// LeaderAddr returns the address of the leader of topic/partition, asking
// the cluster when the cache does not know it. An error is one the client
// should retry (kerr codes) or a connectivity error.
func (u *Cluster) LeaderAddr(ctx context.Context, topic string, partition int32) (string, error) {
	if addr, ok := u.CachedLeader(topic, partition); ok {
		return addr, nil
	}
	if _, err := u.Metadata(ctx, []string{topic}, false); err != nil {
		return "", err
	}
	if addr, ok := u.CachedLeader(topic, partition); ok {
		return addr, nil
	}
	u.mu.RLock()
	ls, known := u.leaders[topic]
	u.mu.RUnlock()
	if !known {
		return "", kerr.UnknownTopicOrPartition
	}
	if int(partition) >= len(ls) || partition < 0 {
		return "", kerr.UnknownTopicOrPartition
	}
	return "", kerr.LeaderNotAvailable
}

// CachedLeader returns the address of the leader of topic/partition if the
// cache knows it, without asking the cluster.
func (u *Cluster) CachedLeader(topic string, partition int32) (string, bool) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	ls := u.leaders[topic]
	if partition < 0 || int(partition) >= len(ls) || ls[partition] < 0 {
		return "", false
	}
	addr, ok := u.brokers[ls[partition]]
	return addr, ok
}

// MoveLeader records a KIP-951 hint: a broker that is no longer the leader
// of topic/partition named the new one, leader (at addr, or at an address
// the cache knows). It reports whether the hint was usable; if not, the
// caller forgets the topic's leaders and the next request asks the cluster.
func (u *Cluster) MoveLeader(topic string, partition, leader int32, addr string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	ls := u.leaders[topic]
	if leader < 0 || partition < 0 || int(partition) >= len(ls) {
		return false
	}
	if addr != "" {
		u.brokers[leader] = addr
	} else if _, ok := u.brokers[leader]; !ok {
		return false
	}
	ls[partition] = leader
	return true
}

// BrokerDown drops the cached leaders of every topic with a partition led
// by the broker at addr, after a request to it could not be sent or its
// connection died: the next request for one of them asks the cluster, as a
// client writing the cluster directly refreshes its metadata on a
// connection error. Without it the cache would keep naming a dead leader
// until a client's Metadata request or a live broker's NOT_LEADER came
// through, after the cluster elected a new one.
func (u *Cluster) BrokerDown(addr string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	down := map[int32]bool{}
	for id, a := range u.brokers {
		if a == addr {
			down[id] = true
		}
	}
	if len(down) == 0 {
		return
	}
	for topic, ls := range u.leaders {
		for _, l := range ls {
			if down[l] {
				delete(u.leaders, topic)
				break
			}
		}
	}
}

// ForgetLeader drops the cached leaders of topic after a broker said it
// is not one: the next request asks the cluster.
func (u *Cluster) ForgetLeader(topic string) {
	u.mu.Lock()
	delete(u.leaders, topic)
	u.mu.Unlock()
}

// CoordinatorAddr finds the coordinator of a group (typ 0) or
// transactional id (typ 1): from the cache unless fresh, else asking the
// cluster. An error is the cluster's (a kerr code) or a connectivity
// error.
func (u *Cluster) CoordinatorAddr(ctx context.Context, typ int8, key string, fresh bool) (string, error) {
	ck := coordKey{typ, key}
	if !fresh {
		u.mu.RLock()
		node, ok := u.coords[ck]
		addr, known := u.brokers[node]
		u.mu.RUnlock()
		if ok && known {
			return addr, nil
		}
	}
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.SetVersion(max(u.Version(10, 3), 1))
	req.CoordinatorKey = key
	req.CoordinatorType = typ
	resp, _, err := u.Ask(ctx, req)
	if err != nil {
		return "", err
	}
	fc := resp.(*kmsg.FindCoordinatorResponse)
	if err := kerr.ErrorForCode(fc.ErrorCode); err != nil {
		return "", err
	}
	addr := net.JoinHostPort(fc.Host, fmt.Sprint(fc.Port))
	u.mu.Lock()
	u.coords[ck] = fc.NodeID
	u.brokers[fc.NodeID] = addr
	u.mu.Unlock()
	return addr, nil
}

// ControllerAddr asks the cluster for its controller: admin requests go
// there (Kafka forwards them from any broker, kfake does not).
func (u *Cluster) ControllerAddr(ctx context.Context) (string, error) {
	if _, err := u.Metadata(ctx, []string{}, false); err != nil {
		return "", err
	}
	u.mu.RLock()
	defer u.mu.RUnlock()
	if addr, ok := u.brokers[u.controller]; ok {
		return addr, nil
	}
	return "", fmt.Errorf("%w in the %s cluster: controller %d unknown", ErrNoBrokers, u.name, u.controller)
}

// ForgetCoordinator drops the cached coordinator of a group (typ 0) or
// transactional id (typ 1) after a request to it failed.
func (u *Cluster) ForgetCoordinator(typ int8, key string) {
	u.mu.Lock()
	delete(u.coords, coordKey{typ, key})
	u.mu.Unlock()
}

// CloseConns closes every pooled connection, failing the requests waiting
// on them with ErrConnClosed wrapping cause. The Cluster stays usable: a
// later request dials afresh. Connections from Dial are the caller's.
func (u *Cluster) CloseConns(cause error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, pool := range u.conns {
		for _, s := range pool {
			if c := s.c.Load(); c != nil {
				c.die(cause)
			}
		}
	}
}
