package agent

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	kgosasl "github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/baton-kafka/baton/agent/internal/upstream"
	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/sasl"
	"github.com/baton-kafka/baton/internal/oauthbearer"
)

// How clients reach the agent: TLS on the listener, and SASL answered by
// the agent itself (docs/security.md says which principal each cluster
// sees in each mode).

// SASLMode is how the agent authenticates its clients.
type SASLMode string

// SASL modes.
const (
	// SASLNone: no SASL on the listener (the default). With TLS client
	// certificates required, the certificate is the client's proof.
	// Upstream, the agent's own identity (SourceSecurity,
	// DestinationSecurity).
	SASLNone SASLMode = "none"
	// SASLForward: PLAIN or OAUTHBEARER, and the client's own credentials
	// are used upstream: on the source (which checks them when the client
	// authenticates; a refusal there is the client's
	// SASL_AUTHENTICATION_FAILED) and on the destination. Each client
	// principal gets upstream connections of its own.
	SASLForward SASLMode = "forward"
	// SASLLocal: SCRAM-SHA-256 or SCRAM-SHA-512, checked against the
	// agent's credentials file; upstream, the agent's own identity (the
	// workload's).
	SASLLocal SASLMode = "local"
)

// ClientSecurity is how clients connect to the agent; the zero value is
// plaintext without authentication.
type ClientSecurity struct {
	// TLS, if set, serves the listener with TLS (its Certificates). With
	// ClientAuth RequireAndVerifyClientCert and ClientCAs, clients must
	// present a certificate those CAs signed (mTLS).
	TLS *tls.Config
	// SASL is the authentication mode (default SASLNone).
	SASL SASLMode
	// Mechanisms are the SASL mechanisms offered (default: PLAIN and
	// OAUTHBEARER for SASLForward; the SCRAM mechanisms with users in
	// SCRAM for SASLLocal).
	Mechanisms []string
	// SCRAM holds the users SASLLocal accepts.
	SCRAM *sasl.SCRAMCredentials
	// MaxSession bounds a client's SASL session: clients authenticate
	// again before it ends (KIP-368); 0: sessions end only with a token's
	// expiry.
	MaxSession time.Duration
	// MaxPrincipals bounds how many client principals have upstream
	// connections of their own at once in SASLForward (default 64).
	MaxPrincipals int
}

// ListenSecurity sets how clients connect to the agent, overriding
// plaintext without authentication.
func ListenSecurity(s ClientSecurity) Opt { return optFunc(func(c *config) { c.clientSec = s }) }

// DefaultMaxPrincipals bounds the client principals with upstream
// connections of their own (SASLForward).
const DefaultMaxPrincipals = 64

// checkClientSecurity fills in the defaults of s and refuses what cannot
// work, naming the field.
func checkClientSecurity(s *ClientSecurity) error {
	if s.SASL == "" {
		s.SASL = SASLNone
	}
	if s.MaxPrincipals == 0 {
		s.MaxPrincipals = DefaultMaxPrincipals
	}
	allowed := map[SASLMode][]string{
		SASLNone:    nil,
		SASLForward: {"PLAIN", "OAUTHBEARER"},
		SASLLocal:   {sasl.ScramSHA256, sasl.ScramSHA512},
	}
	all, ok := allowed[s.SASL]
	switch {
	case !ok:
		return fmt.Errorf("%w: client SASL mode %q: want none, forward or local", ErrBadConfig, s.SASL)
	case s.MaxSession < 0:
		return fmt.Errorf("%w: client SASL max session: %v is negative", ErrBadConfig, s.MaxSession)
	case s.MaxPrincipals < 1:
		return fmt.Errorf("%w: client SASL max principals: %d is below 1", ErrBadConfig, s.MaxPrincipals)
	case s.TLS != nil && len(s.TLS.Certificates) == 0 && s.TLS.GetCertificate == nil:
		return fmt.Errorf("%w: client TLS: no certificate to serve", ErrBadConfig)
	case s.SASL == SASLNone && len(s.Mechanisms) > 0:
		return fmt.Errorf("%w: client SASL mechanisms %v given without a SASL mode", ErrBadConfig, s.Mechanisms)
	}
	if s.SASL == SASLNone {
		return nil
	}
	if len(s.Mechanisms) == 0 {
		for _, m := range all {
			if s.SASL == SASLForward || s.SCRAM.Has(m) {
				s.Mechanisms = append(s.Mechanisms, m)
			}
		}
	}
	for _, m := range s.Mechanisms {
		if !slices.Contains(all, m) {
			return fmt.Errorf("%w: client SASL mechanism %q: mode %s takes %s", ErrBadConfig, m, s.SASL, strings.Join(all, ", "))
		}
	}
	if len(s.Mechanisms) == 0 {
		return fmt.Errorf("%w: client SASL mode local: the SCRAM credentials file lists no user", ErrBadConfig)
	}
	return nil
}

