// Package filter owns Baton's Envoy-style Kafka filter chain: the interfaces
// a filter implements over decoded kmsg requests and responses, the Chain
// that runs them for one client connection, and the Waker a filter holds a
// request with. It opens no sockets.
//
// # Contract
//
// A Chain is built per client connection from the listener's Factories, in
// the order the listener lists them. For every request frame the connection
// reads:
//
//   - OnRequest runs on each RequestFilter in chain order, in the order the
//     client sent the requests, never two at once. A filter returns
//     Continue to pass the request on, StopIteration after it has answered
//     it itself (Exchange.Resp set) or failed it (Exchange.Err set: the
//     connection is closed), or Hold to stop for now (below). OnRequest
//     runs once per request and filter, and once more each time a request
//     that filter held is woken.
//   - If every filter continued, the chain's Handler (the router) dispatches
//     the request. Dispatch is called in request order too, never two at
//     once, so a Handler that forwards can keep the client's order on the
//     wire.
//   - OnResponse runs on each ResponseFilter in reverse chain order,
//     starting from the filter that stopped iteration (or from the last one
//     when the Handler answered), exactly once per request that expects a
//     response, from one goroutine, in the order responses are written to
//     the client (which is request order, by correlation id). An acks=0
//     produce request has no response written, but its exchange still runs
//     the response side (with NoResponse set), so a filter sees it end.
//
// # Holding a request
//
// A filter that cannot decide yet (no lease, a topic being migrated) holds
// the request, as an Envoy filter returns StopIteration and later calls
// continueDecoding. In OnRequest it calls Exchange.Hold, arms the returned
// Waker (WakeAt, WakeOn, or Wake from its own code) and returns Hold. When
// woken, the chain calls the same filter's OnRequest again, from the chain's
// own goroutine: the filter looks again and returns Continue (iteration goes
// on with the next filter, and eventually the Handler), StopIteration after
// answering or failing the request, or Hold for another wait. A filter
// MUST NOT write the Exchange from a goroutine of its own: only OnRequest
// does, so a held request needs no lock.
//
// A filter that returns Hold MUST have armed a wake-up that comes: a
// request nobody wakes stays held until its connection closes. Its Waker's
// Done channel is closed when the wait ends (woken, or the connection
// closed); a goroutine the filter started for the wait MUST return then.
//
// A held request holds the connection: the requests after it enter the
// chain, in order, only after it has been dispatched or answered. So no
// request is dispatched before one the client sent earlier (Kafka's
// idempotent sequence numbers of a partition require that), and responses,
// written in request order, cannot overtake it either. Chain.Request does
// not block on a held request, so the connection goes on reading (up to
// its own bounds) and sees a client that closes. When the context given
// to Request ends, the held request and those behind it end with
// ErrClosed (the filters a request had not reached never see it), and
// each still runs its response side once.
//
// A filter MUST NOT keep an Exchange, or any slice of it, after its
// OnResponse returns: the agent reuses the request's buffer.
//
// # Produce, partition by partition
//
// A produce request is answered per partition: one partition may go to
// the source, another to the destination, a third be refused. So a
// produce's Exchange carries its Parts, one per partition in request
// order, which filters plan on the request side (the cluster each goes
// to, an answer without sending, replacement record bytes) and the Handler
// carries out: it sends what the plan leaves unanswered and merges the
// plan's answers into the response. What the Handler decides at dispatch
// (a part it could not send, where it sent the others) it writes into the
// Parts before Dispatch returns, so a filter reading them when the
// connection's next request arrives sees it; after dispatch only the
// response-side fields change.
//
// Requests and responses of one connection may be in flight concurrently,
// but a filter never sees two calls of the same direction at once, so
// per-connection filter state needs no lock unless it is shared between
// the two directions (or with a goroutine the filter started for a hold).
// Factories are shared by every connection and MUST be safe for concurrent
// use.
package filter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Status says whether the chain goes on after a filter.
type Status int

