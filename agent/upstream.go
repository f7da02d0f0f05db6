package agent

import (
	"bufio"
	"context"
	"encoding/binary"
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

	"github.com/baton-kafka/baton/agent/internal/framing"
)

// brokerConn is one pipelined connection to one broker: requests are
// written in call order and answered in the same order, per the protocol.
//
// It reads all the time, not only while a request waits: a broker that
// restarts or resets the connection while it idles is noticed at once, so
// the next request redials instead of being written into a dead socket
// (where its outcome would be unknown).
type brokerConn struct {
	addr string
	nc   net.Conn
	// stallTimeout bounds how long the oldest request may wait for its
	// answer before the connection is given up (a hung broker): the read
	// deadline follows the oldest outstanding request.
	stallTimeout time.Duration

	wmu  sync.Mutex
	corr int32
	buf  []byte
	iov  [][]byte

	qmu   sync.Mutex
	queue []*call // written, unanswered, in write order

	dead   chan struct{}
	once   sync.Once
	err    atomic.Pointer[error]
	diedAt atomic.Int64 // unix nanoseconds
}

type call struct {
	conn  *brokerConn
	corr  int32
	key   int16
	ver   int16
	done  chan struct{}
	resp  []byte
	err   error
	start time.Time // when it was written upstream
}

func dialBroker(ctx context.Context, addr string, dialTimeout, stallTimeout time.Duration) (*brokerConn, error) {
	d := net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &brokerConn{
		addr:         addr,
		nc:           nc,
		stallTimeout: stallTimeout,
		dead:         make(chan struct{}),
	}
	go c.readLoop()
	return c, nil
}

func (c *brokerConn) isDead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

// die closes the connection and fails every request still waiting on it.
func (c *brokerConn) die(err error) {
	c.once.Do(func() {
		c.err.Store(&err)
		c.diedAt.Store(time.Now().UnixNano())
		close(c.dead)
		c.nc.Close()
		c.qmu.Lock()
		q := c.queue
		c.queue = nil
		c.qmu.Unlock()
		derr := c.deathErr()
		for _, cl := range q {
			cl.err = derr
			close(cl.done)
		}
	})
}

func (c *brokerConn) deathErr() error {
	if p := c.err.Load(); p != nil {
		return fmt.Errorf("%w: %s: %w", ErrUpstreamClosed, c.addr, nested(*p))
	}
	return fmt.Errorf("%w: %s", ErrUpstreamClosed, c.addr)
}

// send writes one request. When expectResp is false (acks=0 produce) it
// returns a nil call: nothing is kept, so nothing leaks.
func (c *brokerConn) send(key, ver int16, clientID *string, body []byte, expectResp bool) (*call, error) {
	return c.sendv(key, ver, clientID, [][]byte{body}, expectResp)
}

// sendv writes one request whose body is the concatenation of segs, with
// one writev and without copying the segments. An error wrapping
// errNotSent means the broker cannot have seen the request.
func (c *brokerConn) sendv(key, ver int16, clientID *string, segs [][]byte, expectResp bool) (*call, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.isDead() {
		return nil, fmt.Errorf("%w: %w", errNotSent, nested(c.deathErr()))
	}
	c.corr++
	cl := &call{conn: c, corr: c.corr, key: key, ver: ver, done: make(chan struct{}), start: time.Now()}
	c.buf = framing.AppendRequestHeader(append(c.buf[:0], 0, 0, 0, 0), key, ver, c.corr, clientID, framing.RequestHeaderFlexible(key, ver))
	size := len(c.buf) - 4
	for _, s := range segs {
		size += len(s)
	}
	binary.BigEndian.PutUint32(c.buf, uint32(size))
	// Queued before it is written: the answer may come before Write returns.
	if expectResp && !c.enqueue(cl) {
		return nil, fmt.Errorf("%w: %w", errNotSent, nested(c.deathErr()))
	}
	c.iov = append(append(c.iov[:0], c.buf), segs...)
	bufs := net.Buffers(c.iov)
	_, err := bufs.WriteTo(c.nc)
	clear(c.iov) // drop references to the caller's buffers
	if err != nil {
		// Part of the frame at most reached the broker, which acts only
		// on whole frames: not sent.
		c.die(err)
		return nil, fmt.Errorf("%w: %w", errNotSent, nested(c.deathErr()))
	}
	if !expectResp {
		return nil, nil
	}
	return cl, nil
}

