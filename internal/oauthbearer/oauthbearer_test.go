package oauthbearer

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/baton-kafka/baton/internal/oauthtest"
	"github.com/baton-kafka/baton/internal/wait"
)

// bearer runs m's first step and returns the token it sends: the client's
// first OAUTHBEARER message is "n,,\x01auth=Bearer <token>\x01\x01".
func bearer(t *testing.T, m sasl.Mechanism) (string, error) {
	t.Helper()
	_, msg, err := m.Authenticate(context.Background(), "127.0.0.1:9092")
	if err != nil {
		return "", err
	}
	const pre = "n,,\x01auth=Bearer "
	s := string(msg)
	if !strings.HasPrefix(s, pre) || !strings.HasSuffix(s, "\x01\x01") {
		t.Fatalf("first OAUTHBEARER message %q is not %q<token>\\x01\\x01", s, pre)
	}
	return strings.TrimSuffix(strings.TrimPrefix(s, pre), "\x01\x01"), nil
}

// TestFileRotation: the mechanism sends the token the file holds at each
// authentication, after each way a file is replaced (rewritten in place with
// a token of the same size, renamed over, a Kubernetes-style symlink swap).
// An unreadable or empty file is ErrTokenFile, without the token.
func TestFileRotation(t *testing.T) {
	t.Parallel()
	write := func(t *testing.T, path, tok string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name   string
		rotate func(t *testing.T, dir, tok string) // makes dir/token hold tok
	}{
		{"rewritten in place, same size", func(t *testing.T, dir, tok string) { write(t, filepath.Join(dir, "token"), tok) }},
		{"renamed over", func(t *testing.T, dir, tok string) {
			write(t, filepath.Join(dir, "token.new"), tok)
			if err := os.Rename(filepath.Join(dir, "token.new"), filepath.Join(dir, "token")); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlink swap", func(t *testing.T, dir, tok string) {
			// Kubernetes' atomic writer: token -> ..data/token, and
			// ..data is a symlink swapped to a new timestamped folder.
			ts := filepath.Join(dir, "..ts-"+tok)
			if err := os.Mkdir(ts, 0o700); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(ts, "token"), tok)
			if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data_tmp")); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(filepath.Join(dir, "token")); errors.Is(err, os.ErrNotExist) {
				if err := os.Symlink(filepath.Join("..data", "token"), filepath.Join(dir, "token")); err != nil {
					t.Fatal(err)
				}
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			m := Mechanism(File(filepath.Join(dir, "token")))
			for _, tok := range []string{"token-1", "token-2", "token-3"} {
				c.rotate(t, dir, tok)
				got, err := bearer(t, m)
				if err != nil {
					t.Fatal(err)
				}
				if got != tok {
					t.Fatalf("after the file was replaced with %q the mechanism sent %q", tok, got)
				}
			}
		})
	}
	t.Run("unreadable or empty", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "token")
		m := Mechanism(File(path))
		if _, err := bearer(t, m); !errors.Is(err, ErrTokenFile) || !strings.Contains(err.Error(), path) {
			t.Errorf("a missing file: %v, want ErrTokenFile naming %s", err, path)
		}
		write(t, path, "  ")
		if _, err := bearer(t, m); !errors.Is(err, ErrTokenFile) {
			t.Errorf("an empty file: %v, want ErrTokenFile", err)
		}
		write(t, path, "secret-token")
		if err := os.Chmod(path, 0o000); err != nil {
			t.Fatal(err)
		}
		if _, err := os.ReadFile(path); err == nil {
			return // root reads any file: nothing more to check
		}
		if _, err := bearer(t, m); !errors.Is(err, ErrTokenFile) || strings.Contains(err.Error(), "secret-token") {
			t.Errorf("an unreadable file: %v, want ErrTokenFile without the token", err)
		}
	})
}

// clock is a settable clock, safe for concurrent use.
type clock struct{ at atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.at.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) now() time.Time          { return time.Unix(0, c.at.Load()) }
func (c *clock) advance(d time.Duration) { c.at.Add(int64(d)) }

// source is a ClientCredentials for e on clk.
func source(e *oauthtest.Endpoint, clk *clock, scopes ...string) *ClientCredentials {
	src := NewClientCredentials(e.URL+"/token", e.ClientID, e.Secret, scopes)
	src.now = clk.now
	return src
}

