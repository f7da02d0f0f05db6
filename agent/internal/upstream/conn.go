package upstream

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-kafka/baton/agent/internal/framing"
	"github.com/baton-kafka/baton/internal/bufpool"
	"github.com/baton-kafka/baton/internal/errprefix"
)

// Conn is one pipelined connection to one broker: requests are written in
// call order and answered in the same order, per the protocol. It is safe
// for concurrent use.
//
// It reads all the time, not only while a request waits: a broker that
// restarts or resets the connection while it idles is noticed at once, so
// the next request redials instead of being written into a dead socket
// (where its outcome would be unknown).
type Conn struct {
	addr string
	nc   net.Conn
	// stallTimeout bounds how long the oldest request may wait for its
	// answer before the connection is given up (a hung broker): the read
	// deadline follows the oldest outstanding request.
	stallTimeout time.Duration

	wmu    sync.Mutex
	corr   int32
	buf    []byte
	iov    [][]byte
	writev bool // nc writes a frame's segments with one writev (TCP, not TLS)

	qmu   sync.Mutex
	queue []*Call // written, unanswered, in write order

	// authExpires is when the broker ends the SASL session (KIP-368),
	// retireAt when the pool stops handing the connection out; zero if the
	// session never ends. Set before the connection serves.
	authExpires, retireAt time.Time
	// retiring: no longer handed out by the pool; closed once its last
	// request is answered, or at authExpires.
	retiring atomic.Bool

	dead   chan struct{}
	once   sync.Once
	err    atomic.Pointer[error]
	diedAt atomic.Int64 // unix nanoseconds
}

// Call is one request written on a Conn, waiting for its answer.
type Call struct {
	conn  *Conn
	corr  int32
	key   int16
	ver   int16
	done  chan struct{}
	resp  []byte
	err   error
	start time.Time // when it was written upstream
}

// dial connects to addr and secures the connection (TLS, SASL) before it
// is returned; dialTimeout bounds all of it.
func dial(ctx context.Context, addr string, dialTimeout, stallTimeout time.Duration, sec Security) (*Conn, error) {
	if dialTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, dialTimeout)
		defer cancel()
	}
	d := net.Dialer{KeepAlive: 30 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if nc, err = sec.secure(ctx, nc, addr); err != nil {
		return nil, err
	}
	_, tcp := nc.(*net.TCPConn)
	c := &Conn{
		addr:         addr,
		nc:           nc,
		writev:       tcp,
		stallTimeout: stallTimeout,
		dead:         make(chan struct{}),
	}
	go c.readLoop()
	if err := sec.authenticate(ctx, c); err != nil {
		c.die(err)
		return nil, err
	}
	return c, nil
}

// Addr is the broker's address.
func (c *Conn) Addr() string { return c.addr }

// Dead says whether the connection died (closed by either side, a write
// failed, or the broker answered wrong or not at all): a request written
// on it now would not be sent.
func (c *Conn) Dead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

// Close closes the connection and fails every request still waiting on it
// with ErrConnClosed wrapping cause. Requests already answered keep their
// answer.
func (c *Conn) Close(cause error) { c.die(cause) }