// saslFilter is the listener's SASL filter, nil without SASL.
func (a *Agent) saslFilter() (filter.Factory, error) {
	cs := a.cfg.clientSec
	if cs.SASL == SASLNone || cs.SASL == "" {
		return nil, nil
	}
	var mechs []sasl.Mechanism
	for _, name := range cs.Mechanisms {
		switch name {
		case "PLAIN":
			mechs = append(mechs, sasl.Plain(a.verifyPlain))
		case "OAUTHBEARER":
			mechs = append(mechs, sasl.OAuthBearer(a.verifyToken))
		default:
			m, err := sasl.SCRAM(name, cs.SCRAM)
			if err != nil {
				return nil, fmt.Errorf("%w: client SASL: %w", ErrBadConfig, err)
			}
			mechs = append(mechs, m)
		}
	}
	failures := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "baton_agent_client_auth_failures_total", Help: "Client SASL authentications the agent refused.",
	})
	a.cfg.registry.MustRegister(failures)
	f, err := sasl.New(sasl.Config{Mechanisms: mechs, MaxLifetime: cs.MaxSession, Failures: failures, Log: a.log})
	if err != nil {
		return nil, fmt.Errorf("%w: client SASL: %w", ErrBadConfig, err)
	}
	return f, nil
}

// newRouter is the Handler of client connection id, reaching the clusters
// as the agent until a forwarding authentication binds it to the client's
// principal.
func (a *Agent) newRouter(id uint64) *router {
	return &router{a: a, slot: id, src: a.src, dst: a.dst}
}

// routerKey carries a connection's router in its context, for the
// filters' calls into the agent (authentication, producer ids).
type routerKey struct{}

func withRouter(ctx context.Context, r *router) context.Context {
	return context.WithValue(ctx, routerKey{}, r)
}

// clustersOf are the clusters as the connection of ctx reaches them; the
// agent's own outside a connection.
func (a *Agent) clustersOf(ctx context.Context) (src, dst *upstream.Cluster) {
	if r, ok := ctx.Value(routerKey{}).(*router); ok && r.src != nil {
		return r.src, r.dst
	}
	return a.src, a.dst
}

// --- SASLForward: upstream as the client ---

// principalPair is one client principal's clusters: connections that
// authenticate as the principal, with the credentials it last proved.
type principalPair struct {
	principal string
	src, dst  *upstream.Cluster
	cred      *forwardedCred

	// Under principals.mu:
	bound    int               // connections bound to the pair
	idle     time.Time         // when bound last fell to 0
	verified map[[32]byte]bool // credentials the source accepted
}

// forwardedCred is a client's credentials as the upstream connections of
// its principal present them: franz-go's PLAIN or OAUTHBEARER with the
// latest credentials the source accepted, so that a re-authenticating
// client's new token is used for new connections and upstream
// re-authentication. The mechanism is the latest one's too: one principal
// may come with PLAIN (User:app) and with OAUTHBEARER (a JWT whose sub is
// app), and a password is no token.
type forwardedCred struct {
	mu   sync.Mutex
	mech string
	user string
	pass string // PLAIN's password, or OAUTHBEARER's token
}

var _ kgosasl.Mechanism = (*forwardedCred)(nil)

func (c *forwardedCred) Name() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mech
}

// Authenticate implements sasl.Mechanism with the current credentials.
func (c *forwardedCred) Authenticate(ctx context.Context, host string) (kgosasl.Session, []byte, error) {
	c.mu.Lock()
	mech, user, pass := c.mech, c.user, c.pass
	c.mu.Unlock()
	return credMechanism(mech, user, pass).Authenticate(ctx, host)
}

