package httpapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/internal/testcert"
	"github.com/baton-kafka/baton/internal/testlog"
	"github.com/baton-kafka/baton/migration"
)

// With API tokens, a request needs a known bearer token (401 without),
// a read-only token may read but not write (403), and what an operator
// does is recorded under its token's name, whatever actor it declares.
func TestAPITokens(t *testing.T) {
	t.Parallel()
	tokens, err := ParseTokens([]byte(`
- {name: dashboard, role: read-only, sha256: ` + tokenSum("view-secret") + `}
- {name: ci-bot, role: operator, sha256: ` + tokenSum("op-secret") + `}
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cp := newControlPlane(t, idleReplication{})
	srv := httptest.NewServer(New(cp, Tokens(tokens), Logger(quiet)))
	t.Cleanup(srv.Close)
	client := func(token string) *Client { return &Client{Base: srv.URL, Token: token} }

	tests := []struct {
		name   string
		token  string
		call   func(c *Client) error
		status int // 0: success
	}{
		{"no token", "", func(c *Client) error { _, err := c.Topics(ctx); return err }, http.StatusUnauthorized},
		{"unknown token", "guess", func(c *Client) error { _, err := c.Topics(ctx); return err }, http.StatusUnauthorized},
		{"read-only lists", "view-secret", func(c *Client) error { _, err := c.Topics(ctx); return err }, 0},
		{"read-only reads agents", "view-secret", func(c *Client) error { _, err := c.Agents(ctx); return err }, 0},
		{"read-only adds", "view-secret", func(c *Client) error { _, err := c.Add(ctx, controlplane.TopicSpec{Name: "t1"}, "x"); return err }, http.StatusForbidden},
		{"operator adds", "op-secret", func(c *Client) error { _, err := c.Add(ctx, controlplane.TopicSpec{Name: "t2"}, "mallory"); return err }, 0},
		{"read-only aborts", "view-secret", func(c *Client) error { _, err := c.Op(ctx, "t2", "abort", "x", "", ""); return err }, http.StatusForbidden},
	}
	for _, tt := range tests {
		err := tt.call(client(tt.token))
		var ae *Error
		switch {
		case tt.status == 0 && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.status != 0 && (!errors.As(err, &ae) || ae.Status != tt.status):
			t.Errorf("%s: %v, want status %d", tt.name, err, tt.status)
		case tt.status == http.StatusUnauthorized && !strings.Contains(ae.Message, "bearer token"):
			t.Errorf("%s: %q does not say a token is needed", tt.name, ae.Message)
		case tt.status == http.StatusForbidden && !strings.Contains(ae.Message, "dashboard is read-only"):
			t.Errorf("%s: %q does not name the caller and its role", tt.name, ae.Message)
		}
	}
	if ts := cp.Topics(); len(ts) != 1 || ts[0].Name != "t2" {
		t.Fatalf("topics %v, want only t2 (the read-only add must not have happened)", cp.Topics())
	}
	var actors []string
	err = client("view-secret").Events(ctx, "t2", false, func(e controlplane.Event) error { actors = append(actors, e.Actor); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(actors) == 0 || actors[0] != "ci-bot" {
		t.Fatalf("t2's events record actors %v, want ci-bot (the token's name, not the declared mallory)", actors)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/topics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("WWW-Authenticate"); got != `Bearer realm="baton"` {
		t.Errorf("401 without WWW-Authenticate: %q", got)
	}
}

// A bad token file is refused, naming the entry and the field.
func TestParseTokensRefuses(t *testing.T) {
	t.Parallel()
	sum := tokenSum("x")
	tests := []struct{ file, want string }{
		{``, "no tokens"},
		{`[{name: a, role: operator, sha256: ` + sum + `, token: x}]`, "field token not found"},
		{`[{role: operator, sha256: ` + sum + `}]`, "tokens[0]: name is required"},
		{`[{name: a, role: operator, sha256: ` + sum + `}, {name: a, role: read-only, sha256: ` + sum + `}]`, `tokens[1]: name "a" is used twice`},
		{`[{name: a, role: admin, sha256: ` + sum + `}]`, `tokens[0] (a): role "admin"`},
		{`[{name: a, role: operator, sha256: abc}]`, "tokens[0] (a): sha256: want 64 hex digits"},
	}
	for _, tt := range tests {
		_, err := ParseTokens([]byte(tt.file))
		if !errors.Is(err, controlplane.ErrBadConfig) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want controlplane.ErrBadConfig containing %q", tt.file, err, tt.want)
		}
	}
}

// startHTTPS serves the API with opts of a control plane over TLS with a
// certificate of ca, verifying the client certificates ca signed when
// clients send one (the way `baton controlplane --http-client-ca` does).
func startHTTPS(t *testing.T, ca testcert.CA, opts ...Opt) (*controlplane.ControlPlane, *httptest.Server, *testlog.Buffer) {
	t.Helper()
	logs := &testlog.Buffer{}
	cp := newControlPlane(t, caughtUp{})
	srv := httptest.NewUnstartedServer(New(cp, append([]Opt{Logger(slog.New(slog.NewTextHandler(logs, nil)))}, opts...)...))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server}, ClientCAs: ca.Pool,
		ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return cp, srv, logs
}

// httpsClient is an API client trusting roots that presents cert (none if
// nil) and token (none if "").
func httpsClient(srv *httptest.Server, roots *x509.CertPool, cert *tls.Certificate, token string) *Client {
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &Client{Base: srv.URL, Token: token, HTTP: &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}}
}

// startIdentities serves over TLS, with tokens and identities, a control
// plane with a topic for each caller TestAPIIdentities migrates as.
func startIdentities(t *testing.T, ca testcert.CA) (*controlplane.ControlPlane, *httptest.Server, *testlog.Buffer) {
	t.Helper()
	tokens, err := ParseTokens([]byte(`
- {name: alice, role: read-only, sha256: ` + tokenSum("alice-token") + `}
- {name: ci-bot, role: operator, sha256: ` + tokenSum("op-secret") + `}
`))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := ParseIdentities([]byte(`
- {identity: "spiffe://example.org/ci/*", name: ci, role: operator}
- {identity: spiffe://example.org/ci/intern, name: intern, role: read-only}
- {identity: spiffe://example.org/ops/alice, name: alice, role: operator}
- {identity: dashboard.example.org, name: dashboard, role: read-only}
`))
	if err != nil {
		t.Fatal(err)
	}
	cp, srv, logs := startHTTPS(t, ca, Tokens(tokens), Identities(ids))
	for _, topic := range []string{"m-dashboard", "m-alice", "m-ci", "m-intern", "m-both"} {
		if _, err := cp.AddTopic(context.Background(), controlplane.TopicSpec{Name: topic}, "setup"); err != nil {
			t.Fatal(err)
		}
	}
	return cp, srv, logs
}

// wantInitiatedBy checks the actor of each topic's cutover ("": none).
func wantInitiatedBy(t *testing.T, cp *controlplane.ControlPlane, actors map[string]string) {
	t.Helper()
	for topic, want := range actors {
		evs, err := cp.Events(context.Background(), topic, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, e := range evs {
			if e.Kind == controlplane.EventInitiated {
				got = e.Actor
			}
		}
		if got != want {
			t.Errorf("%s: the cutover was initiated by %q, want %q (\"\": not at all; never the declared mallory)", topic, got, want)
		}
	}
}

// With API identities, a verified client certificate names the caller:
// its role decides what it may do, and what it does is recorded under the
// rule's name. A certificate that maps to no role gets 403 naming it, no
// credentials 401; a token still works alone, and beside a certificate
// both must hold and name one caller.
func TestAPIIdentities(t *testing.T) {
	t.Parallel()
	ca, stranger := testcert.New(t), testcert.New(t)
	cp, srv, logs := startIdentities(t, ca)
	ctx := context.Background()
	alice := ca.Client(t, "alice", "spiffe://example.org/ops/alice")
	dashboard := ca.Client(t, "", "dashboard.example.org")
	build := ca.Client(t, "", "spiffe://example.org/ci/build-7")
	intern := ca.Client(t, "", "spiffe://example.org/ci/intern")
	unmapped := ca.Client(t, "mallory")
	foreign := stranger.Client(t, "", "spiffe://example.org/ops/alice")

	list := func(c *Client) error { _, err := c.Topics(ctx); return err }
	migrate := func(topic string) func(c *Client) error {
		return func(c *Client) error { _, err := c.Op(ctx, topic, "migrate", "mallory", "", ""); return err }
	}
	tests := []struct {
		name   string
		cert   *tls.Certificate
		token  string
		call   func(c *Client) error
		status int    // 0: success; -1: no answer (the TLS handshake fails)
		msg    string // in the refusal
	}{
		{"read-only identity (DNS SAN) lists", &dashboard, "", list, 0, ""},
		{"read-only identity reads agents", &dashboard, "", func(c *Client) error { _, err := c.Agents(ctx); return err }, 0, ""},
		{"read-only identity migrates", &dashboard, "", migrate("m-dashboard"), http.StatusForbidden, "dashboard is read-only: POST /v1/topics/m-dashboard/migrate needs the operator role"},
		{"operator identity (URI SAN) migrates", &alice, "", migrate("m-alice"), 0, ""},
		{"pattern identity migrates", &build, "", migrate("m-ci"), 0, ""},
		{"an exact identity wins over an earlier pattern", &intern, "", migrate("m-intern"), http.StatusForbidden, "intern is read-only"},
		{"unknown identity lists", &unmapped, "", list, http.StatusForbidden, "the client certificate (mallory) maps to no role"},
		{"unknown identity migrates", &unmapped, "", migrate("m-alice"), http.StatusForbidden, "(mallory) maps to no role"},
		{"unknown identity with an operator token", &unmapped, "op-secret", list, http.StatusForbidden, "(mallory) maps to no role"},
		{"no credentials", nil, "", list, http.StatusUnauthorized, "a bearer token or a client certificate is required"},
		{"read-only token alone lists", nil, "alice-token", list, 0, ""},
		{"read-only token alone migrates", nil, "alice-token", migrate("m-both"), http.StatusForbidden, "alice is read-only"},
		{"operator token alone adds", nil, "op-secret", func(c *Client) error { _, err := c.Add(ctx, controlplane.TopicSpec{Name: "by-token"}, "x"); return err }, 0, ""},
		{"unknown token beside a mapped certificate", &alice, "guess", list, http.StatusUnauthorized, "unknown bearer token"},
		{"token and certificate of one caller read", &alice, "alice-token", list, 0, ""},
		{"token and certificate of one caller: the lesser role", &alice, "alice-token", migrate("m-both"), http.StatusForbidden, "alice is read-only"},
		{"token and certificate of two callers", &dashboard, "op-secret", list, http.StatusForbidden, "the bearer token is ci-bot's and the client certificate dashboard's"},
		{"certificate of a CA the server does not trust", &foreign, "", list, -1, ""},
	}
	t.Run("calls", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				err := tt.call(httpsClient(srv, ca.Pool, tt.cert, tt.token))
				var ae *Error
				switch {
				case tt.status == 0:
					if err != nil {
						t.Fatal(err)
					}
				case tt.status == -1:
					// The client sees the server's alert or its reset of
					// the connection, whichever comes first: either way,
					// no answer.
					if err == nil || errors.As(err, &ae) {
						t.Fatalf("%v, want the TLS handshake refused", err)
					}
				case !errors.As(err, &ae) || ae.Status != tt.status || !strings.Contains(ae.Message, tt.msg):
					t.Fatalf("%v, want status %d with %q", err, tt.status, tt.msg)
				}
			})
		}
	})

	wantInitiatedBy(t, cp, map[string]string{
		"m-alice": "alice", "m-ci": "ci (spiffe://example.org/ci/build-7)", "m-dashboard": "", "m-intern": "", "m-both": "",
	})
	if st, err := cp.Status("by-token"); err != nil {
		t.Errorf("the operator token's add: %v", err)
	} else if st.State != migration.Proxy {
		t.Errorf("by-token is %v, want PROXY", st.State)
	}
	if n := strings.Count(logs.String(), "HTTP API caller refused: the client certificate (mallory) maps to no role"); n != 1 {
		t.Errorf("the unmapped certificate was logged %d times, want once:\n%s", n, logs)
	}
}

// With identities and no tokens, a certificate is the only credential: a
// request without one gets 401 saying so (and no Bearer challenge), and a
// bearer token is refused rather than ignored.
func TestAPIIdentitiesWithoutTokens(t *testing.T) {
	t.Parallel()
	ca := testcert.New(t)
	ids, err := ParseIdentities([]byte(`[{identity: reader, name: reader, role: read-only}]`))
	if err != nil {
		t.Fatal(err)
	}
	_, srv, _ := startHTTPS(t, ca, Identities(ids))
	reader := ca.Client(t, "reader")
	tests := []struct {
		name   string
		cert   *tls.Certificate
		token  string
		status int
		msg    string
	}{
		{"certificate", &reader, "", http.StatusOK, ""},
		{"nothing", nil, "", http.StatusUnauthorized, "a client certificate is required: pass --cert-file and --key-file"},
		{"a token beside the certificate", &reader, "anything", http.StatusUnauthorized, "this control plane takes no bearer tokens"},
	}
	for _, tt := range tests {
		c := httpsClient(srv, ca.Pool, tt.cert, tt.token)
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/topics", nil)
		resp, err := c.send(req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		msg := ""
		if resp.StatusCode != http.StatusOK {
			msg = readError(resp).Error()
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status || !strings.Contains(msg, tt.msg) {
			t.Errorf("%s: %d %q, want %d with %q", tt.name, resp.StatusCode, msg, tt.status, tt.msg)
		}
		if h := resp.Header.Get("WWW-Authenticate"); h != "" {
			t.Errorf("%s: WWW-Authenticate %q from an API that takes no tokens", tt.name, h)
		}
	}
}

// A bad identity file is refused, naming the entry and the field.
func TestParseIdentitiesRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct{ file, want string }{
		{``, "no identities"},
		{`[{identity: a, name: a, role: operator, nodes: [x]}]`, "field nodes not found"},
		{`[{name: a, role: operator}]`, "identities[0]: identity is required"},
		{`[{identity: a, role: operator}]`, "identities[0] (a): name is required"},
		{`[{identity: a, name: a, role: admin}]`, `identities[0] (a): role "admin"`},
		{`[{identity: a, name: a, role: operator}, {identity: a, name: b, role: read-only}]`, `identities[1]: identity "a" is listed twice`},
		{`[{identity: "spiffe://x/[a", name: a, role: operator}]`, `identities[0] (spiffe://x/[a): pattern`},
	}
	for _, tt := range tests {
		_, err := ParseIdentities([]byte(tt.file))
		if !errors.Is(err, controlplane.ErrBadConfig) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want controlplane.ErrBadConfig containing %q", tt.file, err, tt.want)
		}
	}
}