const (
	// Continue passes the exchange to the next filter.
	Continue Status = iota
	// StopIteration ends the request side: the filter set Exchange.Resp
	// (an answer) or Exchange.Err (close the connection).
	StopIteration
	// Hold stops the request side for now: the filter took a Waker with
	// Exchange.Hold and armed it. Woken, the filter's OnRequest runs again.
	Hold
)

// Sentinel errors.
var (
	// ErrNoAnswer means a filter stopped iteration without setting Resp or
	// Err, or a Handler resolved without either.
	ErrNoAnswer = errors.New("filter: exchange ended with neither response nor error")
	// ErrNoWaker means a filter returned Hold without calling
	// Exchange.Hold: nothing could ever wake the request.
	ErrNoWaker = errors.New("filter: hold without a waker")
	// ErrBadStatus means a filter returned a Status this package does not
	// define.
	ErrBadStatus = errors.New("filter: unknown status")
	// ErrClosed ends a request that was held, or waiting behind a held
	// one, when its connection closed.
	ErrClosed = errors.New("filter: connection closed while the request was held")
)

// Header is the Kafka request header, as the client sent it.
type Header struct {
	APIKey        int16
	APIVersion    int16
	CorrelationID int32
	ClientID      *string
}

// Exchange is one request and, once known, its response.
type Exchange struct {
	Header Header
	// Req is the decoded request, or nil when the agent does not decode
	// this key or version; then RawReq carries the body as read.
	Req kmsg.Request
	// RawReq is the request body (after the header) as the client sent it.
	// It MUST NOT be modified: it may back Req's byte fields.
	RawReq []byte
	// Received is when the agent finished reading the request.
	Received time.Time

	// Resp is the decoded response, or nil when RawResp carries it.
	Resp kmsg.Response
	// RawResp is a response body forwarded without decoding.
	RawResp []byte
	// NoResponse is set for requests the client expects no answer to
	// (acks=0 produce).
	NoResponse bool
	// Err, when set, closes the client connection after earlier responses
	// are written.
	Err error
	// CloseAfter closes the client connection once this exchange's
	// response is written (a broker answers a failed SASL authentication,
	// then closes).
	CloseAfter bool

	chain *Chain // the chain running the request side, for its goroutine count
	waker *Waker // the current wait, between Hold and its end
	parts []Part // a produce's partitions, built by Parts
}

// Cluster is where a produce partition goes.
type Cluster uint8

// Clusters.
const (
	// Nowhere: the part may not be written now (its topic is MIGRATING,
	// or bound for the source without a lease), or no filter routed it.
	// The Handler answers it with a retriable error, never sends it.
	Nowhere Cluster = iota
	// Source is the cluster producers are moving from.
	Source
	// Destination is the cluster they are moving to.
	Destination
)

func (c Cluster) String() string {
	switch c {
	case Source:
		return "source"
	case Destination:
		return "destination"
	}
	return "nowhere"
}

// Via is where the Handler sent a part: one broker of one cluster, over
// one upstream connection. It is the Handler's own value; filters only
// hand it on and compare it. Its dynamic values MUST be comparable, and
// equal for parts sent the same way.
type Via interface {
	// Cluster is the cluster of the broker.
	Cluster() Cluster
	// Dead reports whether the upstream connection is gone: what was
	// sent on it may or may not have been written.
	Dead() bool
}

