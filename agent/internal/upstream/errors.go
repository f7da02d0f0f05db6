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
	// ErrTLS: the TLS handshake with a broker failed (a certificate the
	// CA does not vouch for, a wrong server name, a plaintext listener).
	ErrTLS = errors.New("upstream: TLS handshake failed")
	// ErrAuth: a broker refused the SASL authentication, or it could not
	// run (the mechanism is not enabled there).
	ErrAuth = errors.New("upstream: SASL authentication failed")
	// errSessionEnded closes a connection whose SASL session was about to
	// end, once a fresh one replaced it in the pool.
	errSessionEnded = errors.New("upstream: SASL session lifetime ending: replaced by a new connection")
	// errRetired: the connection is being replaced before its SASL
	// session ends and takes no new requests.
	errRetired = errors.New("upstream: connection retiring before its SASL session ends")
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
