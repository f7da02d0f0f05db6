package agent

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-kafka/baton/bpf"
)

// ByteCounters chooses how client connections' bytes are counted (package
// bpf), overriding bpf.Auto: eBPF when it loads (root, a kernel with BTF),
// else userspace, with an INFO log of why. bpf.EBPF makes New fail when
// eBPF cannot load; bpf.Userspace never tries it.
func ByteCounters(m bpf.Mode) Opt { return optFunc(func(c *config) { c.byteCounters = m }) }

// ConnStat is one open client connection's byte counts, for filters that
// size what a connection may have in flight (Little's law).
type ConnStat struct {
	// ID is the connection's, as in filter.ConnInfo.
	ID uint64
	// ClientID is the client id of the connection's latest request
	// header: "" before its first request or if the client sends none.
	ClientID string
	// Remote is the client's address.
	Remote string
	// Impl is the counters' implementation: bpf.ImplEBPF or
	// bpf.ImplUserspace.
	Impl string
	// Stats: bytes received and sent on the client's socket (TLS records
	// on a TLS listener), and request bytes received and not yet
	// answered. On a TLS listener InFlight also holds the records'
	// overhead of answered requests, a fraction of a percent of what was
	// received.
	bpf.Stats
}

// ConnStats are the byte counts of every open client connection. Each is
// a map lookup in eBPF: call it periodically, not per request.
func (a *Agent) ConnStats() []ConnStat {
	a.tracked.mu.Lock()
	tcs := make([]*trackedConn, 0, len(a.tracked.m))
	for _, tc := range a.tracked.m {
		tcs = append(tcs, tc)
	}
	a.tracked.mu.Unlock()
	out := make([]ConnStat, 0, len(tcs))
	for _, tc := range tcs {
		out = append(out, tc.stat())
	}
	return out
}

// ConnStat is the byte counts of the open client connection id, and
// whether it is open.
func (a *Agent) ConnStat(id uint64) (ConnStat, bool) {
	a.tracked.mu.Lock()
	tc, ok := a.tracked.m[id]
	a.tracked.mu.Unlock()
	if !ok {
		return ConnStat{}, false
	}
	return tc.stat(), true
}

// ByteCountersImpl is the implementation counting connections' bytes:
// bpf.ImplEBPF or bpf.ImplUserspace.
func (a *Agent) ByteCountersImpl() string { return a.counters.Impl() }

// trackedConns are the open client connections' counters by connection id.
type trackedConns struct {
	mu sync.Mutex
	m  map[uint64]*trackedConn
}

// trackedConn is one client connection's counters and client id.
type trackedConn struct {
	conn     bpf.Conn
	id       uint64
	remote   string
	clientID atomic.Pointer[string]
}

func (tc *trackedConn) stat() ConnStat {
	s := ConnStat{ID: tc.id, Remote: tc.remote, Impl: tc.conn.Impl(), Stats: tc.conn.Stats()}
	if p := tc.clientID.Load(); p != nil {
		s.ClientID = *p
	}
	return s
}

// sawClientID keeps a request's client id: a pointer store when it
// changed, a comparison when not (the usual case).
func (tc *trackedConn) sawClientID(id *string) {
	if id == nil {
		return
	}
	if cur := tc.clientID.Load(); cur == nil || *cur != *id {
		tc.clientID.Store(id)
	}
}

// openCounters opens the byte counters of the configured mode and
// reports which in the log and the baton_agent_byte_counters gauge.
func (a *Agent) openCounters() error {
	mode, err := bpf.ParseMode(string(a.cfg.byteCounters))
	if err != nil {
		return fmt.Errorf("%w: byte counters: %w", ErrBadConfig, err)
	}
	c, fellBack, err := bpf.Open(mode)
	if err != nil {
		return fmt.Errorf("%w: byte counters %q: %w; use auto or userspace where eBPF cannot load", ErrBadConfig, mode, err)
	}
	if fellBack != nil {
		a.log.Info("byte counters in userspace: eBPF did not load (fine; eBPF needs root and a kernel with BTF)", "reason", fellBack)
	} else {
		a.log.Info("byte counters", "impl", c.Impl())
	}
	a.counters = c
	a.tracked.m = map[uint64]*trackedConn{}
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "baton_agent_byte_counters",
		Help: "1 for the implementation counting client connections' bytes: ebpf or userspace.",
	}, []string{"impl"})
	g.WithLabelValues(c.Impl()).Set(1)
	return a.cfg.registry.Register(g)
}

// track starts counting a client connection; untrack ends it and closes
// the connection.
func (a *Agent) track(id uint64, nc bpf.Conn, remote string) *trackedConn {
	tc := &trackedConn{conn: nc, id: id, remote: remote}
	a.tracked.mu.Lock()
	a.tracked.m[id] = tc
	a.tracked.mu.Unlock()
	return tc
}

func (a *Agent) untrack(tc *trackedConn) {
	tc.conn.Close()
	a.tracked.mu.Lock()
	delete(a.tracked.m, tc.id)
	a.tracked.mu.Unlock()
}