// TestClientCredentialsRequest: the token request is a POST of
// grant_type=client_credentials (and the scope, space-separated, if given)
// with the client id and secret in Basic authentication only, and the
// mechanism sends the access token; a wrong secret is ErrTokenEndpoint
// naming the OAuth error, without the secret.
func TestClientCredentialsRequest(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		scopes  []string
		secret  string // "" the endpoint's
		wantErr string
	}{
		{"no scope", nil, "", ""},
		{"one scope", []string{"kafka"}, "", ""},
		{"scopes", []string{"kafka:write", "kafka:read"}, "", ""},
		{"wrong secret", nil, "not-the-s3cret", "invalid_client"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := oauthtest.NewEndpoint(t, oauthtest.Config{Scope: strings.Join(c.scopes, " ")})
			secret := e.Secret
			if c.secret != "" {
				secret = c.secret
			}
			src := NewClientCredentials(e.URL+"/token", e.ClientID, secret, c.scopes)
			got, err := bearer(t, Mechanism(src))
			if c.wantErr != "" {
				if !errors.Is(err, ErrTokenEndpoint) || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("%v, want ErrTokenEndpoint naming %s", err, c.wantErr)
				}
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("the error %q carries the client secret", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != "tok-1" {
				t.Fatalf("sent %q, want the endpoint's tok-1", got)
			}
			if n := e.Requests.Load(); n != 1 {
				t.Fatalf("%d token requests, want 1", n)
			}
		})
	}
}

// settle waits until src has no request to the endpoint under way, so that
// the endpoint's count of requests is final.
func settle(t *testing.T, src *ClientCredentials) {
	t.Helper()
	wait.For(t, 10*time.Second, "the request to the token endpoint to end", func() string {
		src.mu.Lock()
		defer src.mu.Unlock()
		if src.inFlight != nil {
			return "in flight"
		}
		return ""
	})
}

// TestClientCredentialsRefresh walks a token's life on a settable clock:
// kept until 80% of expires_in, then refreshed while the old one is still
// handed out; while the endpoint fails, the old token is used until it
// expires (retrying at most every retryAfter), then the failure is an error;
// once the endpoint answers again, a new token.
func TestClientCredentialsRefresh(t *testing.T) {
	t.Parallel()
	e := oauthtest.NewEndpoint(t, oauthtest.Config{ExpiresIn: 100})
	clk := newClock()
	src := source(e, clk)
	ctx := context.Background()
	token := func() (string, error) { return src.Token(ctx) }
	// want: Token answers tok at once, and once the request it may have
	// started has ended, the endpoint has had requests in all.
	want := func(step, tok string, requests int64) {
		t.Helper()
		got, err := token()
		if err != nil || got != tok {
			t.Fatalf("%s: token %q, %v; want %q", step, got, err, tok)
		}
		settle(t, src)
		if n := e.Requests.Load(); n != requests {
			t.Fatalf("%s: %d token requests, want %d", step, n, requests)
		}
	}

	want("first", "tok-1", 1)
	clk.advance(79 * time.Second)
	want("at 79% of its life", "tok-1", 1)
	clk.advance(2 * time.Second) // t=81s
	want("at 81%: the old token, and a refresh", "tok-1", 2)
	want("after the refresh", "tok-2", 2)

	// tok-2 came at t=81s: refresh from 161s, expiry at 181s.
	e.Fail(http.StatusServiceUnavailable, `{"error":"temporarily_unavailable","error_description":"maintenance"}`)
	clk.advance(81 * time.Second) // t=162s
	want("refresh due, endpoint failing", "tok-2", 3)
	want("within retryAfter of the failure", "tok-2", 3)
	clk.advance(retryAfter)
	want("after retryAfter", "tok-2", 4)

	clk.advance(20 * time.Second) // t=187s: tok-2 has expired
	_, err := token()
	if !errors.Is(err, ErrTokenEndpoint) || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "temporarily_unavailable") {
		t.Fatalf("an expired token and a failing endpoint: %v, want ErrTokenEndpoint naming the status and OAuth error", err)
	}
	if strings.Contains(err.Error(), e.Secret) || strings.Contains(err.Error(), "tok-") {
		t.Fatalf("the error %q carries a secret or token", err)
	}
	e.Fail(0, "")
	want("endpoint back", "tok-6", 6)
}

// TestClientCredentialsFailures: each way an endpoint fails is
// ErrTokenEndpoint, naming what went wrong and never the client secret or
// the answer's body.
func TestClientCredentialsFailures(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		status int
		body   string
		down   bool
		want   string
	}{
		{"server error", http.StatusInternalServerError, `stack trace with internals`, false, "HTTP 500"},
		{"OAuth error", http.StatusBadRequest, `{"error":"invalid_scope","error_description":"no such scope"}`, false, "invalid_scope: no such scope"},
		{"no access token", http.StatusOK, `{"token_type":"Bearer"}`, false, "access_token"},
		{"not JSON", http.StatusOK, `<html>login</html>`, false, "oauthbearer: no token from the token endpoint"},
		{"endpoint down", 0, "", true, "connection refused"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := oauthtest.NewEndpoint(t, oauthtest.Config{ExpiresIn: 100})
			e.Fail(c.status, c.body)
			if c.down {
				e.Close()
			}
			_, err := source(e, newClock()).Token(context.Background())
			if !errors.Is(err, ErrTokenEndpoint) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want ErrTokenEndpoint naming %q", err, c.want)
			}
			if strings.Contains(err.Error(), e.Secret) || (c.body != "" && strings.Contains(err.Error(), c.body)) {
				t.Fatalf("the error %q carries the secret or the answer's body", err)
			}
		})
	}
}

