// Package filter owns Baton's Envoy-style Kafka filter chain: the interfaces
// a filter implements over decoded kmsg requests and responses, and the
// Chain that runs them for one client connection. It opens no sockets.
//
// # Contract
//
// A Chain is built per client connection from the listener's Factories, in
// the order the listener lists them. For every request frame the connection
// reads:
//
//   - OnRequest runs on each RequestFilter in chain order, exactly once per
//     request, from one goroutine, in the order the client sent the
//     requests. A filter returns Continue to pass the request on, or
//     StopIteration after it has answered it itself (Exchange.Resp set) or
//     failed it (Exchange.Err set: the connection is closed).
//   - If every filter continued, the chain's Handler (the router) dispatches
//     the request. Dispatch is called in request order too, so a Handler
//     that forwards can keep the client's order on the wire.
//   - OnResponse runs on each ResponseFilter in reverse chain order,
//     starting from the filter that stopped iteration (or from the last one
//     when the Handler answered), exactly once per request that expects a
//     response, from one goroutine, in the order responses are written to
//     the client (which is request order, by correlation id). An acks=0
//     produce request has no response and so no OnResponse call.
//
// A filter MUST NOT keep an Exchange, or any slice of it, after its
// OnResponse returns: the agent reuses the request's buffer.
//
// Requests and responses of one connection may be in flight concurrently,
// but a filter never sees two calls of the same direction at once, so
// per-connection filter state needs no lock unless it is shared between
// the two directions. Factories are shared by every connection and MUST be
// safe for concurrent use.
package filter

import (
	"context"
	"errors"
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
)

// Sentinel errors.
var (
	// ErrNoAnswer means a filter stopped iteration without setting Resp or
	// Err, or a Handler resolved without either.
	ErrNoAnswer = errors.New("filter: exchange ended with neither response nor error")
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
}

// Answered reports whether the exchange has a response or an error.
func (x *Exchange) Answered() bool {
	return x.Resp != nil || x.RawResp != nil || x.Err != nil || x.NoResponse
}

// RequestFilter sees requests on their way in.
type RequestFilter interface {
	OnRequest(ctx context.Context, x *Exchange) Status
}

// ResponseFilter sees responses on their way out.
type ResponseFilter interface {
	OnResponse(ctx context.Context, x *Exchange) Status
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
	// Dispatch starts serving x. It is called in request order, from one
	// goroutine per connection; a Handler that forwards MUST have written
	// the request upstream (or queued it in order) before returning.
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
	// respFrom[i] is how many response filters sit at or before request
	// position i: a request stopped there unwinds from that point.
	respAt  []int
	handler Handler
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

// Started is a request that went through the request side of a chain.
type Started struct {
	X       *Exchange
	pending Pending
	// unwind is how many response filters run, from index unwind-1 down.
	unwind int
}

// Request runs the request side for x and dispatches it unless a filter
// answered. Call it in request order.
func (c *Chain) Request(ctx context.Context, x *Exchange) *Started {
	for i, f := range c.reqs {
		if f.OnRequest(ctx, x) == StopIteration {
			if !x.Answered() {
				x.Err = ErrNoAnswer
			}
			return &Started{X: x, pending: Done{}, unwind: c.respAt[i]}
		}
	}
	return &Started{X: x, pending: c.handler.Dispatch(ctx, x), unwind: len(c.resps)}
}

// Response waits for s's answer and runs the response side, in reverse.
// Call it in the order responses are written.
func (c *Chain) Response(ctx context.Context, s *Started) {
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
