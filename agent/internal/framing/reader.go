package framing

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/baton-kafka/baton/internal/bufpool"
)

// firstChunk is the most a frame's buffer starts with. It then doubles as
// bytes arrive, so a length prefix alone costs at most this much, whatever
// size it declares.
const firstChunk = 64 << 10

// Budget bounds request bytes read from clients but not yet answered: per
// connection and across the agent. Bytes are charged as a frame's buffer
// grows and released when its response is written (or the connection
// ends), so a client that stops reading answers, or a frame that never
// finishes, holds only what it actually sent.
type Budget struct {
	global  *semaphore.Weighted
	perConn int64
	held    atomic.Int64 // across the agent, for the gauge
}

// NewBudget returns a budget of total bytes across the agent and perConn
// bytes per connection. perConn MUST NOT exceed total.
func NewBudget(total, perConn int64) *Budget {
	return &Budget{global: semaphore.NewWeighted(total), perConn: perConn}
}

// Held is how many bytes are charged now, across the agent.
func (b *Budget) Held() int64 { return b.held.Load() }

// ConnBudget is one connection's share of a Budget.
type ConnBudget struct {
	b    *Budget
	conn *semaphore.Weighted
}

// ForConn returns a new connection's share of b.
func (b *Budget) ForConn() *ConnBudget {
	return &ConnBudget{b: b, conn: semaphore.NewWeighted(b.perConn)}
}

// Release gives back n bytes charged to the connection: for a frame from
// Reader.Next, len(frame), once. The caller MUST release each frame's
// bytes, answered or not, or the connection (and, in the end, the agent)
// stops reading.
func (c *ConnBudget) Release(n int64) {
	if n == 0 {
		return
	}
	c.conn.Release(n)
	c.b.global.Release(n)
	c.b.held.Add(-n)
}

// Limits are a Reader's bounds besides its budget.
type Limits struct {
	// MaxFrame is the largest frame size accepted (MaxFrameBytes).
	MaxFrame int32
	// FrameTimeout bounds reading one frame from its first byte.
	FrameTimeout time.Duration
	// IdleTimeout bounds the wait for a frame's first byte.
	IdleTimeout time.Duration
}

// Reader reads request frames from one client connection within the
// agent's bounds: frame size, buffered bytes, the partial-frame deadline
// and the idle deadline. It sets nc's read deadline; only one goroutine
// may call Next.
type Reader struct {
	nc           net.Conn
	br           *bufio.Reader
	budget       *ConnBudget
	maxFrame     int32
	frameTimeout time.Duration
	idleTimeout  time.Duration
}

// NewReader returns a Reader of nc charging budget.
func NewReader(nc net.Conn, budget *ConnBudget, lim Limits) *Reader {
	return &Reader{
		nc: nc, br: bufio.NewReaderSize(nc, 64<<10), budget: budget,
		maxFrame: lim.MaxFrame, frameTimeout: lim.FrameTimeout, idleTimeout: lim.IdleTimeout,
	}
}

// Next reads the next frame (without its size prefix) into a pooled
// buffer, charging its bytes to the budget; the caller MUST Release
// len(frame) once the frame is answered and bufpool.Put it. Waiting
// for the connection's own budget (its earlier requests are being answered)
// does not count towards the frame timeout; waiting for the agent-wide
// budget does, so that frames which together exceed it cannot hold each
// other's space forever.
func (r *Reader) Next(ctx context.Context) ([]byte, error) {
	if r.br.Buffered() == 0 {
		r.nc.SetReadDeadline(time.Now().Add(r.idleTimeout))
		if _, err := r.br.Peek(1); err != nil {
			if isTimeout(err) {
				return nil, fmt.Errorf("%w: no request for %s", ErrIdleTimeout, r.idleTimeout)
			}
			return nil, err
		}
	}
	deadline := time.Now().Add(r.frameTimeout)
	r.nc.SetReadDeadline(deadline)
	var sz [4]byte
	if _, err := io.ReadFull(r.br, sz[:]); err != nil {
		return nil, r.partialErr(err)
	}
	n := int32(binary.BigEndian.Uint32(sz[:]))
	switch {
	case n < 0 || n > r.maxFrame:
		return nil, fmt.Errorf("%w: %d bytes, max %d (MaxFrameBytes, --max-frame-bytes)", ErrFrameTooLarge, uint32(n), r.maxFrame)
	case int64(n) > r.budget.b.perConn:
		return nil, fmt.Errorf("%w: %d bytes, a connection buffers at most %d (ConnBufferedBytes, --conn-buffered-bytes)",
			ErrFrameTooLarge, n, r.budget.b.perConn)
	case n < 8:
		return nil, fmt.Errorf("%w: %d bytes", ErrFrameTooSmall, n)
	}
	var buf []byte
	fail := func(err error) ([]byte, error) {
		r.budget.Release(int64(len(buf)))
		bufpool.Put(buf)
		return nil, err
	}
	for have := 0; have < int(n); {
		if have == len(buf) {
			grown := min(int(n), max(firstChunk, 2*len(buf)))
			more := int64(grown - len(buf))
			waited := time.Now()
			if err := r.budget.conn.Acquire(ctx, more); err != nil {
				return fail(err)
			}
			deadline = deadline.Add(time.Since(waited))
			gctx, cancel := context.WithDeadline(ctx, deadline)
			err := r.budget.b.global.Acquire(gctx, more)
			cancel()
			if err != nil {
				r.budget.conn.Release(more)
				if ctx.Err() == nil {
					err = fmt.Errorf("%w: %d of %d bytes read in %s, waiting for the agent's buffer space (BufferedBytes, --buffered-bytes)",
						ErrFrameTimeout, have, n, r.frameTimeout)
				}
				return fail(err)
			}
			r.budget.b.held.Add(more)
			next := bufpool.Get(grown)
			copy(next, buf[:have])
			bufpool.Put(buf)
			buf = next
			r.nc.SetReadDeadline(deadline)
		}
		m, err := r.br.Read(buf[have:])
		have += m
		if err != nil && have < int(n) {
			if isTimeout(err) {
				err = fmt.Errorf("%w: %d of %d bytes in %s (FrameTimeout, --frame-timeout)", ErrFrameTimeout, have, n, r.frameTimeout)
			}
			return fail(r.partialErr(err))
		}
	}
	return buf, nil
}

// partialErr is err for a frame cut short.
func (r *Reader) partialErr(err error) error {
	switch {
	case errors.Is(err, ErrFrameTimeout):
		return err
	case isTimeout(err):
		return fmt.Errorf("%w: frame not finished in %s (FrameTimeout, --frame-timeout)", ErrFrameTimeout, r.frameTimeout)
	case errors.Is(err, io.EOF):
		return io.ErrUnexpectedEOF
	}
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
