package upstream

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/baton-kafka/baton/internal/errprefix"
)

// Security is how the agent connects to one cluster: TLS, SASL, both or
// neither (the zero value: plaintext).
type Security struct {
	// TLS, if set, wraps every connection to the cluster's brokers. An
	// empty ServerName is set per broker to the host of its address.
	TLS *tls.Config
	// SASL, if set, authenticates every connection right after it is
	// dialed (and after the TLS handshake), before any other request goes
	// on it: SaslHandshake v1, then SaslAuthenticate v1 until the
	// mechanism is done.
	SASL sasl.Mechanism
}

// secure runs TLS and SASL on a freshly dialed nc to addr, before the
// connection serves anything; nc is closed on failure. ctx bounds both.
func (s Security) secure(ctx context.Context, nc net.Conn, addr string) (net.Conn, error) {
	if s.TLS == nil {
		return nc, nil
	}
	cfg := s.TLS.Clone()
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		cfg.ServerName = host
	}
	tc := tls.Client(nc, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("%w: %s: %w", ErrTLS, addr, err)
	}
	return tc, nil
}

// authenticate runs the SASL exchange on c, which nothing else uses yet.
func (s Security) authenticate(ctx context.Context, c *Conn) error {
	if s.SASL == nil {
		return nil
	}
	// fail: the broker (or the mechanism) refused; unfinished: the
	// exchange broke off (the broker closed the connection, as a TLS
	// listener dialed without TLS does), which is not a refusal.
	fail := func(err error) error {
		return fmt.Errorf("%w with %s at %s: %w", ErrAuth, s.SASL.Name(), c.addr, errprefix.Nested(errPrefix, err))
	}
	unfinished := func(err error) error {
		return fmt.Errorf("SASL %s at %s broke off: %w", s.SASL.Name(), c.addr, err)
	}
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, s.SASL.Name()
	hsResp := kmsg.NewPtrSASLHandshakeResponse()
	if err := roundTrip(ctx, c, hs, hsResp); err != nil {
		return unfinished(err)
	}
	if err := kerr.ErrorForCode(hsResp.ErrorCode); err != nil {
		return fail(fmt.Errorf("the broker enables %v: %w", hsResp.SupportedMechanisms, err))
	}
	// host:port, as the sasl.Mechanism contract (and franz-go) has it.
	session, msg, err := s.SASL.Authenticate(ctx, c.addr)
	if err != nil {
		return fail(err)
	}
	// As franz-go: a session that is done may still have a last message to
	// write, whose answer is read but not given to Challenge.
	for done := false; !done || len(msg) > 0; {
		auth := kmsg.NewPtrSASLAuthenticateRequest()
		auth.Version, auth.SASLAuthBytes = 1, msg
		resp := kmsg.NewPtrSASLAuthenticateResponse()
		sent := time.Now() // the broker's session clock starts before our answer arrives
		if err := roundTrip(ctx, c, auth, resp); err != nil {
			return unfinished(err)
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			if resp.ErrorMessage != nil {
				err = fmt.Errorf("%w: %s", err, *resp.ErrorMessage)
			}
			return fail(err)
		}
		if life := time.Duration(min(resp.SessionLifetimeMillis, maxSessionLifetime.Milliseconds())) * time.Millisecond; life > 0 {
			// The broker closes the connection at the session's end
			// (KIP-368, connections.max.reauth.ms): the pool replaces it
			// a tenth of the lifetime before (see Conn.Retire).
			c.retireAt = sent.Add(life - life/10)
			c.authExpires = sent.Add(life)
		}
		msg = nil
		if !done {
			if done, msg, err = session.Challenge(resp.SASLAuthBytes); err != nil {
				return fail(err)
			}
		}
	}
	return nil
}

// maxSessionLifetime bounds a broker's session lifetime, as franz-go does:
// a larger one would overflow a time.Duration.
const maxSessionLifetime = 365 * 24 * time.Hour

// roundTrip sends req on c and decodes its answer into resp.
func roundTrip(ctx context.Context, c *Conn, req kmsg.Request, resp kmsg.Response) error {
	cl, err := c.Send(req.Key(), req.GetVersion(), nil, req.AppendTo(nil), true)
	if err != nil {
		return err
	}
	body, err := cl.Wait(ctx)
	if err != nil {
		return err
	}
	resp.SetVersion(req.GetVersion())
	return resp.ReadFrom(body)
}
