package agent

import "errors"

// Errors. Every message starts with "agent: "; wrapped errors say where
// (the field, the broker, the frame). Frame errors are framing's
// (agent/internal/framing), those of the connections to the clusters
// upstream's (agent/internal/upstream).
var (
	// ErrBadConfig refuses an option; the message names the field at
	// fault.
	ErrBadConfig = errors.New("agent: bad config")
	// ErrBadRoutes wraps every route file error.
	ErrBadRoutes = errors.New("agent: bad routes file")

	// ErrUnsupportedRequest closes a connection that sent a request the
	// agent never advertised.
	ErrUnsupportedRequest = errors.New("agent: request not supported")
	// errClientGone closes the upstream connections of a client
	// connection that closed.
	errClientGone = errors.New("agent: client connection closed")

	// errShuttingDown closes the upstream connections when the agent
	// stops.
	errShuttingDown = errors.New("agent: shutting down")
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