func (c *forwardedCred) set(mech, user, pass string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mech, c.user, c.pass = mech, user, pass
}

func credMechanism(mech, user, pass string) kgosasl.Mechanism {
	if mech == "OAUTHBEARER" {
		return oauth.Auth{Token: pass}.AsMechanism()
	}
	return plain.Auth{User: user, Pass: pass}.AsMechanism()
}

// principals are the client principals' pairs (SASLForward).
type principals struct {
	mu sync.Mutex
	m  map[string]*principalPair
}

// principalIdle is how long a principal's upstream connections outlive
// its last client connection.
const principalIdle = 5 * time.Minute

// verifyPlain checks a PLAIN client's user and password against the
// source, and binds its connection to the user's principal.
func (a *Agent) verifyPlain(ctx context.Context, user, pass string) (sasl.Identity, error) {
	id := sasl.Identity{Principal: "User:" + user}
	return id, a.forward(ctx, "PLAIN", id.Principal, user, pass)
}

// verifyToken checks an OAUTHBEARER client's token against the source, and
// binds its connection to the token's principal: User:<sub> for a JWT
// (Kafka's default validators name it so), else one of its own per
// token.
func (a *Agent) verifyToken(ctx context.Context, token string) (sasl.Identity, error) {
	id := sasl.Identity{Expires: oauthbearer.Expiry(token)}
	if sub, err := oauthbearer.Subject(token); err == nil {
		id.Principal = "User:" + sub
	} else {
		sum := sha256.Sum256([]byte(token))
		id.Principal = fmt.Sprintf("User:opaque-token-%x", sum[:6])
	}
	return id, a.forward(ctx, "OAUTHBEARER", id.Principal, "", token)
}

// forward binds the connection of ctx to principal's pair, once the
// source accepted the credentials (or accepted them before).
func (a *Agent) forward(ctx context.Context, mech, principal, user, pass string) error {
	rt, ok := ctx.Value(routerKey{}).(*router)
	if !ok {
		return errors.New("no client connection in the context")
	}
	sum := sha256.Sum256([]byte(mech + "\x00" + user + "\x00" + pass))
	a.principals.mu.Lock()
	p := a.principals.m[principal]
	known := p != nil && p.verified[sum]
	a.principals.mu.Unlock()
	var fresh *principalPair
	switch {
	case known:
	case p == nil:
		// A new principal: its own source cluster checks the
		// credentials, and learns the versions it serves.
		fresh = a.newPrincipalPair(principal, mech, user, pass)
		if err := checkUpstream(ctx, fresh.src); err != nil {
			fresh.close()
			return err
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = fresh.dst.LoadVersions(ctx) // asked again when needed
		}()
	default:
		probe := upstream.New(upstream.Config{
			Name: "source", Bootstrap: a.cfg.source, PoolSize: 1, DialTimeout: 10 * time.Second,
			ReadTimeout: time.Minute, Log: a.log, Forwarded: true,
			Security: upstream.Security{TLS: a.cfg.srcSec.TLS, SASL: credMechanism(mech, user, pass)},
		})
		err := checkUpstream(ctx, probe)
		probe.CloseConns(errClientGone)
		if err != nil {
			return err
		}
	}
	a.principals.mu.Lock()
	defer a.principals.mu.Unlock()
	p = a.principals.m[principal]
	if p == nil {
		if fresh == nil {
			return fmt.Errorf("%w: %s's upstream connections were closed meanwhile; authenticate again", sasl.ErrRefused, principal)
		}
		if len(a.principals.m) >= a.cfg.clientSec.MaxPrincipals && !a.dropIdlePrincipal() {
			fresh.close()
			a.log.Warn("client refused: the agent already forwards for as many principals as it may; raise --client-sasl-max-principals",
				"principal", principal, "max", a.cfg.clientSec.MaxPrincipals)
			return fmt.Errorf("%w: this agent forwards for %d principals already", sasl.ErrRefused, a.cfg.clientSec.MaxPrincipals)
		}
		p = fresh
		a.principals.m[principal] = p
	} else if fresh != nil {
		fresh.close() // another connection of the principal won the race
	}
	p.verified[sum] = true
	p.cred.set(mech, user, pass)
	if rt.pair != p {
		if rt.pair != nil {
			// The sasl filter refuses another principal on
			// re-authentication; a pair is bound once per connection.
			return fmt.Errorf("%w: connection already bound to %s", sasl.ErrRefused, rt.pair.principal)
		}
		p.bound++
		rt.pair, rt.src, rt.dst = p, p.src, p.dst
	}
	return nil
}