// enqueue adds a call about to be written; false if the connection died.
func (c *brokerConn) enqueue(cl *call) bool {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if c.isDead() {
		return false
	}
	c.queue = append(c.queue, cl)
	if len(c.queue) == 1 {
		c.nc.SetReadDeadline(cl.start.Add(c.stallTimeout))
	}
	return true
}

// answered takes the oldest call off the queue for the response with
// correlation id corr, and moves the read deadline to the next one (none
// while idle: an idle connection may stay open for as long as it lives).
func (c *brokerConn) answered(corr int32) (*call, error) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if len(c.queue) == 0 {
		return nil, fmt.Errorf("%w: correlation id %d", errUnsolicited, corr)
	}
	cl := c.queue[0]
	if cl.corr != corr {
		return nil, fmt.Errorf("%w: correlation id %d, want %d", errCorrelationSkew, corr, cl.corr)
	}
	c.queue[0] = nil
	c.queue = c.queue[1:]
	if len(c.queue) == 0 {
		c.queue = nil
		c.nc.SetReadDeadline(time.Time{})
	} else {
		c.nc.SetReadDeadline(c.queue[0].start.Add(c.stallTimeout))
	}
	return cl, nil
}

func (c *brokerConn) readLoop() {
	br := bufio.NewReaderSize(c.nc, 64<<10)
	for {
		frame, err := framing.ReadFrame(br, 1<<30)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				err = fmt.Errorf("%w (%s): %w", errStalled, c.stallTimeout, err)
			}
			c.die(err)
			return
		}
		if len(frame) < 4 {
			c.die(framing.ErrFrameTooSmall)
			return
		}
		cl, err := c.answered(int32(binary.BigEndian.Uint32(frame)))
		if err != nil {
			c.die(err)
			return
		}
		body := frame[4:]
		if framing.ResponseHeaderFlexible(cl.key, cl.ver) {
			if body, err = framing.SkipTags(body); err != nil {
				c.die(err) // first: settled reads when it died
				cl.err = c.deathErr()
				close(cl.done)
				return
			}
		}
		// A call whose waiter gave up (forward deadline) is answered all
		// the same, in order, and nobody reads it: its connection stays.
		cl.resp = body
		close(cl.done)
	}
}

// settled reports, once cl is answered or its connection died, whether the
// broker answered and when the connection died. It must only be called
// after done closed.
func (cl *call) settled() (answered bool, died time.Time) {
	if cl.err == nil {
		return true, time.Time{}
	}
	return false, time.Unix(0, cl.conn.diedAt.Load())
}

