// Package oauthbearer owns where Baton's SASL/OAUTHBEARER tokens for the
// Kafka clusters come from: a file read again at every authentication (a
// Kubernetes projected service-account token is rewritten in place before
// it expires), or the OAuth 2.0 client-credentials grant against a token
// endpoint, cached and refreshed before it expires. Mechanism turns either
// into the franz-go sasl.Mechanism that both the agent's own upstream client
// and franz-go clients take; both call it at every new connection and every
// re-authentication, so a new token is used from the next one on.
//
// Subject reads a JWT's sub claim, the name Kafka's built-in validators give
// the client (principal User:<sub>).
//
// Nothing here logs, and no error carries a token or a client secret.
package oauthbearer

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// Errors. Every message starts with "oauthbearer: "; none carries a token
// or a client secret.
var (
	// ErrTokenFile: the token file could not be read, or holds no token.
	ErrTokenFile = errors.New("oauthbearer: no token from the token file")
	// ErrTokenEndpoint: the token endpoint gave no token, and no token it
	// gave before is still valid.
	ErrTokenEndpoint = errors.New("oauthbearer: no token from the token endpoint")
	// ErrNoSubject: the token is not a JWT with a sub claim, so the
	// principal a broker gives it cannot be read from it.
	ErrNoSubject = errors.New("oauthbearer: no subject in the token")
)

// Source gives the bearer token for one SASL authentication.
type Source interface {
	Token(ctx context.Context) (string, error)
}

// Mechanism is SASL/OAUTHBEARER with the token src gives at each
// authentication, without an authorization id or extensions.
func Mechanism(src Source) sasl.Mechanism {
	return oauth.Oauth(func(ctx context.Context) (oauth.Auth, error) {
		tok, err := src.Token(ctx)
		if err != nil {
			return oauth.Auth{}, err
		}
		return oauth.Auth{Token: tok}, nil
	})
}

// File is a token kept in the file it names, read again at every
// authentication. Kubernetes rotates a projected service-account token by
// swapping a symlink to a new file; reading a few hundred bytes costs
// nothing next to a SASL exchange's round trips, where comparing mtime and
// size could miss a rewrite that keeps the size within the filesystem's
// timestamp granularity (one second on some). Surrounding whitespace (the
// trailing newline of echo or an editor) is dropped: a bearer token has
// none.
type File string

