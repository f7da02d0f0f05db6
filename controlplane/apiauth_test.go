package controlplane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
)

func tokenSum(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}

// With API tokens, a request needs a known bearer token (401 without),
// a read-only token may read but not write (403), and what an operator
// does is recorded under its token's name, whatever actor it declares.
func TestAPITokens(t *testing.T) {
	t.Parallel()
	tokens, err := ParseAPITokens([]byte(`
- {name: dashboard, role: read-only, sha256: ` + tokenSum("view-secret") + `}
- {name: ci-bot, role: operator, sha256: ` + tokenSum("op-secret") + `}
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cp, err := New(ctx, WithStore(NewMemStore()), WithReplication(idleReplication{}), APITokens(tokens),
		Logger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	srv := httptest.NewServer(cp.Handler())
	t.Cleanup(srv.Close)
	client := func(token string) *APIClient { return &APIClient{Base: srv.URL, Token: token} }

	tests := []struct {
		name   string
		token  string
		call   func(c *APIClient) error
		status int // 0: success
	}{
		{"no token", "", func(c *APIClient) error { _, err := c.Topics(ctx); return err }, http.StatusUnauthorized},
		{"unknown token", "guess", func(c *APIClient) error { _, err := c.Topics(ctx); return err }, http.StatusUnauthorized},
		{"read-only lists", "view-secret", func(c *APIClient) error { _, err := c.Topics(ctx); return err }, 0},
		{"read-only reads agents", "view-secret", func(c *APIClient) error { _, err := c.Agents(ctx); return err }, 0},
		{"read-only adds", "view-secret", func(c *APIClient) error { _, err := c.Add(ctx, TopicSpec{Name: "t1"}, "x"); return err }, http.StatusForbidden},
		{"operator adds", "op-secret", func(c *APIClient) error { _, err := c.Add(ctx, TopicSpec{Name: "t2"}, "mallory"); return err }, 0},
		{"read-only aborts", "view-secret", func(c *APIClient) error { _, err := c.Op(ctx, "t2", "abort", "x", "", ""); return err }, http.StatusForbidden},
	}
	for _, tt := range tests {
		err := tt.call(client(tt.token))
		var ae *APIError
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
	err = client("view-secret").Events(ctx, "t2", false, func(e Event) error { actors = append(actors, e.Actor); return nil })
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
func TestParseAPITokensRefuses(t *testing.T) {
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
		_, err := ParseAPITokens([]byte(tt.file))
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want ErrBadConfig containing %q", tt.file, err, tt.want)
		}
	}
}
