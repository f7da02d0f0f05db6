package httpapi

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The console is served to anyone and shows nothing without a token: its
// files carry no data and the API behind it still refuses a request
// without credentials.
func TestConsoleFilesArePublicAndTheAPIIsNot(t *testing.T) {
	t.Parallel()
	tokens, err := ParseTokens([]byte(`[{name: op, role: operator, sha256: ` + tokenSum("op-secret") + `}]`))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(newControlPlane(t, idleReplication{}), Tokens(tokens), Logger(quiet)))
	t.Cleanup(srv.Close)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	tests := []struct {
		method, path, token string
		status              int
		contentType, body   string // prefix, substring
	}{
		{"GET", "/console/", "", http.StatusOK, "text/html", `<script src="app.js"`},
		{"GET", "/console/app.js", "", http.StatusOK, "text/javascript", "/v1/events?follow=1"},
		{"GET", "/console/style.css", "", http.StatusOK, "text/css", ".badge"},
		{"GET", "/console", "", http.StatusMovedPermanently, "", ""},
		{"GET", "/console/nothing-here", "", http.StatusNotFound, "", ""},
		{"POST", "/console/", "", http.StatusUnauthorized, "application/json", "bearer token is required"},
		{"GET", "/v1/topics", "", http.StatusUnauthorized, "application/json", "bearer token is required"},
		{"GET", "/v1/whoami", "", http.StatusUnauthorized, "application/json", "bearer token is required"},
		{"GET", "/v1/overview", "wrong", http.StatusUnauthorized, "application/json", "unknown bearer token"},
		{"GET", "/v1/whoami", "op-secret", http.StatusOK, "application/json", `"name":"op","role":"operator","credentials":true`},
		{"GET", "/v1/overview", "op-secret", http.StatusOK, "application/json", `"topics":[]`},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, srv.URL+tt.path, nil)
		if tt.token != "" {
			req.Header.Set("Authorization", "Bearer "+tt.token)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body bytes.Buffer
		_, _ = body.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), tt.contentType) || !strings.Contains(body.String(), tt.body) {
			t.Errorf("%s %s (token %q): %d %s %q, want %d %s containing %q", tt.method, tt.path, tt.token,
				resp.StatusCode, resp.Header.Get("Content-Type"), body.String(), tt.status, tt.contentType, tt.body)
		}
		if strings.HasPrefix(tt.path, "/console/") && tt.method == "GET" && !strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
			t.Errorf("%s: no Content-Security-Policy forbidding framing: %q", tt.path, resp.Header.Get("Content-Security-Policy"))
		}
	}
}
