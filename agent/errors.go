package agent

import (
	"errors"
	"strings"
)

// Errors. Every message starts with "agent: "; wrapped errors say where
// (the field, the broker, the frame).
var (
	// ErrBadConfig refuses an option; the message names the field at
	// fault.
	ErrBadConfig = errors.New("agent: bad config")
	// ErrBadRoutes wraps every route file error.
	ErrBadRoutes = errors.New("agent: bad routes file")

	// Frame errors (too large, too small, malformed header, frame and idle
	// timeouts) are in agent/internal/framing.
	// ErrUnsupportedRequest closes a connection that sent a request the
	// agent never advertised.
	ErrUnsupportedRequest = errors.New("agent: request not supported")
	// errClientGone closes the upstream connections of a client
	// connection that closed.
	errClientGone = errors.New("agent: client connection closed")

	// ErrUpstreamClosed: the connection to an upstream broker closed with
	// the request on it; the message names the broker and why.
	ErrUpstreamClosed = errors.New("agent: upstream connection closed")
	// ErrNoBrokers: no broker of a cluster answered.
	ErrNoBrokers = errors.New("agent: no reachable broker")
	// errCorrelationSkew: a broker answered requests out of order.
	errCorrelationSkew = errors.New("agent: upstream answered out of order")
	// errUnsolicited: a broker answered when no request waited.
	errUnsolicited = errors.New("agent: upstream sent a response to no request")
	// errStalled: a broker answered nothing within the stall timeout
	// while requests waited.
	errStalled = errors.New("agent: upstream answered nothing for too long")
	// errNotSent marks a request that never reached the broker whole: the
	// connection was dead before it, or the write failed. A broker acts
	// only on a whole frame, so it may be sent again elsewhere.
	errNotSent = errors.New("agent: request not sent")
	// errEarlierInDoubt: earlier produce requests of the same partitions
	// went on a connection that died, so this one is not sent on another.
	errEarlierInDoubt = errors.New("agent: earlier requests of its partitions are in doubt on a connection that died")
	// errForwardDeadline: a forwarded produce got no answer within the
	// forward deadline.
	errForwardDeadline = errors.New("agent: a forwarded request passed the forward deadline")

	// errPIDAlloc wraps a failure to get a producer id from the
	// destination.
	errPIDAlloc = errors.New("agent: no producer id from the destination")
	// errBeforeStream: a batch whose sequence comes before the first one
	// sent to the destination for its partition under the current
	// mapping (a retry from before an eviction). No destination sequence
	// can hold it; it is refused with OUT_OF_ORDER_SEQUENCE_NUMBER, as
	// the destination would refuse it, instead of being sent there with
	// a sequence wrapped to about 2^31.
	errBeforeStream = errors.New("agent: batch precedes the destination stream of its producer and partition")
	// errNotInSource: the source holds no batch of that producer and
	// sequence in the part of the log searched.
	errNotInSource = errors.New("agent: batch not found in the source")
)

// errPrefix starts every agent error message.
const errPrefix = "agent: "

// nested is err for wrapping in a message that already starts with
// "agent: ": it reads without its own prefix, so that a chain of agent
// errors names the package once ("agent: request not sent: upstream
// connection closed: ..."). errors.Is and errors.As see through it.
func nested(err error) error {
	if err == nil {
		return nil
	}
	return nestedError{err}
}

type nestedError struct{ err error }

func (e nestedError) Error() string { return strings.TrimPrefix(e.err.Error(), errPrefix) }
func (e nestedError) Unwrap() error { return e.err }