// Part is one partition of a produce request. The filters write the plan
// fields in chain order, then the Handler at dispatch; the Handler's
// answer writes Uncertain, read on the response side.
type Part struct {
	Topic     string
	Partition int32
	// Records is the client's record batch. It MUST NOT be modified.
	Records []byte

	// To is the cluster the part goes to.
	To Cluster
	// Via, when set on the request side, is where the Handler MUST send
	// the part: a filter sets it from an earlier part of the same
	// partition that is still outstanding, so the two reach one broker
	// over one connection, in order. The Handler sets it, at dispatch, to
	// where it sent the part.
	Via Via
	// Answered says the part is answered without being sent: with Code,
	// and with Offset when Code is 0 (a batch already written there).
	Answered bool
	Code     int16
	Offset   int64
	// Send, when set, is sent instead of Records: a buffer from
	// internal/bufpool, which the Handler puts back once it was written.
	Send []byte

	// Uncertain says the part was sent (to To) and its outcome is unknown
	// (no answer within the forward deadline, or its connection died):
	// that cluster may have written it.
	Uncertain bool
}

// Answer answers the part with code without sending it.
func (p *Part) Answer(code int16) { p.Answered, p.Code = true, code }

// Parts returns a produce request's partitions in request order (the
// order of its topics, then of each topic's partitions), built on the
// first call; nil for other requests. Filters and the Handler share them.
func (x *Exchange) Parts() []Part {
	if x.parts != nil {
		return x.parts
	}
	req, ok := x.Req.(*kmsg.ProduceRequest)
	if !ok {
		return nil
	}
	n := 0
	for i := range req.Topics {
		n += len(req.Topics[i].Partitions)
	}
	x.parts = make([]Part, 0, n)
	for i := range req.Topics {
		t := &req.Topics[i]
		for j := range t.Partitions {
			p := &t.Partitions[j]
			x.parts = append(x.parts, Part{Topic: t.Topic, Partition: p.Partition, Records: p.Records})
		}
	}
	return x.parts
}

// Answered reports whether the exchange has a response or an error.
func (x *Exchange) Answered() bool {
	return x.Resp != nil || x.RawResp != nil || x.Err != nil || x.NoResponse
}

// Hold returns the Waker of x's next wait; a filter calls it in OnRequest
// before returning Hold. Called again in the same OnRequest it returns the
// same Waker. A Waker taken by a filter that then returns Continue or
// StopIteration ends at once (its Done channel is closed).
func (x *Exchange) Hold() *Waker {
	if x.waker == nil {
		x.waker = &Waker{chain: x.chain, wake: make(chan struct{}), done: make(chan struct{})}
	}
	return x.waker
}

// Waker ends one wait of a held request. Its methods are safe for
// concurrent use, from any goroutine, and do nothing once the wait ended.
type Waker struct {
	chain *Chain
	wake  chan struct{} // closed by Wake
	woken sync.Once
	done  chan struct{} // closed by end

	mu     sync.Mutex
	ended  bool
	timers []*time.Timer
	onDone []func()
}

// Wake ends the wait: the holding filter's OnRequest runs again. Calling
// it more than once, or after the wait ended, does nothing.
func (w *Waker) Wake() { w.woken.Do(func() { close(w.wake) }) }

// WakeAt wakes the request at t, or at once when t has passed. The timer
// is stopped when the wait ends.
func (w *Waker) WakeAt(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ended {
		w.timers = append(w.timers, time.AfterFunc(time.Until(t), w.Wake))
	}
}

// WakeOn wakes the request when ch is closed or receives (a route table
// or lease that says it changed). The goroutine that watches ch returns
// when the wait ends, whether ch fired or not; a nil ch never fires.
func (w *Waker) WakeOn(ch <-chan struct{}) {
	if w.chain != nil {
		w.chain.live.Add(1)
	}
	go func() {
		if w.chain != nil {
			defer w.chain.live.Add(-1)
		}
		select {
		case <-ch:
			w.Wake()
		case <-w.done:
		}
	}()
}

// Done is closed when the wait ends: after Wake, or when the connection
// closed. A goroutine a filter started for the wait MUST return then.
func (w *Waker) Done() <-chan struct{} { return w.done }

