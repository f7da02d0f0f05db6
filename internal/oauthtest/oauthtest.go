// Package oauthtest owns the OAuth 2.0 fakes Baton's tests use for
// SASL/OAUTHBEARER: a token endpoint on loopback implementing the
// client-credentials grant, which checks every request as RFC 6749 has it,
// and unsecured JWTs (alg none), the tokens Kafka's default OAUTHBEARER
// validator takes.
// Only tests import it.
package oauthtest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// Config is what an Endpoint serves.
type Config struct {
	// ClientID and Secret are the one client the endpoint knows
	// (defaults "baton-client" and "client-s3cret:/+", whose ':', '/'
	// and '+' the client must form-encode).
	ClientID, Secret string
	// Scope is the scope every request must ask for, exactly ("" none).
	Scope string
	// ExpiresIn is the expires_in of every token, in seconds (0: none).
	ExpiresIn int64
	// Mint makes the token of the n-th request (from 1); default tok-<n>.
	Mint func(n int64) string
	// Gate, if set, holds every request until it is closed.
	Gate chan struct{}
}

// Endpoint is a token endpoint at URL+"/token" (any path serves).
type Endpoint struct {
	*httptest.Server
	Config
	// Requests counts requests as they arrive, Served the tokens given.
	Requests, Served atomic.Int64

	t          testing.TB
	mu         sync.Mutex
	failStatus int
	failBody   string
}

// NewEndpoint starts an endpoint, closed when the test ends.
func NewEndpoint(t testing.TB, cfg Config) *Endpoint {
	t.Helper()
	if cfg.ClientID == "" {
		cfg.ClientID = "baton-client"
	}
	if cfg.Secret == "" {
		cfg.Secret = "client-s3cret:/+"
	}
	e := &Endpoint{Config: cfg, t: t}
	e.Server = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(e.Close)
	return e
}

// Fail makes every request from now on answered with status and body;
// status 0 answers tokens again.
func (e *Endpoint) Fail(status int, body string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.failStatus, e.failBody = status, body
}

func (e *Endpoint) serve(w http.ResponseWriter, r *http.Request) {
	n := e.Requests.Add(1)
	if e.Gate != nil {
		<-e.Gate
	}
	if err := r.ParseForm(); err != nil {
		e.t.Errorf("oauthtest: token request form: %v", err)
	}
	switch {
	case r.Method != http.MethodPost:
		e.t.Errorf("oauthtest: token request method %s, want POST", r.Method)
	case r.Header.Get("Content-Type") != "application/x-www-form-urlencoded":
		e.t.Errorf("oauthtest: token request Content-Type %q", r.Header.Get("Content-Type"))
	case r.PostForm.Get("grant_type") != "client_credentials":
		e.t.Errorf("oauthtest: grant_type %q, want client_credentials", r.PostForm.Get("grant_type"))
	case r.PostForm.Get("scope") != e.Scope:
		e.t.Errorf("oauthtest: scope %q, want %q", r.PostForm.Get("scope"), e.Scope)
	case r.PostForm.Has("client_secret") || r.PostForm.Has("client_id"):
		e.t.Errorf("oauthtest: client credentials in the form (fields %v), want them in Basic authentication only", keys(r.PostForm))
	}
	w.Header().Set("Content-Type", "application/json")
	e.mu.Lock()
	status, body := e.failStatus, e.failBody
	e.mu.Unlock()
	if status != 0 {
		w.WriteHeader(status)
		fmt.Fprint(w, body)
		return
	}
	// RFC 6749 §2.3.1: the id and secret are form-encoded, then put in
	// Basic authentication.
	id, secret, ok := r.BasicAuth()
	id, _ = url.QueryUnescape(id)
	secret, _ = url.QueryUnescape(secret)
	if !ok || id != e.ClientID || secret != e.Secret {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":"invalid_client","error_description":"unknown client or wrong secret"}`)
		return
	}
	tok := fmt.Sprintf("tok-%d", n)
	if e.Mint != nil {
		tok = e.Mint(n)
	}
	resp := map[string]any{"access_token": tok, "token_type": "Bearer"}
	if e.ExpiresIn != 0 {
		resp["expires_in"] = e.ExpiresIn
	}
	_ = json.NewEncoder(w).Encode(resp)
	e.Served.Add(1)
}

func keys(v url.Values) []string {
	var out []string
	for k := range v {
		out = append(out, k)
	}
	return out
}

// UnsecuredJWT is an unsecured JWS (RFC 7515 with alg none, an empty
// signature) carrying claims. Kafka's default OAUTHBEARER validator takes
// one with a sub claim (the principal's name) and an exp claim in the
// future (seconds since the epoch).
func UnsecuredJWT(claims map[string]any) string {
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err) // a test's claims that do not marshal
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(map[string]string{"alg": "none"}) + "." + enc(claims) + "."
}
