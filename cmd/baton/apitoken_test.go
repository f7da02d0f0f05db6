package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A control plane whose HTTP API is reachable from the network refuses to
// start without API tokens, naming the flags; loopback needs none.
func TestHTTPAPIOffLoopbackNeedsTokens(t *testing.T) {
	t.Parallel()
	root := newRootCmd()
	root.SetArgs([]string{"controlplane", "--source", "127.0.0.1:1", "--destination", "127.0.0.1:2", "--http", "0.0.0.0:0"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := root.ExecuteContext(ctx)
	if err == nil || !strings.HasPrefix(err.Error(), "--http 0.0.0.0:0 ") || !strings.Contains(err.Error(), "--api-tokens-file") || !strings.Contains(err.Error(), "--api-insecure") {
		t.Fatalf("got %v, want a refusal naming --http, --api-tokens-file and --api-insecure", err)
	}
	for addr, want := range map[string]bool{
		"127.0.0.1:18080": true, "[::1]:18080": true, "localhost:18080": true, "127.1.2.3:1": true,
		":18080": false, "0.0.0.0:18080": false, "10.0.0.5:18080": false, "[::]:18080": false, "example.com:80": false,
	} {
		if got := loopback(addr); got != want {
			t.Errorf("loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// The CLI sends the token from --token-file, else from BATON_API_TOKEN.
func TestCLISendsTheAPIToken(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
		if r.Header.Get("Authorization") == "" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"a bearer token is required"}`))
			return
		}
		_, _ = w.Write([]byte(`[]`))
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) error {
		root := newRootCmd()
		root.SetOut(&bytes.Buffer{})
		root.SetArgs(append([]string{"topic", "list", "--server", srv.URL}, args...))
		return root.ExecuteContext(context.Background())
	}
	t.Setenv(apiTokenEnv, "")
	if err := run(); err == nil || !strings.Contains(err.Error(), "bearer token") {
		t.Errorf("without a token: %v, want the server's refusal", err)
	}
	if err := run("--token-file", file); err != nil {
		t.Error(err)
	}
	t.Setenv(apiTokenEnv, "from-env")
	if err := run(); err != nil {
		t.Error(err)
	}
	if err := run("--token-file", file); err != nil {
		t.Error(err)
	}
	want := []string{"", "Bearer from-file", "Bearer from-env", "Bearer from-file"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Authorization headers %q, want %q", got, want)
	}
}