func (cl *call) wait(ctx context.Context) ([]byte, error) {
	// An answer already here wins over a deadline that passed meanwhile
	// (select picks at random): a produce collected late, behind a slower
	// one, must not be called uncertain when it is known.
	select {
	case <-cl.done:
		return cl.resp, cl.err
	default:
	}
	select {
	case <-cl.done:
		return cl.resp, cl.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// upstream is one Kafka cluster as the agent sees it: brokers, partition
// leaders, coordinators, supported versions, and pooled connections.
type upstream struct {
	name      string
	bootstrap []string
	poolSize  int
	dialTO    time.Duration
	// readTO bounds the oldest unanswered request on a client
	// connection's own upstream connection (parked requests, see parks);
	// stallTO the same on a pooled one.
	readTO    time.Duration
	stallTO   time.Duration
	log       *slog.Logger
	onLatency func(cluster string, key int16, d time.Duration, err error)

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
	c      atomic.Pointer[brokerConn]
}

type coordKey struct {
	typ int8
	key string
}

func newUpstream(name string, bootstrap []string, poolSize int, dialTO, readTO time.Duration, log *slog.Logger) *upstream {
	return &upstream{
		name:      name,
		bootstrap: bootstrap,
		poolSize:  poolSize,
		dialTO:    dialTO,
		readTO:    readTO,
		stallTO:   readTO,
		log:       log.With("cluster", name),
		brokers:   map[int32]string{},
		leaders:   map[string][]int32{},
		coords:    map[coordKey]int32{},
		conns:     map[string][]*poolSlot{},
	}
}

func (u *upstream) slot(addr string, idx uint64) *poolSlot {
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
func (u *upstream) conn(ctx context.Context, addr string, idx uint64) (*brokerConn, error) {
	s := u.slot(addr, idx)
	if c := s.c.Load(); c != nil && !c.isDead() {
		return c, nil
	}
	s.dialMu.Lock()
	defer s.dialMu.Unlock()
	if c := s.c.Load(); c != nil && !c.isDead() {
		return c, nil // another request redialed meanwhile
	}
	c, err := dialBroker(ctx, addr, u.dialTO, u.stallTO)
	if err != nil {
		return nil, fmt.Errorf("%w: %s cluster: dialing %s: %w", errNotSent, u.name, addr, err)
	}
	s.c.Store(c)
	return c, nil
}

// sendv writes a request body made of segments to addr on pooled
// connection idx. A request that never reached the broker because its
// connection had died (a broker restart noticed only now) is written once
// more on a fresh connection.
func (u *upstream) sendv(ctx context.Context, addr string, idx uint64, key, ver int16, clientID *string, segs [][]byte, expect bool) (*call, error) {
	var err error
	for range 2 {
		var c *brokerConn
		if c, err = u.conn(ctx, addr, idx); err != nil {
			return nil, err
		}
		var cl *call
		if cl, err = c.sendv(key, ver, clientID, segs, expect); err == nil || !errors.Is(err, errNotSent) {
			return cl, err
		}
	}
	return nil, err
}

// sendvOn is sendv on want, the pooled connection earlier requests went on:
// it writes once, on want only. If want died or the pool moved on from it,
// the request is not sent (errNotSent): on a fresh connection it could
// overtake requests in doubt on want. want nil is plain sendv.
func (u *upstream) sendvOn(ctx context.Context, addr string, idx uint64, want *brokerConn, key, ver int16, clientID *string, segs [][]byte, expect bool) (*call, error) {
	if want == nil {
		return u.sendv(ctx, addr, idx, key, ver, clientID, segs, expect)
	}
	if c := u.slot(addr, idx).c.Load(); c != want {
		return nil, fmt.Errorf("%w: %w: %s", errNotSent, nested(errEarlierInDoubt), addr)
	}
	return want.sendv(key, ver, clientID, segs, expect)
}

// send writes a raw request body to addr on pooled connection idx.
func (u *upstream) send(ctx context.Context, addr string, idx uint64, key, ver int16, clientID *string, body []byte, expect bool) (*call, error) {
	return u.sendv(ctx, addr, idx, key, ver, clientID, [][]byte{body}, expect)
}

// roundTrip sends a typed request to addr and decodes the answer.
func (u *upstream) roundTrip(ctx context.Context, addr string, req kmsg.Request) (kmsg.Response, error) {
	start := time.Now()
	cl, err := u.send(ctx, addr, 0, req.Key(), req.GetVersion(), &agentClientID, req.AppendTo(nil), true)
	if err != nil {
		return nil, err
	}
	body, err := cl.wait(ctx)
	if u.onLatency != nil {
		u.onLatency(u.name, req.Key(), time.Since(start), err)
	}
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

var agentClientID = "baton-agent"

// anyBroker returns the address of a broker to ask cluster-wide questions:
// a known broker if any, else a bootstrap address. Random, to spread load.
// lastClusterID is the cluster id of the last metadata answer, nil before
// one.
func (u *upstream) lastClusterID() *string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.clusterID
}

func (u *upstream) anyBrokers() []string {
	u.mu.RLock()
	addrs := make([]string, 0, len(u.brokers)+len(u.bootstrap))
	for _, a := range u.brokers {
		addrs = append(addrs, a)
	}
	u.mu.RUnlock()
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	return append(addrs, u.bootstrap...)
}

// ask sends req to the first broker that answers.
func (u *upstream) ask(ctx context.Context, req kmsg.Request) (kmsg.Response, string, error) {
	var errs []error
	for _, addr := range u.anyBrokers() {
		resp, err := u.roundTrip(ctx, addr, req)
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
	err := fmt.Errorf("%w in the %s cluster: %w", ErrNoBrokers, u.name, nested(errors.Join(errs...)))
	u.unreachable(err)
	return nil, "", err
}

// version returns the highest version of key that every broker asked so far
// supports and that kmsg knows, capped at max; -1 if none.
func (u *upstream) version(key, max int16) int16 {
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

// loadVersions asks a broker for its ApiVersions (v3, falling back to v0).
func (u *upstream) loadVersions(ctx context.Context) error {
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(3)
	req.ClientSoftwareName = "baton-agent"
	req.ClientSoftwareVersion = "0"
	resp, _, err := u.ask(ctx, req)
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

func (u *upstream) hasVersions() bool {
	u.mu.RLock()
	defer u.mu.RUnlock()
	return u.versions != nil
}

// metadata asks the cluster for topics (nil: all) and caches brokers and
// leaders from the answer.
func (u *upstream) metadata(ctx context.Context, topics []string, allowAuto bool) (*kmsg.MetadataResponse, error) {
	req := kmsg.NewPtrMetadataRequest()
	v := u.version(3, 12)
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
	resp, _, err := u.ask(ctx, req)
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

// leaderAddr returns the address of the leader of topic/partition, asking
// the cluster when the cache does not know it. An error is one the client
// should retry (kerr codes) or a connectivity error.
func (u *upstream) leaderAddr(ctx context.Context, topic string, partition int32) (string, error) {
	if addr, ok := u.cachedLeader(topic, partition); ok {
		return addr, nil
	}
	if _, err := u.metadata(ctx, []string{topic}, false); err != nil {
		return "", err
	}
	if addr, ok := u.cachedLeader(topic, partition); ok {
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

func (u *upstream) cachedLeader(topic string, partition int32) (string, bool) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	ls := u.leaders[topic]
	if partition < 0 || int(partition) >= len(ls) || ls[partition] < 0 {
		return "", false
	}
	addr, ok := u.brokers[ls[partition]]
	return addr, ok
}

// moveLeader records a KIP-951 hint: a broker that is no longer the leader
// of topic/partition named the new one, leader (at addr, or at an address
// the cache knows). It reports whether the hint was usable; if not, the
// caller forgets the topic's leaders and the next request asks the cluster.
func (u *upstream) moveLeader(topic string, partition, leader int32, addr string) bool {
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

// forgetLeader drops a cached leader after the broker said it is not.
func (u *upstream) forgetLeader(topic string) {
	u.mu.Lock()
	delete(u.leaders, topic)
	u.mu.Unlock()
}

// coordinatorAddr finds the coordinator of a group (typ 0) or transactional
// id (typ 1).
func (u *upstream) coordinatorAddr(ctx context.Context, typ int8, key string, fresh bool) (string, error) {
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
	req.SetVersion(max(u.version(10, 3), 1))
	req.CoordinatorKey = key
	req.CoordinatorType = typ
	resp, _, err := u.ask(ctx, req)
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

// controllerAddr asks the cluster for its controller: admin requests go
// there (Kafka forwards them from any broker, kfake does not).
func (u *upstream) controllerAddr(ctx context.Context) (string, error) {
	if _, err := u.metadata(ctx, []string{}, false); err != nil {
		return "", err
	}
	u.mu.RLock()
	defer u.mu.RUnlock()
	if addr, ok := u.brokers[u.controller]; ok {
		return addr, nil
	}
	return "", fmt.Errorf("%w in the %s cluster: controller %d unknown", ErrNoBrokers, u.name, u.controller)
}

func (u *upstream) forgetCoordinator(typ int8, key string) {
	u.mu.Lock()
	delete(u.coords, coordKey{typ, key})
	u.mu.Unlock()
}

func (u *upstream) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, pool := range u.conns {
		for _, s := range pool {
			if c := s.c.Load(); c != nil {
				c.die(errors.New("agent shutting down"))
			}
		}
	}
}
