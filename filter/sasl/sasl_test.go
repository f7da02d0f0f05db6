package sasl_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	kgosasl "github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"go.yaml.in/yaml/v3"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/sasl"
)

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// conn is one client connection through the filter, its handler counting
// what reached it.
type conn struct {
	t       *testing.T
	chain   *filter.Chain
	reached int
	closed  bool // an answer closed the connection
}

func (c *conn) Dispatch(_ context.Context, x *filter.Exchange) filter.Pending {
	c.reached++
	x.Resp = x.Req.ResponseKind()
	return filter.Done{}
}

func newConn(t *testing.T, f *sasl.Factory) *conn {
	c := &conn{t: t}
	c.chain = filter.NewChain(filter.ConnInfo{ID: 1, Remote: "127.0.0.1:5555"}, []filter.Factory{f}, c)
	return c
}

// do sends req (at its version) and returns the exchange after the
// response side.
func (c *conn) do(req kmsg.Request) *filter.Exchange {
	c.t.Helper()
	if c.closed {
		c.t.Fatalf("%s sent on a connection an earlier answer closed", kmsg.NameForKey(req.Key()))
	}
	x := &filter.Exchange{Header: filter.Header{APIKey: req.Key(), APIVersion: req.GetVersion()}, Req: req}
	ctx := context.Background()
	c.chain.Response(ctx, c.chain.Request(ctx, x))
	c.closed = x.Err != nil || x.CloseAfter
	return x
}

func handshake(mech string) kmsg.Request {
	r := kmsg.NewPtrSASLHandshakeRequest()
	r.Version, r.Mechanism = 1, mech
	return r
}

func authenticate(b []byte) kmsg.Request {
	r := kmsg.NewPtrSASLAuthenticateRequest()
	r.Version, r.SASLAuthBytes = 2, b
	return r
}

func produce() kmsg.Request {
	r := kmsg.NewPtrProduceRequest()
	r.Version = 9
	return r
}

// login runs a client mechanism of franz-go's through the filter:
// handshake, then SaslAuthenticate until either side is done. It returns
// the last SaslAuthenticate response, or the handshake's error code.
func (c *conn) login(m kgosasl.Mechanism) (*kmsg.SASLAuthenticateResponse, int16) {
	c.t.Helper()
	hs := c.do(handshake(m.Name()))
	if code := hs.Resp.(*kmsg.SASLHandshakeResponse).ErrorCode; code != 0 {
		return nil, code
	}
	sess, msg, err := m.Authenticate(context.Background(), "agent:9092")
	if err != nil {
		c.t.Fatal(err)
	}
	for {
		x := c.do(authenticate(msg))
		resp := x.Resp.(*kmsg.SASLAuthenticateResponse)
		if resp.ErrorCode != 0 {
			return resp, 0
		}
		done, next, err := sess.Challenge(resp.SASLAuthBytes)
		if err != nil {
			c.t.Fatalf("the client refused the filter's answer: %v", err)
		}
		if done {
			return resp, 0
		}
		msg = next
	}
}

// users is what the test's verifiers accept.
var users = map[string]string{"alice": "alice-secret", "bob": "bob-secret"}

func verifyPlain(_ context.Context, user, pass string) (sasl.Identity, error) {
	if users[user] != pass || pass == "" {
		return sasl.Identity{}, fmt.Errorf("%w: wrong user or password", sasl.ErrRefused)
	}
	return sasl.Identity{Principal: "User:" + user}, nil
}

func scramCreds(t *testing.T) *sasl.SCRAMCredentials {
	t.Helper()
	var list []sasl.SCRAMCredential
	for _, mech := range []string{sasl.ScramSHA256, sasl.ScramSHA512} {
		for u, p := range users {
			c, err := sasl.NewSCRAMCredential(mech, u, p, 4096)
			if err != nil {
				t.Fatal(err)
			}
			list = append(list, c)
		}
	}
	b, err := yaml.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := sasl.ParseSCRAMCredentials(b)
	if err != nil {
		t.Fatal(err)
	}
	return creds
}

