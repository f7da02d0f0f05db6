package upstream

import "errors"

// Errors. Every message starts with "upstream: "; wrapped errors say where
// (the cluster, the broker) and why.
var (
	// ErrConnClosed: the connection to a broker closed with the request
	// on it; the message names the broker and why. The broker may have
	// acted on the request.
	ErrConnClosed = errors.New("upstream: connection closed")
	// ErrNoBrokers: no broker of a cluster answered.
	ErrNoBrokers = errors.New("upstream: no reachable broker")
	// ErrNotSent marks a request that never reached the broker whole: the
	// connection was dead before it, or the write failed. A broker acts
	// only on a whole frame, so it may be sent again elsewhere.
	ErrNotSent = errors.New("upstream: request not sent")
	// errCorrelationSkew: a broker answered requests out of order.
	errCorrelationSkew = errors.New("upstream: broker answered out of order")
	// errUnsolicited: a broker answered when no request waited.
	errUnsolicited = errors.New("upstream: broker sent a response to no request")
	// errStalled: a broker answered nothing within the stall timeout
	// while requests waited.
	errStalled = errors.New("upstream: broker answered nothing for too long")
	// errEarlierInDoubt: earlier produce requests of the same partitions
	// went on a connection that died, so this one is not sent on another.
	errEarlierInDoubt = errors.New("upstream: earlier requests of its partitions are in doubt on a connection that died")
)

// errPrefix starts every upstream error message.
const errPrefix = "upstream: "