// TestClientCredentialsOneFetch: authentications that all need a token at
// once share one request to the endpoint; a caller whose context ends stops
// waiting, and the request it started goes on for the others.
func TestClientCredentialsOneFetch(t *testing.T) {
	t.Parallel()
	e := oauthtest.NewEndpoint(t, oauthtest.Config{ExpiresIn: 100, Gate: make(chan struct{})})
	src := source(e, newClock())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := src.Token(ctx); !errors.Is(err, context.Canceled) || !errors.Is(err, ErrTokenEndpoint) {
		t.Fatalf("a canceled caller: %v, want ErrTokenEndpoint and context.Canceled", err)
	}
	var wg sync.WaitGroup
	got := make([]string, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok, err := src.Token(context.Background())
			if err != nil {
				t.Errorf("caller %d: %v", i, err)
			}
			got[i] = tok
		}()
	}
	wait.For(t, 10*time.Second, "the first token request", func() string {
		if e.Requests.Load() == 0 {
			return "none yet"
		}
		return ""
	})
	close(e.Gate)
	wg.Wait()
	if n := e.Requests.Load(); n != 1 {
		t.Fatalf("%d token requests for callers that came at once, want 1", n)
	}
	for i, tok := range got {
		if tok != "tok-1" {
			t.Errorf("caller %d got %q, want tok-1", i, tok)
		}
	}
}

// TestClientCredentialsJWTExpiry: without expires_in, a JWT's exp claim
// dates the token; without either it is fetched for every authentication.
func TestClientCredentialsJWTExpiry(t *testing.T) {
	t.Parallel()
	clk := newClock()
	cases := []struct {
		name     string
		mint     func(n int64) string
		requests int64 // after three calls, the last 90s after the first
	}{
		{"exp in 100s", func(n int64) string {
			return oauthtest.UnsecuredJWT(map[string]any{"sub": "agent", "n": n, "exp": clk.now().Add(100 * time.Second).Unix()})
		}, 2},
		{"exp in 200s", func(n int64) string {
			return oauthtest.UnsecuredJWT(map[string]any{"sub": "agent", "n": n, "exp": clk.now().Add(200 * time.Second).Unix()})
		}, 1},
		{"opaque, no expiry", func(n int64) string { return fmt.Sprintf("opaque-%d", n) }, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Not parallel: the cases share the clock.
			e := oauthtest.NewEndpoint(t, oauthtest.Config{Mint: c.mint})
			start := clk.now()
			src := source(e, clk)
			for _, at := range []time.Duration{0, 10 * time.Second, 90 * time.Second} {
				clk.advance(start.Add(at).Sub(clk.now()))
				if _, err := src.Token(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			settle(t, src)
			if n := e.Served.Load(); n != c.requests {
				t.Fatalf("%d tokens served, want %d", n, c.requests)
			}
		})
	}
}

// TestSubject reads the sub claim, and says why when there is none,
// without quoting the token.
func TestSubject(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, token, want string
		wantErr           bool
	}{
		{"unsecured JWT", oauthtest.UnsecuredJWT(map[string]any{"sub": "baton-replicator", "exp": 1}), "baton-replicator", false},
		{"signed JWT", oauthtest.UnsecuredJWT(map[string]any{"sub": "svc"}) + "c2lnbmF0dXJl", "svc", false},
		{"padded payload", "e30." + base64.URLEncoding.EncodeToString([]byte(`{"sub":"p"}`)) + ".", "p", false},
		{"no sub", oauthtest.UnsecuredJWT(map[string]any{"aud": "kafka"}), "", true},
		{"opaque", "opaque-secret-token", "", true},
		{"bad base64", "a.!!!secret.b", "", true},
		{"not JSON", "a." + base64.RawURLEncoding.EncodeToString([]byte("secret")) + ".", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := Subject(c.token)
			if c.wantErr {
				if !errors.Is(err, ErrNoSubject) || strings.Contains(err.Error(), "secret") {
					t.Fatalf("Subject = %q, %v; want ErrNoSubject without the token", got, err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("Subject = %q, %v; want %q", got, err, c.want)
			}
		})
	}
}