// die closes the connection and fails every request still waiting on it.
func (c *Conn) die(err error) {
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

func (c *Conn) deathErr() error {
	if p := c.err.Load(); p != nil {
		return fmt.Errorf("%w: %s: %w", ErrConnClosed, c.addr, errprefix.Nested(errPrefix, *p))
	}
	return fmt.Errorf("%w: %s", ErrConnClosed, c.addr)
}

// Send writes one request of key at version ver with body, under a header
// naming clientID. When expectResp is false (acks=0 produce) it returns a
// nil Call: nothing is kept, so nothing leaks. An error wrapping
// ErrNotSent means the broker cannot have seen the request; after any
// other error it may have. Send does not keep body.
func (c *Conn) Send(key, ver int16, clientID *string, body []byte, expectResp bool) (*Call, error) {
	return c.sendv(key, ver, clientID, [][]byte{body}, expectResp, false)
}

// sendv writes one request whose body is the concatenation of segs, with
// one system call (see write). An error wrapping
// ErrNotSent means the broker cannot have seen the request.
//
// A retiring connection (replaced before its SASL session ends) takes only
// pinned requests (see retire), until the session ends; others are not
// sent, and the pool sends them on the connection that replaced it.
func (c *Conn) sendv(key, ver int16, clientID *string, segs [][]byte, expectResp, pinned bool) (*Call, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.Dead() {
		return nil, fmt.Errorf("%w: %w", ErrNotSent, errprefix.Nested(errPrefix, c.deathErr()))
	}
	if !expectResp && !c.takes(pinned, time.Now()) {
		return nil, fmt.Errorf("%w: %s: %w", ErrNotSent, c.addr, errRetired)
	}
	c.corr++
	cl := &Call{conn: c, corr: c.corr, key: key, ver: ver, done: make(chan struct{}), start: time.Now()}
	c.buf = framing.AppendRequestHeader(append(c.buf[:0], 0, 0, 0, 0), key, ver, c.corr, clientID, framing.RequestHeaderFlexible(key, ver))
	size := len(c.buf) - 4
	for _, s := range segs {
		size += len(s)
	}
	binary.BigEndian.PutUint32(c.buf, uint32(size))
	// Queued before it is written: the answer may come before Write returns.
	if expectResp {
		if err := c.enqueue(cl, pinned); err != nil {
			return nil, err
		}
	}
	err := c.write(segs, size+4)
	if err != nil {
		// Part of the frame at most reached the broker, which acts only
		// on whole frames: not sent.
		c.die(err)
		return nil, fmt.Errorf("%w: %w", ErrNotSent, errprefix.Nested(errPrefix, c.deathErr()))
	}
	if !expectResp {
		return nil, nil
	}
	return cl, nil
}

// write writes c.buf then segs, n bytes in all, with one system call on a
// TCP connection (writev, the segments not copied). On any other (TLS) a
// Write per segment would be a record and a system call each, the header
// alone in one of 30-odd bytes: the frame is copied into one pooled buffer
// and written at once, in records of the most TLS allows.
func (c *Conn) write(segs [][]byte, n int) error {
	if c.writev {
		c.iov = append(append(c.iov[:0], c.buf), segs...)
		bufs := net.Buffers(c.iov)
		_, err := bufs.WriteTo(c.nc)
		clear(c.iov) // drop references to the caller's buffers
		return err
	}
	frame := append(bufpool.Get(n)[:0], c.buf...)
	for _, s := range segs {
		frame = append(frame, s...)
	}
	_, err := c.nc.Write(frame)
	bufpool.Put(frame)
	return err
}

// Expiring says whether c should no longer take new requests because its
// SASL session ends soon: whoever hands it out dials a replacement and
// retires c.
func (c *Conn) Expiring(now time.Time) bool {
	return !c.retireAt.IsZero() && !now.Before(c.retireAt)
}

// usableUntil says whether c can still be written at now: alive, and its
// SASL session (if it ends) not over.
func (c *Conn) usableUntil(now time.Time) bool {
	return !c.Dead() && (c.authExpires.IsZero() || now.Before(c.authExpires))
}

// takes says whether c accepts a request now: any while not retiring; once
// retiring, only pinned ones (a partition's next request behind those
// outstanding on c), until the session ends.
func (c *Conn) takes(pinned bool, now time.Time) bool {
	return !c.retiring.Load() || (pinned && c.usableUntil(now))
}

// Retire ends c gracefully once a new connection replaced it: the requests
// on it are answered, pinned ones may still join them until its SASL
// session ends, then it closes. It is not closed at the session's end
// with requests on it: a broker answers what it received before the end
// and closes the connection only when a request comes after it (Kafka's
// "Disconnecting expired channel"), which takes() prevents. Retiring twice
// does nothing.
func (c *Conn) Retire() {
	c.qmu.Lock()
	if c.retiring.Swap(true) {
		c.qmu.Unlock()
		return
	}
	idle := len(c.queue) == 0
	c.qmu.Unlock()
	if idle {
		c.closeIfIdle()
	}
}

// closeIfIdle closes a retiring c if nothing waits on it. It holds the
// write lock, so no request is cut half written.
func (c *Conn) closeIfIdle() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.qmu.Lock()
	idle := len(c.queue) == 0
	c.qmu.Unlock()
	if idle {
		c.die(errSessionEnded)
	}
}

