//go:build linux && (386 || amd64)

package bpf

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// MaxConns is how many connections the eBPF counters track at once across
// the process (the map's size: about 100 bytes each in the kernel). Past
// it a connection is counted in userspace.
const MaxConns = 16384

// loaded is the process's one copy of the programs and map: every
// Counters of the process shares it (cookies are unique per boot), so a
// process with several agents pays one lookup per send or receive, not
// one per agent.
var loaded struct {
	mu    sync.Mutex
	refs  int
	objs  countersObjects
	links []link.Link
}

// NewEBPF loads and attaches the eBPF counters, or says why it could not
// (wrapping ErrLoad). Close releases them.
func NewEBPF() (Counters, error) {
	loaded.mu.Lock()
	defer loaded.mu.Unlock()
	if loaded.refs == 0 {
		if err := load(); err != nil {
			if errors.Is(err, os.ErrPermission) {
				return nil, fmt.Errorf("%w: not permitted (needs root, or CAP_BPF and CAP_PERFMON): %w", ErrLoad, err)
			}
			return nil, fmt.Errorf("%w: %w", ErrLoad, err)
		}
	}
	loaded.refs++
	return &ebpfCounters{conns: loaded.objs.Conns}, nil
}

func load() error {
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; later ones
	// to the cgroup, and this does nothing. Its failure (not root) is not
	// returned: the load then fails with the reason that matters.
	_ = rlimit.RemoveMemlock()
	spec, err := loadCounters()
	if err != nil {
		return err
	}
	spec.Maps[countersMapConns].MaxEntries = MaxConns
	var objs countersObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return err
	}
	var links []link.Link
	for _, p := range []*ebpf.Program{objs.CountRecv, objs.CountSend} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			for _, l := range links {
				l.Close()
			}
			objs.Close()
			return err
		}
		links = append(links, l)
	}
	loaded.objs, loaded.links = objs, links
	return nil
}

func release() error {
	loaded.mu.Lock()
	defer loaded.mu.Unlock()
	if loaded.refs--; loaded.refs > 0 {
		return nil
	}
	var errs []error
	for _, l := range loaded.links {
		errs = append(errs, l.Close())
	}
	errs = append(errs, loaded.objs.Close())
	loaded.objs, loaded.links = countersObjects{}, nil
	return errors.Join(errs...)
}

type ebpfCounters struct {
	conns *ebpf.Map
	once  sync.Once
}

var _ Counters = (*ebpfCounters)(nil)

func (e *ebpfCounters) Impl() string { return ImplEBPF }

func (e *ebpfCounters) Close() error {
	var err error
	e.once.Do(func() { err = release() })
	return err
}

func (e *ebpfCounters) Track(c net.Conn) Conn {
	cookie, err := socketCookie(c)
	if err == nil {
		err = e.conns.Update(cookie, countersCounts{}, ebpf.UpdateAny)
	}
	if err != nil {
		return &userConn{Conn: c}
	}
	return &ebpfConn{Conn: c, conns: e.conns, cookie: cookie}
}

// socketCookie is the kernel's id of the socket under c: what
// bpf_get_socket_cookie returns for it in the programs.
func socketCookie(c net.Conn) (uint64, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, fmt.Errorf("%T has no socket", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cookie uint64
	var serr error
	if err := rc.Control(func(fd uintptr) {
		cookie, serr = unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_COOKIE)
	}); err != nil {
		return 0, err
	}
	return cookie, serr
}

// ebpfConn is a connection the programs count. Read and Write are the
// connection's own.
type ebpfConn struct {
	net.Conn
	conns    *ebpf.Map
	cookie   uint64
	answered atomic.Uint64

	mu     sync.Mutex
	closed bool
	final  countersCounts // the counts when it closed
}

var _ Conn = (*ebpfConn)(nil)

func (c *ebpfConn) counts() countersCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.final
	}
	var v countersCounts
	c.conns.Lookup(c.cookie, &v) // fails only if the map was released: zeros
	return v
}

func (c *ebpfConn) Stats() Stats {
	a := c.answered.Load()
	v := c.counts()
	return Stats{Received: v.Received, Sent: v.Sent, InFlight: inFlight(v.Received, a)}
}

func (c *ebpfConn) Answered(n int) {
	if n > 0 {
		c.answered.Add(uint64(n))
	}
}

func (c *ebpfConn) Impl() string { return ImplEBPF }

// Close closes the connection, then keeps its counts and drops it from
// the map: after close nothing more moves on the socket.
func (c *ebpfConn) Close() error {
	err := c.Conn.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.conns.Lookup(c.cookie, &c.final)
		c.conns.Delete(c.cookie)
		c.closed = true
	}
	return err
}