// OnDone runs f once when the wait ends (at once if it has), on the
// goroutine that ends it: for what a filter counts while it holds, without
// a goroutine of its own. f MUST NOT block.
func (w *Waker) OnDone(f func()) {
	w.mu.Lock()
	if !w.ended {
		w.onDone = append(w.onDone, f)
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	f()
}

// end ends the wait: timers stop, watchers return, OnDone funcs run.
func (w *Waker) end() {
	w.mu.Lock()
	if w.ended {
		w.mu.Unlock()
		return
	}
	w.ended = true
	for _, t := range w.timers {
		t.Stop()
	}
	fs := w.onDone
	w.timers, w.onDone = nil, nil
	close(w.done)
	w.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// RequestFilter sees requests on their way in.
type RequestFilter interface {
	OnRequest(ctx context.Context, x *Exchange) Status
}

// ResponseFilter sees responses on their way out.
type ResponseFilter interface {
	OnResponse(ctx context.Context, x *Exchange) Status
}

// Gauge counts what a filter holds now (held requests, say); a
// prometheus.Gauge is one. Filters that count take one in their config.
type Gauge interface {
	Inc()
	Dec()
}

// ConnInfo describes the client connection a chain is built for.
type ConnInfo struct {
	ID     uint64
	Remote string
	Local  string
}

// Factory builds a filter for one connection. The filter it returns should
// implement RequestFilter, ResponseFilter or both.
type Factory interface {
	Name() string
	New(ConnInfo) any
}

// Pending is a dispatched request whose answer is not known yet.
type Pending interface {
	// Wait blocks until the exchange is answered or ctx ends, and fills
	// the exchange's Resp, RawResp, NoResponse or Err.
	Wait(ctx context.Context) error
}

// Handler is the terminal of a chain: it answers what no filter answered.
type Handler interface {
	// Dispatch starts serving x. It is called in request order and never
	// twice at once, but not always from the same goroutine: a request
	// resumed after a hold is dispatched from the chain's own. A Handler
	// that forwards MUST have written the request upstream (or queued it
	// in order) before returning.
	Dispatch(ctx context.Context, x *Exchange) Pending
}

// Done is a Pending for an exchange answered at dispatch.
type Done struct{ Err error }

// Wait returns d.Err at once.
func (d Done) Wait(context.Context) error { return d.Err }

var _ Pending = Done{}

// Chain runs one connection's filters.
type Chain struct {
	reqs  []RequestFilter
	resps []ResponseFilter
	// respAt[i] is how many response filters sit at or before request
	// position i: a request stopped there unwinds from that point.
	respAt  []int
	handler Handler

	// While a request is held, holding is true and the requests after it
	// wait in backlog; the chain's goroutine (resume) runs them in order
	// once the held one is through, and clears holding when none is left.
	mu      sync.Mutex
	holding bool
	backlog []*Started

	live atomic.Int32 // goroutines the chain started that have not returned
}

// NewChain builds a chain for one connection from factories, in order.
func NewChain(info ConnInfo, factories []Factory, h Handler) *Chain {
	c := &Chain{handler: h}
	for _, f := range factories {
		fl := f.New(info)
		if rf, ok := fl.(ResponseFilter); ok {
			c.resps = append(c.resps, rf)
		}
		if rq, ok := fl.(RequestFilter); ok {
			c.reqs = append(c.reqs, rq)
			c.respAt = append(c.respAt, len(c.resps))
		}
	}
	return c
}

// Started is a request that entered the request side of a chain.
type Started struct {
	X       *Exchange
	pending Pending
	// unwind is how many response filters run, from index unwind-1 down.
	unwind int
	// at is the request filter holding the exchange, while held.
	at int
	// ready is nil when the request side finished inside Request, else
	// closed once it finished (the request was held, or waited behind a
	// held one); pending and unwind are set then.
	ready chan struct{}
}

// Request runs the request side for x and dispatches it unless a filter
// answered. Call it in request order, from one goroutine. It does not wait
// for a held request: the request, and every later one, finishes its
// request side on the chain's goroutine, and Response waits for that.
func (c *Chain) Request(ctx context.Context, x *Exchange) *Started {
	x.chain = c
	s := &Started{X: x}
	c.mu.Lock()
	if c.holding {
		s.ready = make(chan struct{})
		c.backlog = append(c.backlog, s)
		c.mu.Unlock()
		return s
	}
	c.mu.Unlock()
	if c.run(ctx, s, 0) {
		s.ready = make(chan struct{})
		c.mu.Lock()
		c.holding = true
		c.mu.Unlock()
		c.live.Add(1)
		go c.resume(ctx, s)
	}
	return s
}

// run runs s's request filters from position from, then the Handler. It
// reports whether a filter holds s: then s.at is set and s is not done.
func (c *Chain) run(ctx context.Context, s *Started, from int) (held bool) {
	x := s.X
	for i := from; i < len(c.reqs); i++ {
		st := c.reqs[i].OnRequest(ctx, x)
		if st == Hold && x.waker != nil {
			s.at = i
			return true
		}
		if x.waker != nil { // taken, then not held with: end it now
			x.waker.end()
			x.waker = nil
		}
		switch st {
		case Continue:
			continue
		case StopIteration:
			if !x.Answered() {
				x.Err = ErrNoAnswer
			}
		case Hold:
			x.Err = ErrNoWaker
		default:
			x.Err = fmt.Errorf("%w %d", ErrBadStatus, st)
		}
		s.pending, s.unwind = Done{}, c.respAt[i]
		return false
	}
	s.pending, s.unwind = c.handler.Dispatch(ctx, x), len(c.resps)
	return false
}

// resume finishes held, then the requests that queued behind it, in
// order, each of which may be held in turn. It returns once none is left,
// so a connection has at most one such goroutine at a time.
func (c *Chain) resume(ctx context.Context, held *Started) {
	defer c.live.Add(-1)
	s := held
	for {
		for c.wait(ctx, s) {
		}
		close(s.ready)
		c.mu.Lock()
		if len(c.backlog) == 0 {
			c.holding, c.backlog = false, nil
			c.mu.Unlock()
			return
		}
		s = c.backlog[0]
		c.backlog[0] = nil
		c.backlog = c.backlog[1:]
		c.mu.Unlock()
		if ctx.Err() != nil {
			// The connection is gone: s never reached a filter.
			s.X.Err, s.pending, s.unwind = fmt.Errorf("%w: %w", ErrClosed, ctx.Err()), Done{}, 0
			continue
		}
		c.run(ctx, s, 0) // if s is held too, the loop's top waits for it
	}
}

// wait waits for the held s to be woken or its connection to close, then
// runs s on from the holding filter. It reports whether s is held again.
func (c *Chain) wait(ctx context.Context, s *Started) (heldAgain bool) {
	x := s.X
	if x.waker == nil {
		return false // not held: finished by run
	}
	w := x.waker
	select {
	case <-w.wake:
	case <-ctx.Done():
	}
	w.end()
	x.waker = nil
	if ctx.Err() != nil {
		x.Err, s.pending, s.unwind = fmt.Errorf("%w: %w", ErrClosed, ctx.Err()), Done{}, c.respAt[s.at]
		return false
	}
	return c.run(ctx, s, s.at)
}

// Response waits for s's request side to finish, then for its answer, and
// runs the response side, in reverse. Call it in the order responses are
// written.
func (c *Chain) Response(ctx context.Context, s *Started) {
	if s.ready != nil {
		// Not bounded by ctx: once ctx ends, the chain ends the hold and
		// the requests behind it promptly; until then they may write s.
		<-s.ready
	}
	x := s.X
	if err := s.pending.Wait(ctx); err != nil && x.Err == nil {
		x.Err = err
	}
	if !x.Answered() {
		x.Err = ErrNoAnswer
	}
	for i := s.unwind - 1; i >= 0; i-- {
		if c.resps[i].OnResponse(ctx, x) == StopIteration {
			break
		}
	}
}