func factory(t *testing.T, clk *clock, maxLife time.Duration, tokenExp time.Time) *sasl.Factory {
	t.Helper()
	creds := scramCreds(t)
	s256, err := sasl.SCRAM(sasl.ScramSHA256, creds)
	if err != nil {
		t.Fatal(err)
	}
	s512, err := sasl.SCRAM(sasl.ScramSHA512, creds)
	if err != nil {
		t.Fatal(err)
	}
	tokens := sasl.OAuthBearer(func(_ context.Context, tok string) (sasl.Identity, error) {
		user, ok := map[string]string{"tok-alice": "alice", "tok-bob": "bob"}[tok]
		if !ok {
			return sasl.Identity{}, fmt.Errorf("%w: token not valid", sasl.ErrRefused)
		}
		return sasl.Identity{Principal: "User:" + user, Expires: tokenExp}, nil
	})
	f, err := sasl.New(sasl.Config{Mechanisms: []sasl.Mechanism{sasl.Plain(verifyPlain), s256, s512, tokens},
		MaxLifetime: maxLife, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func plainAs(user, pass string) kgosasl.Mechanism {
	return plain.Auth{User: user, Pass: pass}.AsMechanism()
}

// TestAuthenticate logs in with each mechanism, with good and bad
// credentials, as franz-go's own client mechanisms speak them.
func TestAuthenticate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		mech      kgosasl.Mechanism
		principal string // "" when refused
	}{
		{"PLAIN", plainAs("alice", "alice-secret"), "User:alice"},
		{"PLAIN wrong password", plainAs("alice", "bob-secret"), ""},
		{"SCRAM-SHA-256", scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha256Mechanism(), "User:bob"},
		{"SCRAM-SHA-512", scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism(), "User:alice"},
		{"SCRAM wrong password", scram.Auth{User: "alice", Pass: "nope"}.AsSha512Mechanism(), ""},
		{"SCRAM unknown user", scram.Auth{User: "carol", Pass: "x"}.AsSha256Mechanism(), ""},
		{"OAUTHBEARER", oauth.Auth{Token: "tok-bob"}.AsMechanism(), "User:bob"},
		{"OAUTHBEARER bad token", oauth.Auth{Token: "forged"}.AsMechanism(), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := &clock{now: time.Unix(1e9, 0)}
			c := newConn(t, factory(t, clk, time.Hour, time.Time{}))
			if x := c.do(kmsg.NewPtrApiVersionsRequest()); x.Err != nil || c.reached != 1 {
				t.Fatalf("ApiVersions before authentication: err %v, reached the handler %d times", x.Err, c.reached)
			}
			resp, code := c.login(tc.mech)
			if code != 0 {
				t.Fatalf("handshake: %v", kerr.ErrorForCode(code))
			}
			if tc.principal == "" {
				if resp.ErrorCode != kerr.SaslAuthenticationFailed.Code || !c.closed {
					t.Fatalf("refused credentials: code %v, connection closed %v; want SASL_AUTHENTICATION_FAILED, closed", kerr.ErrorForCode(resp.ErrorCode), c.closed)
				}
				return
			}
			if resp.ErrorCode != 0 || c.closed {
				t.Fatalf("good credentials: %v (%v), closed %v", kerr.ErrorForCode(resp.ErrorCode), resp.ErrorMessage, c.closed)
			}
			if resp.SessionLifetimeMillis != time.Hour.Milliseconds() {
				t.Errorf("session lifetime %d ms, want an hour", resp.SessionLifetimeMillis)
			}
			if x := c.do(produce()); x.Err != nil || c.reached != 2 {
				t.Fatalf("produce once authenticated: err %v, reached the handler %d times", x.Err, c.reached)
			}
		})
	}
}