// Token reads the file.
func (f File) Token(context.Context) (string, error) {
	b, err := os.ReadFile(string(f))
	if err != nil {
		// A *PathError: the path and why, never the contents.
		return "", fmt.Errorf("%w: %w", ErrTokenFile, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%w: %s is empty", ErrTokenFile, string(f))
	}
	return tok, nil
}

// Timings of ClientCredentials.
const (
	// refreshAt is the part of a token's lifetime after which a new one
	// is fetched. The agent replaces a connection a tenth of its SASL
	// session before the end, and a broker ends an OAUTHBEARER session
	// no later than the token expires, so a connection made with a
	// token replaces itself past 90% of the token's life: by then the
	// new token is there.
	refreshAt = 0.8
	// retryAfter spaces the attempts to refresh a token that is still
	// valid while the endpoint fails: only authentications ask, but a
	// burst of new connections should not each hit a failing endpoint.
	retryAfter = 5 * time.Second
	// fetchTimeout bounds one request to the token endpoint.
	fetchTimeout = 30 * time.Second
)

// ClientCredentials gets tokens from a token endpoint with the OAuth 2.0
// client-credentials grant (the client id and secret in HTTP Basic
// authentication, as Kafka's own client sends them, and the scope if
// given), and keeps each token for 80% of its lifetime (expires_in, else
// the JWT's exp claim). Then the next authentication starts a refresh and
// goes on with the token it has while that is still valid; a failed refresh
// is tried again by a later authentication, at most every 5 seconds, and
// the old token is used until it expires. A token whose lifetime is unknown
// is fetched anew for each authentication. At most one request to the
// endpoint is in flight. Safe for concurrent use.
type ClientCredentials struct {
	cfg    clientcredentials.Config
	client *http.Client
	url    string // the endpoint for messages, without any password
	now    func() time.Time

	mu        sync.Mutex
	token     string
	expires   time.Time // zero: unknown, the token is not reused
	refresh   time.Time // fetch a new token from then on
	nextRetry time.Time // after a failed refresh: not before then
	inFlight  *fetch    // the request to the endpoint under way, or nil
}

// fetch is one request to the token endpoint; done closes when token or
// err is set.
type fetch struct {
	done  chan struct{}
	token string
	err   error
}

// NewClientCredentials returns the source for the endpoint tokenURL, the
// client id and secret, and the scopes (none: the endpoint's default).
func NewClientCredentials(tokenURL, clientID, clientSecret string, scopes []string) *ClientCredentials {
	shown := tokenURL
	if u, err := url.Parse(tokenURL); err == nil {
		shown = u.Redacted()
	}
	return &ClientCredentials{
		cfg: clientcredentials.Config{
			ClientID: clientID, ClientSecret: clientSecret, TokenURL: tokenURL, Scopes: scopes,
			// Not AuthStyleAutoDetect: it sends the secret again in
			// the form after any failure, doubling each request to an
			// endpoint that is down.
			AuthStyle: oauth2.AuthStyleInHeader,
		},
		client: &http.Client{Timeout: fetchTimeout},
		url:    shown,
		now:    time.Now,
	}
}

// Token returns the token held, or fetches one (see ClientCredentials).
func (c *ClientCredentials) Token(ctx context.Context) (string, error) {
	c.mu.Lock()
	now := c.now()
	held := c.token
	valid := held != "" && now.Before(c.expires)
	if valid && (now.Before(c.refresh) || now.Before(c.nextRetry)) {
		c.mu.Unlock()
		return held, nil
	}
	// One request at a time: a burst of authentications waits for the
	// same token, and with a valid token the refresh goes on without
	// anyone waiting.
	f := c.inFlight
	if f == nil {
		f = &fetch{done: make(chan struct{})}
		c.inFlight = f
		go c.fetch(f)
	}
	c.mu.Unlock()
	if valid {
		return held, nil
	}
	select {
	case <-f.done:
		return f.token, f.err
	case <-ctx.Done():
		return "", fmt.Errorf("%w %s: %w", ErrTokenEndpoint, c.url, ctx.Err())
	}
}

// fetch asks the endpoint for a token and keeps it. It does not run under
// any caller's context (fetchTimeout bounds it): callers wait for the same
// request, each until its own context ends.
func (c *ClientCredentials) fetch(f *fetch) {
	start := c.now()
	t, err := c.cfg.Token(context.WithValue(context.Background(), oauth2.HTTPClient, c.client))
	c.mu.Lock()
	defer c.mu.Unlock()
	defer close(f.done)
	c.inFlight = nil
	if err != nil {
		c.nextRetry = c.now().Add(retryAfter)
		f.err = fmt.Errorf("%w %s: %w", ErrTokenEndpoint, c.url, endpointError(err))
		return
	}
	c.token, c.expires, c.refresh, c.nextRetry = t.AccessToken, time.Time{}, time.Time{}, time.Time{}
	f.token = t.AccessToken
	var life time.Duration
	switch exp, ok := jwtExpiry(t.AccessToken); {
	case !t.Expiry.IsZero():
		// oauth2 dates expires_in from its own clock's now, just after
		// the answer; ours may be another (tests), so only the
		// duration is taken, counted from before the request.
		life = time.Until(t.Expiry)
	case ok:
		life = exp.Sub(start)
	default:
		return
	}
	c.expires = start.Add(life)
	c.refresh = start.Add(time.Duration(float64(life) * refreshAt))
}

// endpointError is err without the endpoint's answer body, which is the
// server's text of any length and may echo the request; the status and the
// OAuth error code and description say what failed.
func endpointError(err error) error {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		return err // transport errors: net/http strips any password from the URL
	}
	msg := "HTTP " + re.Response.Status
	if re.ErrorCode != "" {
		msg += ": " + re.ErrorCode
	}
	if re.ErrorDescription != "" {
		msg += ": " + re.ErrorDescription
	}
	return errors.New(msg)
}

// Subject is the sub claim of token, a JWT (the JWS compact form,
// header.payload.signature), read without checking the signature: it only
// names the principal the broker gives the client, and the broker checks
// the token.
func Subject(token string) (string, error) {
	c, err := claims(token)
	if err != nil {
		return "", err
	}
	if c.Sub == "" {
		return "", fmt.Errorf("%w: the JWT has no sub claim", ErrNoSubject)
	}
	return c.Sub, nil
}

// jwtClaims are the claims Baton reads.
type jwtClaims struct {
	Sub string  `json:"sub"`
	Exp float64 `json:"exp"` // NumericDate: seconds, possibly fractional
}

// claims decodes a JWT's payload. Errors say what is wrong, never quote it.
func claims(token string) (jwtClaims, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return jwtClaims{}, fmt.Errorf("%w: the token is not a JWT (%d dot-separated parts, want 3)", ErrNoSubject, len(parts))
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return jwtClaims{}, fmt.Errorf("%w: the JWT's payload is not base64url", ErrNoSubject)
	}
	var c jwtClaims
	if err := json.Unmarshal(payload, &c); err != nil {
		return jwtClaims{}, fmt.Errorf("%w: the JWT's payload is not a JSON object of claims", ErrNoSubject)
	}
	return c, nil
}

// Expiry is the exp claim of token, read without checking the signature;
// zero when the token is not a JWT or has none. The agent ends a client's
// session then, so the client authenticates again with a fresh token.
func Expiry(token string) time.Time {
	exp, _ := jwtExpiry(token)
	return exp
}

// jwtExpiry is a JWT's exp claim, if the token is a JWT that has one.
func jwtExpiry(token string) (time.Time, bool) {
	c, err := claims(token)
	if err != nil || c.Exp <= 0 {
		return time.Time{}, false
	}
	return time.Unix(0, int64(c.Exp*float64(time.Second))), true
}