// enqueue adds a call about to be written; ErrNotSent if c died or no
// longer takes it (retiring).
func (c *Conn) enqueue(cl *Call, pinned bool) error {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if c.Dead() {
		return fmt.Errorf("%w: %w", ErrNotSent, errprefix.Nested(errPrefix, c.deathErr()))
	}
	if !c.takes(pinned, time.Now()) {
		return fmt.Errorf("%w: %s: %w", ErrNotSent, c.addr, errRetired)
	}
	c.queue = append(c.queue, cl)
	if len(c.queue) == 1 {
		c.nc.SetReadDeadline(cl.start.Add(c.stallTimeout))
	}
	return nil
}

// answered takes the oldest call off the queue for the response with
// correlation id corr, and moves the read deadline to the next one (none
// while idle: an idle connection may stay open for as long as it lives).
func (c *Conn) answered(corr int32) (*Call, error) {
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
		if c.retiring.Load() {
			go c.closeIfIdle() // not under qmu, which it takes
		}
	} else {
		c.nc.SetReadDeadline(c.queue[0].start.Add(c.stallTimeout))
	}
	return cl, nil
}

func (c *Conn) readLoop() {
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

// Conn is the connection cl was written on.
func (cl *Call) Conn() *Conn { return cl.conn }

// Start is when cl was written upstream: deadlines on its answer (the
// forward deadline) count from here.
func (cl *Call) Start() time.Time { return cl.start }

// Done is closed once cl is answered or its connection died.
func (cl *Call) Done() <-chan struct{} { return cl.done }

// Settled reports, once cl is answered or its connection died, whether the
// broker answered and when the connection died. It MUST only be called
// after Done is closed.
func (cl *Call) Settled() (answered bool, died time.Time) {
	if cl.err == nil {
		return true, time.Time{}
	}
	return false, time.Unix(0, cl.conn.diedAt.Load())
}

// WaitUntil is Wait that also gives up at deadline, with
// context.DeadlineExceeded, on t: a timer of the caller's, which it stops
// and may use again for its next call, so that a wait costs no timer or
// context of its own. t MUST NOT be used by two waits at once.
func (cl *Call) WaitUntil(ctx context.Context, deadline time.Time, t *time.Timer) ([]byte, error) {
	select {
	case <-cl.done:
		return cl.resp, cl.err
	default:
	}
	t.Reset(time.Until(deadline))
	defer t.Stop()
	for {
		select {
		case <-cl.done:
			return cl.resp, cl.err
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			if d := time.Until(deadline); d > 0 {
				// An earlier wait's fire, left in t.C by Stop where timer
				// channels are asynchronous (a main module before Go
				// 1.23, GODEBUG asynctimerchan=1): not this call's.
				t.Reset(d)
				continue
			}
			// The answer may have come at the deadline too: it wins.
			select {
			case <-cl.done:
				return cl.resp, cl.err
			default:
			}
			return nil, context.DeadlineExceeded
		}
	}
}

// Wait waits for cl's answer: the response body after its header, or an
// error wrapping ErrConnClosed if the connection died first (the broker
// may or may not have acted on the request), or ctx's error if ctx ends
// first. A Call given up on stays on its connection (see readLoop), so
// its answer, when it comes, is read and dropped in order.
func (cl *Call) Wait(ctx context.Context) ([]byte, error) {
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