// TestBeforeAuthentication: nothing but ApiVersions and the SASL requests,
// in order, before a connection authenticated.
func TestBeforeAuthentication(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Unix(1e9, 0)}
	f := factory(t, clk, 0, time.Time{})
	for name, run := range map[string]func(c *conn) *filter.Exchange{
		"produce":                        func(c *conn) *filter.Exchange { return c.do(produce()) },
		"authenticate without handshake": func(c *conn) *filter.Exchange { return c.do(authenticate([]byte("\x00alice\x00alice-secret"))) },
		"handshake v0": func(c *conn) *filter.Exchange {
			r := handshake("PLAIN")
			r.SetVersion(0)
			return c.do(r)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := newConn(t, f)
			x := run(c)
			if x.Err == nil || c.reached != 0 {
				t.Fatalf("err %v, reached the handler %d times; want the connection closed, nothing dispatched", x.Err, c.reached)
			}
		})
	}
	t.Run("unknown mechanism", func(t *testing.T) {
		t.Parallel()
		c := newConn(t, f)
		x := c.do(handshake("GSSAPI"))
		resp := x.Resp.(*kmsg.SASLHandshakeResponse)
		if resp.ErrorCode != kerr.UnsupportedSaslMechanism.Code || !x.CloseAfter {
			t.Fatalf("GSSAPI: %v, close after %v", kerr.ErrorForCode(resp.ErrorCode), x.CloseAfter)
		}
		if want := []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"}; fmt.Sprint(resp.SupportedMechanisms) != fmt.Sprint(want) {
			t.Errorf("offered %v, want %v", resp.SupportedMechanisms, want)
		}
	})
}

// TestReauthentication follows a session past its lifetime: a request
// after it closes the connection unless the client authenticated again, as
// the same principal with the same mechanism.
func TestReauthentication(t *testing.T) {
	t.Parallel()
	t.Run("renewed in time", func(t *testing.T) {
		t.Parallel()
		clk := &clock{now: time.Unix(1e9, 0)}
		c := newConn(t, factory(t, clk, time.Minute, time.Time{}))
		c.login(plainAs("alice", "alice-secret"))
		clk.add(50 * time.Second)
		if resp, _ := c.login(plainAs("alice", "alice-secret")); resp.ErrorCode != 0 {
			t.Fatalf("re-authentication: %v", kerr.ErrorForCode(resp.ErrorCode))
		}
		clk.add(50 * time.Second) // 100 s after the first login, 50 s after the second
		if x := c.do(produce()); x.Err != nil {
			t.Fatalf("produce within the renewed session: %v", x.Err)
		}
	})
	t.Run("expired", func(t *testing.T) {
		t.Parallel()
		clk := &clock{now: time.Unix(1e9, 0)}
		c := newConn(t, factory(t, clk, time.Minute, time.Time{}))
		c.login(plainAs("alice", "alice-secret"))
		clk.add(time.Minute)
		if x := c.do(produce()); !errors.Is(x.Err, sasl.ErrExpired) || c.reached != 0 {
			t.Fatalf("produce after the session ended: err %v, reached %d; want ErrExpired", x.Err, c.reached)
		}
	})
	t.Run("token expiry caps the session", func(t *testing.T) {
		t.Parallel()
		clk := &clock{now: time.Unix(1e9, 0)}
		c := newConn(t, factory(t, clk, time.Hour, clk.Now().Add(90*time.Second)))
		resp, _ := c.login(oauth.Auth{Token: "tok-alice"}.AsMechanism())
		if resp.SessionLifetimeMillis != 90_000 {
			t.Fatalf("session lifetime %d ms, want the token's 90 s", resp.SessionLifetimeMillis)
		}
		clk.add(91 * time.Second)
		if x := c.do(produce()); !errors.Is(x.Err, sasl.ErrExpired) {
			t.Fatalf("produce after the token expired: %v, want ErrExpired", x.Err)
		}
	})
	t.Run("another principal", func(t *testing.T) {
		t.Parallel()
		clk := &clock{now: time.Unix(1e9, 0)}
		c := newConn(t, factory(t, clk, time.Minute, time.Time{}))
		c.login(plainAs("alice", "alice-secret"))
		resp, _ := c.login(plainAs("bob", "bob-secret"))
		if resp.ErrorCode != kerr.SaslAuthenticationFailed.Code || !c.closed {
			t.Fatalf("re-authentication as bob on alice's connection: %v, closed %v", kerr.ErrorForCode(resp.ErrorCode), c.closed)
		}
	})
	t.Run("another mechanism", func(t *testing.T) {
		t.Parallel()
		clk := &clock{now: time.Unix(1e9, 0)}
		c := newConn(t, factory(t, clk, time.Minute, time.Time{}))
		c.login(plainAs("alice", "alice-secret"))
		if _, code := c.login(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha256Mechanism()); code != kerr.IllegalSaslState.Code || !c.closed {
			t.Fatalf("re-authentication with SCRAM after PLAIN: %v, closed %v", kerr.ErrorForCode(code), c.closed)
		}
	})
}

