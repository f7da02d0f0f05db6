// Package sasl owns SASL authentication of client connections: a request
// filter that answers SaslHandshake and SaslAuthenticate itself, as a
// broker's SASL listener does, with the Mechanisms it is given, and keeps
// every other request off a connection until it has authenticated.
//
// Like a broker (KIP-43, KIP-152, KIP-368):
//
//   - Before authentication only ApiVersions, SaslHandshake and then
//     SaslAuthenticate may come; anything else closes the connection.
//   - SaslHandshake names a mechanism; one not enabled is answered
//     UNSUPPORTED_SASL_MECHANISM with the enabled ones, then the
//     connection closes. Only version 1 (authentication in
//     SaslAuthenticate requests) is served: version 0's raw tokens are
//     refused. (The agent advertises versions 0 to 1, as Kafka does:
//     librdkafka uses SASL only when version 0 is in the range, and sends
//     version 1 once SaslAuthenticate is advertised.)
//   - SaslAuthenticate carries the mechanism's messages. A refusal is
//     answered SASL_AUTHENTICATION_FAILED, then the connection closes.
//   - Success is answered with the session's lifetime (version 1 and
//     later): the shorter of MaxLifetime and the credential's own expiry
//     (a token's). Before it ends the client authenticates again on the
//     same connection, with the same mechanism and principal; a request
//     after it ends, other than that, closes the connection, as it does
//     for a client too old to re-authenticate.
//
// What a principal may do upstream is the Mechanism's business: the agent's
// mechanisms bind the connection to upstream connections that authenticate
// as the client, or as the agent's own identity.
package sasl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
)

// Sentinel errors. Every message starts with "sasl: ".
var (
	// ErrBadConfig refuses a Config, naming the field at fault.
	ErrBadConfig = errors.New("sasl: bad config")
	// ErrUnauthenticated closes a connection that sent a request other
	// than ApiVersions, SaslHandshake or SaslAuthenticate before it
	// authenticated.
	ErrUnauthenticated = errors.New("sasl: request before SASL authentication")
	// ErrExpired closes a connection whose session ended without the
	// client authenticating again.
	ErrExpired = errors.New("sasl: session expired without re-authentication")
	// ErrIllegalState closes a connection that broke the exchange's order
	// (SaslAuthenticate without a handshake, a handshake of version 0).
	ErrIllegalState = errors.New("sasl: request out of the authentication's order")
	// ErrRefused is what a Conversation returns (wrapped) for credentials
	// it refuses; its message goes to the client.
	ErrRefused = errors.New("sasl: authentication refused")
)

// Identity is who a connection authenticated as.
type Identity struct {
	// Principal is the Kafka principal, e.g. "User:alice".
	Principal string
	// Expires, if set, is when the credential itself stops being valid
	// (a token's expiry): the session ends then at the latest.
	Expires time.Time
}

// Conversation is one authentication in progress, server side.
type Conversation interface {
	// Step takes the client's next message and returns the answer. When
	// done, the client is authenticated as id. An error refuses the
	// client (wrap ErrRefused with what the client may be told); the
	// connection then closes.
	Step(ctx context.Context, msg []byte) (reply []byte, done bool, id Identity, err error)
}

// Mechanism is one enabled SASL mechanism.
type Mechanism interface {
	// Name is the mechanism's name, as clients ask for it ("PLAIN").
	Name() string
	// Start begins an authentication on the connection info describes.
	// ctx is the connection's: a mechanism may bind what it learns to it.
	Start(ctx context.Context, info filter.ConnInfo) Conversation
}

// Counter counts events; a prometheus.Counter is one.
type Counter interface{ Inc() }

