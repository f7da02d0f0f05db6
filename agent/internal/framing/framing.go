// Package framing owns the Kafka wire framing of the agent: reading
// size-prefixed frames (a client's requests within the agent's buffer
// budget and deadlines, see Reader; a broker's responses whole, see
// ReadFrame), splitting a request frame into header and body, and encoding
// request headers. Frames it returns are pooled buffers (package bufpool).
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

	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/semaphore"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/internal/bufpool"
)

// --- Client requests: the Reader and its budget ---

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
	sz           [4]byte // a frame's size, read here: a local would escape
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
	if _, err := io.ReadFull(r.br, r.sz[:]); err != nil {
		return nil, r.partialErr(err)
	}
	n := int32(binary.BigEndian.Uint32(r.sz[:]))
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
			was := deadline
			var err error
			if deadline, err = r.acquire(ctx, more, deadline, have, int(n)); err != nil {
				return fail(err)
			}
			next := bufpool.Get(grown)
			copy(next, buf[:have])
			bufpool.Put(buf)
			buf = next
			if !deadline.Equal(was) { // moved on by a wait for the budget
				r.nc.SetReadDeadline(deadline)
			}
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

// acquire charges more bytes (of a frame of n, have read) to the
// connection's budget, then the agent's, and returns deadline moved on by
// the wait for the connection's own. Space free in both, the common case,
// is taken without a timer or a context.
func (r *Reader) acquire(ctx context.Context, more int64, deadline time.Time, have, n int) (time.Time, error) {
	if r.budget.conn.TryAcquire(more) {
		if r.budget.b.global.TryAcquire(more) {
			r.budget.b.held.Add(more)
			return deadline, nil
		}
	} else {
		waited := time.Now()
		if err := r.budget.conn.Acquire(ctx, more); err != nil {
			return deadline, err
		}
		deadline = deadline.Add(time.Since(waited))
	}
	gctx, cancel := context.WithDeadline(ctx, deadline)
	err := r.budget.b.global.Acquire(gctx, more)
	cancel()
	if err != nil {
		r.budget.conn.Release(more)
		if ctx.Err() == nil {
			err = fmt.Errorf("%w: %d of %d bytes read in %s, waiting for the agent's buffer space (BufferedBytes, --buffered-bytes)",
				ErrFrameTimeout, have, n, r.frameTimeout)
		}
		return deadline, err
	}
	r.budget.b.held.Add(more)
	return deadline, nil
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

// --- Headers, and broker responses ---

// ReadFrame reads one size-prefixed frame of at most max bytes into a
// pooled buffer, which the caller MUST bufpool.Put when done. It allocates
// the declared size at once, so it is only for upstream brokers'
// responses; client requests go through a Reader.
func ReadFrame(r io.Reader, max int32) ([]byte, error) {
	var sz [4]byte
	if _, err := io.ReadFull(r, sz[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(sz[:]))
	switch {
	case n < 0 || n > max:
		return nil, fmt.Errorf("%w: %d bytes, max %d", ErrFrameTooLarge, uint32(n), max)
	case n < 8:
		return nil, fmt.Errorf("%w: %d bytes", ErrFrameTooSmall, n)
	}
	buf := bufpool.Get(int(n))
	if _, err := io.ReadFull(r, buf); err != nil {
		bufpool.Put(buf)
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// ParseRequest splits a request frame (without its size prefix) into
// header and body and decodes the body when kmsg knows the key and
// version. A nil Req with a nil error means the frame is well formed but
// the agent does not decode it. The Exchange's RawReq and the decoded
// request's byte fields (a produce's records) point into frame, which the
// caller MUST NOT reuse while the Exchange is in use; frame itself is not
// modified.
func ParseRequest(frame []byte) (*filter.Exchange, error) {
	if len(frame) < 8 {
		return nil, ErrFrameTooSmall
	}
	h := filter.Header{
		APIKey:        int16(binary.BigEndian.Uint16(frame[0:])),
		APIVersion:    int16(binary.BigEndian.Uint16(frame[2:])),
		CorrelationID: int32(binary.BigEndian.Uint32(frame[4:])),
	}
	rest := frame[8:]
	// Every request header since v1 carries a nullable client id.
	if len(rest) < 2 {
		return nil, fmt.Errorf("%w: no client id", ErrBadHeader)
	}
	idLen := int16(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	if idLen >= 0 {
		if int(idLen) > len(rest) {
			return nil, fmt.Errorf("%w: client id of %d bytes in %d", ErrBadHeader, idLen, len(rest))
		}
		id := string(rest[:idLen])
		h.ClientID = &id
		rest = rest[idLen:]
	} else if idLen != -1 {
		return nil, fmt.Errorf("%w: client id length %d", ErrBadHeader, idLen)
	}
	x := &filter.Exchange{Header: h}
	req := kmsg.RequestForKey(h.APIKey)
	if req == nil || h.APIVersion < 0 || h.APIVersion > req.MaxVersion() {
		x.RawReq = rest
		return x, nil
	}
	req.SetVersion(h.APIVersion)
	if req.IsFlexible() {
		// Request header v2 adds tagged fields, which no request uses yet.
		var err error
		if rest, err = SkipTags(rest); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadHeader, err)
		}
	}
	x.RawReq = rest
	if err := req.ReadFrom(rest); err != nil {
		return nil, fmt.Errorf("decoding %s v%d: %w", kmsg.NameForKey(h.APIKey), h.APIVersion, err)
	}
	x.Req = req
	return x, nil
}

// SkipTags skips the tagged-field section at the start of b (a flexible
// header's) and returns what follows it.
func SkipTags(b []byte) ([]byte, error) {
	n, b, err := uvarint(b)
	if err != nil {
		return nil, err
	}
	for i := uint64(0); i < n; i++ {
		if _, b, err = uvarint(b); err != nil { // tag
			return nil, err
		}
		var size uint64
		if size, b, err = uvarint(b); err != nil {
			return nil, err
		}
		if size > uint64(len(b)) {
			return nil, errors.New("tagged field past the end")
		}
		b = b[size:]
	}
	return b, nil
}

func uvarint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, errors.New("bad uvarint")
	}
	return v, b[n:], nil
}

// AppendRequestHeader appends a request header to dst: v1, or v2 (with an
// empty tagged-field section) when flexible, which MUST be
// RequestHeaderFlexible(key, version) for a broker to read it.
func AppendRequestHeader(dst []byte, key, version int16, corr int32, clientID *string, flexible bool) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(key))
	dst = binary.BigEndian.AppendUint16(dst, uint16(version))
	dst = binary.BigEndian.AppendUint32(dst, uint32(corr))
	if clientID == nil {
		dst = binary.BigEndian.AppendUint16(dst, 0xffff)
	} else {
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(*clientID)))
		dst = append(dst, *clientID...)
	}
	if flexible {
		dst = append(dst, 0) // no tagged fields
	}
	return dst
}

// ResponseHeaderFlexible says whether a response to key at version carries
// header v1 (tagged fields). ApiVersions responses never do, so that a
// client can read them before it knows what the broker supports.
func ResponseHeaderFlexible(key, version int16) bool {
	if key == 18 {
		return false
	}
	req := kmsg.RequestForKey(key)
	if req == nil {
		return false
	}
	req.SetVersion(version)
	return req.IsFlexible()
}

// RequestHeaderFlexible says whether requests of key at version use
// flexible encoding, and so request header v2.
func RequestHeaderFlexible(key, version int16) bool {
	req := kmsg.RequestForKey(key)
	if req == nil {
		return false
	}
	req.SetVersion(version)
	return req.IsFlexible()
}
