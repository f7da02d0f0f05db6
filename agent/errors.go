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
	// errCloseAfter closes a connection after an answer that ends it (a
	// failed SASL authentication).
	errCloseAfter = errors.New("agent: connection closed after its last answer")
	// errClientGone closes the upstream connections of a client
	// connection that closed.
	errClientGone = errors.New("agent: client connection closed")

	// errShuttingDown closes the upstream connections when the agent
	// stops.
	errShuttingDown = errors.New("agent: shutting down")
	// errForwardDeadline: a forwarded produce got no answer within the
	// forward deadline.
	errForwardDeadline = errors.New("agent: a forwarded request passed the forward deadline")
)

// errPrefix starts every agent error message.
const errPrefix = "agent: "