// Config configures the filter.
type Config struct {
	// Mechanisms are the enabled mechanisms; at least one is required.
	Mechanisms []Mechanism
	// MaxLifetime bounds a session (told to clients of SaslAuthenticate
	// v1 and later, who authenticate again before it ends); 0: sessions
	// end only with their credential's expiry.
	MaxLifetime time.Duration
	// Failures, if set, counts refused authentications.
	Failures Counter
	// Log gets one WARN per refused authentication (default: discarded).
	Log *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Factory builds the filter per connection.
type Factory struct {
	cfg   Config
	names []string
	// lastWarn (unix nanoseconds) spaces the WARNs of refusals: a client
	// with a wrong password reconnects and fails again every second.
	lastWarn atomic.Int64
}

// warnEvery spaces the WARNs of refused authentications; each is counted.
const warnEvery = time.Minute

var (
	_ filter.Factory       = (*Factory)(nil)
	_ filter.RequestFilter = (*conn)(nil)
)

// New returns the filter's factory.
func New(cfg Config) (*Factory, error) {
	if len(cfg.Mechanisms) == 0 {
		return nil, fmt.Errorf("%w: Mechanisms: at least one is required", ErrBadConfig)
	}
	if cfg.MaxLifetime < 0 {
		return nil, fmt.Errorf("%w: MaxLifetime %v is negative", ErrBadConfig, cfg.MaxLifetime)
	}
	f := &Factory{cfg: cfg}
	for i, m := range cfg.Mechanisms {
		if m == nil || m.Name() == "" {
			return nil, fmt.Errorf("%w: Mechanisms[%d]: unnamed", ErrBadConfig, i)
		}
		if slices.Contains(f.names, m.Name()) {
			return nil, fmt.Errorf("%w: Mechanisms[%d]: %s listed twice", ErrBadConfig, i, m.Name())
		}
		f.names = append(f.names, m.Name())
	}
	if f.cfg.Log == nil {
		f.cfg.Log = slog.New(slog.DiscardHandler)
	}
	if f.cfg.Now == nil {
		f.cfg.Now = time.Now
	}
	return f, nil
}

// Name implements filter.Factory.
func (*Factory) Name() string { return "sasl" }

// New implements filter.Factory.
func (f *Factory) New(info filter.ConnInfo) any { return &conn{f: f, info: info} }

// Mechanisms are the enabled mechanisms' names.
func (f *Factory) Mechanisms() []string { return slices.Clone(f.names) }

// conn is one connection's authentication. Only OnRequest touches it.
type conn struct {
	f    *Factory
	info filter.ConnInfo

	mech     Mechanism    // chosen by the last handshake
	conv     Conversation // the authentication in progress, if any
	authd    bool
	who      Identity  // once authenticated
	authMech string    // the mechanism it authenticated with
	ends     time.Time // the session's end; zero: none
}

// OnRequest implements filter.RequestFilter.
func (c *conn) OnRequest(ctx context.Context, x *filter.Exchange) filter.Status {
	switch x.Header.APIKey {
	case 18: // ApiVersions: answered before authentication, as a broker does
		return filter.Continue
	case 17:
		return c.handshake(ctx, x)
	case 36:
		return c.authenticate(ctx, x)
	}
	switch {
	case !c.authd:
		x.Err = fmt.Errorf("%w: %s", ErrUnauthenticated, kmsg.NameForKey(x.Header.APIKey))
		return filter.StopIteration
	case !c.ends.IsZero() && !c.f.cfg.Now().Before(c.ends):
		x.Err = fmt.Errorf("%w: %s's session ended at %s", ErrExpired, c.who.Principal, c.ends.Format(time.RFC3339))
		return filter.StopIteration
	}
	return filter.Continue
}

func (c *conn) handshake(ctx context.Context, x *filter.Exchange) filter.Status {
	req, ok := x.Req.(*kmsg.SASLHandshakeRequest)
	if !ok || req.Version < 1 {
		x.Err = fmt.Errorf("%w: SaslHandshake v%d (only v1 is served)", ErrIllegalState, x.Header.APIVersion)
		return filter.StopIteration
	}
	resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	resp.SupportedMechanisms = c.f.Mechanisms()
	c.mech, c.conv = nil, nil
	for _, m := range c.f.cfg.Mechanisms {
		if m.Name() == req.Mechanism {
			c.mech = m
		}
	}
	switch {
	case c.mech == nil:
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		x.CloseAfter = true
	case c.authd && c.mech.Name() != c.authMech:
		// Re-authentication keeps the mechanism (KIP-368).
		resp.ErrorCode = kerr.IllegalSaslState.Code
		x.CloseAfter = true
		c.mech = nil
	default:
		c.conv = c.mech.Start(ctx, c.info)
	}
	x.Resp = resp
	return filter.StopIteration
}

func (c *conn) authenticate(ctx context.Context, x *filter.Exchange) filter.Status {
	req, ok := x.Req.(*kmsg.SASLAuthenticateRequest)
	if !ok || c.conv == nil {
		x.Err = fmt.Errorf("%w: SaslAuthenticate before SaslHandshake", ErrIllegalState)
		return filter.StopIteration
	}
	resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	x.Resp = resp
	reply, done, id, err := c.conv.Step(ctx, req.SASLAuthBytes)
	if err == nil && done && c.authd && id.Principal != c.who.Principal {
		err = fmt.Errorf("%w: re-authenticated as %s, not %s", ErrRefused, id.Principal, c.who.Principal)
	}
	if err != nil {
		c.refuse(x, resp, err)
		return filter.StopIteration
	}
	resp.SASLAuthBytes = reply
	if !done {
		return filter.StopIteration
	}
	now := c.f.cfg.Now()
	first := !c.authd
	c.conv, c.authd, c.who, c.authMech = nil, true, id, c.mech.Name()
	c.ends = time.Time{}
	if d := c.f.cfg.MaxLifetime; d > 0 {
		c.ends = now.Add(d)
	}
	if !id.Expires.IsZero() && (c.ends.IsZero() || id.Expires.Before(c.ends)) {
		c.ends = id.Expires
	}
	if !c.ends.IsZero() {
		resp.SessionLifetimeMillis = max(c.ends.Sub(now).Milliseconds(), 1)
	}
	if first {
		c.f.cfg.Log.Debug("client authenticated", "conn", c.info.ID, "remote", c.info.Remote,
			"mechanism", c.authMech, "principal", id.Principal)
	}
	return filter.StopIteration
}

// refuse answers a failed authentication and closes the connection after
// the answer, as a broker does.
func (c *conn) refuse(x *filter.Exchange, resp *kmsg.SASLAuthenticateResponse, err error) {
	resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
	msg := "Authentication failed"
	if errors.Is(err, ErrRefused) {
		msg = err.Error()
	}
	resp.ErrorMessage = &msg
	x.CloseAfter = true
	c.conv = nil
	if c.f.cfg.Failures != nil {
		c.f.cfg.Failures.Inc()
	}
	level, now := slog.LevelDebug, c.f.cfg.Now().UnixNano()
	if last := c.f.lastWarn.Load(); now-last >= int64(warnEvery) && c.f.lastWarn.CompareAndSwap(last, now) {
		level = slog.LevelWarn // the next ones within a minute: DEBUG, counted in Failures
	}
	c.f.cfg.Log.Log(context.Background(), level, "client SASL authentication refused; check the client's credentials",
		"conn", c.info.ID, "remote", c.info.Remote, "mechanism", c.mech.Name(), "err", err)
}
