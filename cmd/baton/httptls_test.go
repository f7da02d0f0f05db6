package main

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-kafka/baton/internal/testcert"
	"github.com/baton-kafka/baton/internal/testlog"
)

// writeFile writes b to name in dir and returns its path.
func writeFile(t *testing.T, dir, name, b string) string {
	t.Helper()
	file := filepath.Join(dir, name)
	if err := os.WriteFile(file, []byte(b), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// The control plane's --http-tls-*, --http-client-ca and --api-identities:
// misuse is refused naming the flags, and the TLS they make serves TLS 1.2
// and up, verifies a client certificate when one is sent and takes a
// client without one (a token caller).
func TestHTTPSecurityFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, other := testcert.New(t), testcert.New(t)
	caFile, srvCert, srvKey := ca.WriteFiles(t, dir, "server", ca.Server)
	ids := writeFile(t, dir, "ids.yaml", "[{identity: ops, name: ops, role: operator}]")
	for _, tc := range []struct {
		cert, key, clientCA, identities string
		want                            string
	}{
		{"", "", caFile, "", "--http-client-ca and --api-identities need --http-tls-cert and --http-tls-key"},
		{"", "", "", ids, "--http-client-ca and --api-identities need --http-tls-cert and --http-tls-key"},
		{srvCert, "", "", "", "--http-tls-cert and --http-tls-key go together"},
		{srvCert, caFile, "", "", "--http-tls-cert/--http-tls-key: "},
		{srvCert, srvKey, "", ids, "--api-identities needs --http-client-ca"},
		{srvCert, srvKey, caFile, "", "--http-client-ca needs --api-identities"},
		{srvCert, srvKey, dir + "/nope.pem", ids, "--http-client-ca: "},
		{srvCert, srvKey, caFile, caFile, "--api-identities: "},
	} {
		if _, _, err := httpSecurity(tc.cert, tc.key, tc.clientCA, tc.identities); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("httpSecurity(%q, %q, %q, %q) = %v, want an error containing %q", tc.cert, tc.key, tc.clientCA, tc.identities, err, tc.want)
		}
	}
	if cfg, got, err := httpSecurity("", "", "", ""); cfg != nil || got != nil || err != nil {
		t.Errorf("no flags: %v, %v, %v; want plain HTTP", cfg, got, err)
	}

	cfg, got, err := httpSecurity(srvCert, srvKey, caFile, ids)
	if err != nil || len(got) != 1 || got[0].Name != "ops" {
		t.Fatalf("httpSecurity: %v, %v", got, err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); _, _ = c.Read(make([]byte, 1)); _ = c.Close() }()
		}
	}()
	client, foreign := ca.Client(t, "ops"), other.Client(t, "ops")
	for _, tc := range []struct {
		name string
		cfg  *tls.Config
		ok   bool
	}{
		{"TLS 1.2 without a client certificate", &tls.Config{RootCAs: ca.Pool, MaxVersion: tls.VersionTLS12}, true},
		{"TLS 1.3 with the CA's client certificate", &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{client}}, true},
		{"TLS 1.1", &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}, false},
		{"a client certificate of another CA", &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{foreign}}, false},
	} {
		err := handshake(ln.Addr().String(), tc.cfg)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// handshake dials addr with cfg and returns the handshake's outcome as the
// client sees it: with TLS 1.3 the server's refusal of a client
// certificate arrives after the client's side is done, so one read waits
// for it.
func handshake(addr string, cfg *tls.Config) error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	return nil
}

// The start guard: an API reachable from the network needs credentials
// (tokens or certificate identities) unless --api-insecure, and bearer
// tokens over plain HTTP off loopback are warned about once.
func TestHTTPGuard(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr                            string
		tokens, identities, tls, unsafe bool
		err                             string // "": started
		warn                            bool
	}{
		{addr: "0.0.0.0:18080", err: "--http 0.0.0.0:18080 is reachable from the network and the API takes no credentials"},
		{addr: "0.0.0.0:18080", tls: true, err: "--api-insecure to accept that"},
		{addr: "0.0.0.0:18080", unsafe: true},
		{addr: "0.0.0.0:18080", identities: true, tls: true},
		{addr: "0.0.0.0:18080", tokens: true, warn: true},
		{addr: "0.0.0.0:18080", tokens: true, unsafe: true, warn: true},
		{addr: "0.0.0.0:18080", tokens: true, tls: true},
		{addr: "0.0.0.0:18080", tokens: true, identities: true, tls: true},
		{addr: "127.0.0.1:18080"},
		{addr: "127.0.0.1:18080", tokens: true},
	} {
		var log testlog.Buffer
		err := httpGuard(slog.New(slog.NewTextHandler(&log, nil)), tc.addr, tc.tokens, tc.identities, tc.tls, tc.unsafe)
		switch {
		case tc.err == "" && err != nil, tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%+v: %v, want %q", tc, err, tc.err)
		case tc.err != "" && !strings.Contains(err.Error(), "--api-tokens-file") || tc.err != "" && !strings.Contains(err.Error(), "--api-identities"):
			t.Errorf("%+v: %v does not name the credential flags", tc, err)
		}
		warned := strings.Count(log.String(), "level=WARN msg=\"the HTTP API takes bearer tokens over plain HTTP")
		if want := map[bool]int{true: 1}[tc.warn]; warned != want || tc.warn && !strings.Contains(log.String(), "--http-tls-cert") {
			t.Errorf("%+v: %d warnings, want %d naming --http-tls-cert:\n%s", tc, warned, want, log.String())
		}
	}
}
