package upstream

import (
	"errors"
	"strings"
	"sync"
	"time"
)

// clusterHealth remembers whether a cluster answered the agent's last
// cluster-wide question, so that losing every broker is said once, at
// WARN, with what to check, and getting one back once, at INFO, however
// many requests fail in between.
type clusterHealth struct {
	mu      sync.Mutex
	reached bool      // some broker answered since the agent started
	lost    time.Time // when no broker answered; zero while reachable
	// startNote says what the agent does until the cluster first answers.
	startNote string
	// forwarded: the connections authenticate with a client's
	// credentials (Config.Forwarded); reachability is logged at DEBUG.
	forwarded bool
}

// unreachable records that no broker of u answered; err says why.
func (u *Cluster) unreachable(err error) {
	h := &u.health
	h.mu.Lock()
	first, never := h.lost.IsZero(), !h.reached
	if first {
		h.lost = time.Now()
	}
	h.mu.Unlock()
	if !first {
		return
	}
	if h.forwarded {
		u.log.Debug(u.name+" cluster not reached with a client's forwarded credentials", "brokers", strings.Join(u.AnyBrokers(), ","), "err", err)
		return
	}
	msg := u.name + " cluster unreachable: no broker answered; " + checkFor(err)
	if never && h.startNote != "" {
		msg += "; " + h.startNote
	}
	u.log.Warn(msg, "brokers", strings.Join(u.AnyBrokers(), ","), "err", err)
}

// checkFor says what to check when err kept every broker from answering.
func checkFor(err error) string {
	switch {
	case errors.Is(err, ErrAuth):
		return "the brokers refused the agent's SASL authentication: check the mechanism (the brokers' sasl.enabled.mechanisms), the user and the password file or variable, or with OAUTHBEARER the token (its file or endpoint, its expiry, what the brokers' validator takes)"
	case errors.Is(err, ErrTLS):
		return "the TLS handshake failed: check that the listener speaks TLS, the CA file, the client certificate and that the broker's certificate names the address dialed"
	}
	return "check that its brokers are up and that this host can reach them (address, port, firewall, advertised listeners, and whether the listener needs TLS or SASL)"
}

// reachable records that broker addr of u answered.
func (u *Cluster) reachable(addr string) {
	h := &u.health
	h.mu.Lock()
	lost, first := h.lost, !h.reached
	h.lost, h.reached = time.Time{}, true
	h.mu.Unlock()
	switch {
	case !lost.IsZero() && h.forwarded:
		u.log.Debug(u.name+" cluster reached again with a client's forwarded credentials", "broker", addr, "after", time.Since(lost).Round(time.Millisecond))
	case !lost.IsZero():
		u.log.Info(u.name+" cluster reachable again", "broker", addr, "after", time.Since(lost).Round(time.Millisecond))
	case first:
		u.log.Debug(u.name+" cluster reached", "broker", addr)
	}
}
