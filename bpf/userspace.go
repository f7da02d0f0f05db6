package bpf

import (
	"net"
	"sync/atomic"
)

// NewUserspace returns counters that wrap each connection and count what
// its Read and Write move. They work everywhere, at the cost of two
// atomic adds per Read or Write.
func NewUserspace() Counters { return userspace{} }

type userspace struct{}

var _ Counters = userspace{}

func (userspace) Track(c net.Conn) Conn { return &userConn{Conn: c} }
func (userspace) Impl() string          { return ImplUserspace }
func (userspace) Close() error          { return nil }

// userConn counts the bytes its Read and Write return.
type userConn struct {
	net.Conn
	received, sent, answered atomic.Uint64
}

var _ Conn = (*userConn)(nil)

func (c *userConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.received.Add(uint64(n))
	}
	return n, err
}

func (c *userConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.sent.Add(uint64(n))
	}
	return n, err
}

func (c *userConn) Stats() Stats {
	// answered first: a request is answered only after it was received,
	// so reading received second cannot see less than answered.
	a := c.answered.Load()
	r := c.received.Load()
	return Stats{Received: r, Sent: c.sent.Load(), InFlight: inFlight(r, a)}
}

func (c *userConn) Answered(n int) {
	if n > 0 {
		c.answered.Add(uint64(n))
	}
}

func (c *userConn) Impl() string { return ImplUserspace }