func TestConfigRefused(t *testing.T) {
	t.Parallel()
	p := sasl.Plain(verifyPlain)
	for name, cfg := range map[string]sasl.Config{
		"no mechanisms":    {},
		"twice":            {Mechanisms: []sasl.Mechanism{p, p}},
		"negative maximum": {Mechanisms: []sasl.Mechanism{p}, MaxLifetime: -1},
	} {
		if _, err := sasl.New(cfg); !errors.Is(err, sasl.ErrBadConfig) {
			t.Errorf("%s: %v, want ErrBadConfig", name, err)
		}
	}
	for name, file := range map[string]string{
		"no user":        "- {mechanism: SCRAM-SHA-256, salt: YQ==, iterations: 4096, storedKey: YQ==, serverKey: YQ==}",
		"bad mechanism":  "- {user: a, mechanism: SCRAM-SHA-1, salt: YQ==, iterations: 4096, storedKey: YQ==, serverKey: YQ==}",
		"few iterations": "- {user: a, mechanism: SCRAM-SHA-256, salt: YQ==, iterations: 10, storedKey: YQ==, serverKey: YQ==}",
		"not base64":     "- {user: a, mechanism: SCRAM-SHA-256, salt: '!!', iterations: 4096, storedKey: YQ==, serverKey: YQ==}",
		"unknown field":  "- {user: a, password: x}",
	} {
		if _, err := sasl.ParseSCRAMCredentials([]byte(file)); !errors.Is(err, sasl.ErrBadConfig) {
			t.Errorf("credentials file with %s: %v, want ErrBadConfig", name, err)
		}
	}
}

// TestSCRAMUsersFileRotation: a user added to the file, or a password
// changed there, counts from the next authentication on.
func TestSCRAMUsersFileRotation(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "users.yaml")
	write := func(pass string) {
		t.Helper()
		c, err := sasl.NewSCRAMCredential(sasl.ScramSHA512, "app", pass, 4096)
		if err != nil {
			t.Fatal(err)
		}
		b, err := yaml.Marshal([]sasl.SCRAMCredential{c})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("old")
	creds, err := sasl.LoadSCRAMCredentials(file)
	if err != nil {
		t.Fatal(err)
	}
	m, err := sasl.SCRAM(sasl.ScramSHA512, creds)
	if err != nil {
		t.Fatal(err)
	}
	f, err := sasl.New(sasl.Config{Mechanisms: []sasl.Mechanism{m}})
	if err != nil {
		t.Fatal(err)
	}
	login := func(pass string) int16 {
		t.Helper()
		resp, _ := newConn(t, f).login(scram.Auth{User: "app", Pass: pass}.AsSha512Mechanism())
		return resp.ErrorCode
	}
	if code := login("old"); code != 0 {
		t.Fatalf("the file's password: %v", kerr.ErrorForCode(code))
	}
	write("new")
	if code := login("old"); code != kerr.SaslAuthenticationFailed.Code {
		t.Fatalf("the replaced password: %v, want SASL_AUTHENTICATION_FAILED", kerr.ErrorForCode(code))
	}
	if code := login("new"); code != 0 {
		t.Fatalf("the rotated password: %v", kerr.ErrorForCode(code))
	}
	if err := os.WriteFile(file, []byte("{not yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := login("new"); code != 0 {
		t.Fatalf("after a broken rewrite of the file: %v, want the last users kept", kerr.ErrorForCode(code))
	}
}