// checkUpstream authenticates to the source with src's credentials (its
// first connection does, right after it is dialed) and learns its
// versions.
func checkUpstream(ctx context.Context, src *upstream.Cluster) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := src.LoadVersions(ctx); err != nil {
		if errors.Is(err, upstream.ErrAuth) {
			return fmt.Errorf("%w: the source refused the credentials", sasl.ErrRefused)
		}
		return fmt.Errorf("checking the credentials with the source: %w", err)
	}
	return nil
}

func (a *Agent) newPrincipalPair(principal, mech, user, pass string) *principalPair {
	cred := &forwardedCred{mech: mech, user: user, pass: pass}
	mk := func(name string, bootstrap []string, sec Security) *upstream.Cluster {
		return upstream.New(upstream.Config{
			Name: name, Bootstrap: bootstrap, PoolSize: a.cfg.upstreamConns,
			DialTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second, Log: a.log.With("principal", principal), Forwarded: true,
			Security: upstream.Security{TLS: sec.TLS, SASL: cred},
		})
	}
	return &principalPair{principal: principal, cred: cred, verified: map[[32]byte]bool{},
		src: mk("source", a.cfg.source, a.cfg.srcSec), dst: mk("destination", a.cfg.destination, a.cfg.dstSec)}
}

// dropIdlePrincipal closes the pair idle the longest, if one has no
// connection bound. Called with principals.mu held.
func (a *Agent) dropIdlePrincipal() bool {
	var old *principalPair
	for _, p := range a.principals.m {
		if p.bound == 0 && (old == nil || p.idle.Before(old.idle)) {
			old = p
		}
	}
	if old == nil {
		return false
	}
	delete(a.principals.m, old.principal)
	old.close()
	return true
}

// close closes the pair's upstream connections.
func (p *principalPair) close() {
	p.src.CloseConns(errClientGone)
	p.dst.CloseConns(errClientGone)
}

// unbind ends a connection's hold on its principal's pair; the pair's
// connections close once no client used it for principalIdle.
func (a *Agent) unbind(p *principalPair) {
	if p == nil {
		return
	}
	a.principals.mu.Lock()
	defer a.principals.mu.Unlock()
	p.bound--
	if p.bound > 0 {
		return
	}
	p.idle = time.Now()
	time.AfterFunc(principalIdle, func() {
		a.principals.mu.Lock()
		defer a.principals.mu.Unlock()
		if p.bound == 0 && a.principals.m[p.principal] == p && time.Since(p.idle) >= principalIdle {
			delete(a.principals.m, p.principal)
			p.close()
		}
	})
}

// tlsHandshakeTimeout bounds a client's TLS handshake.
const tlsHandshakeTimeout = 10 * time.Second

// handshakeTLS serves TLS on a client connection. A failed handshake is
// said at WARN at most once a minute (a misconfigured client retries
// every second), and counted; a connection closed before it sent
// anything is a TCP probe (a kubelet's, a load balancer's), not a client,
// and only said at DEBUG.
func (a *Agent) handshakeTLS(ctx context.Context, nc net.Conn) (net.Conn, error) {
	tc := tls.Server(nc, a.cfg.clientSec.TLS)
	ctx, cancel := context.WithTimeout(ctx, tlsHandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		if errors.Is(err, io.EOF) {
			a.log.Debug("connection closed before a TLS handshake (a TCP probe?)", "remote", nc.RemoteAddr().String())
			return nil, err
		}
		a.metrics.tlsFailures.Inc()
		level, now := slog.LevelDebug, time.Now().UnixNano()
		if last := a.tlsWarned.Load(); now-last >= int64(time.Minute) && a.tlsWarned.CompareAndSwap(last, now) {
			level = slog.LevelWarn
		}
		a.log.Log(ctx, level, "client TLS handshake failed; check the client's TLS settings (CA, certificate)",
			"remote", nc.RemoteAddr().String(), "err", err)
		return nil, err
	}
	return tc, nil
}
