package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/httpapi"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/testcert"
	"github.com/baton-kafka/baton/internal/testlog"
	"github.com/baton-kafka/baton/internal/wait"
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

// runCLI runs the baton CLI in process and returns what it printed.
func runCLI(args ...string) (string, error) {
	var out bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// The CLI's --ca-file, --cert-file and --key-file and their environment
// variables: each flag wins over its variable, a variable is not used
// against an http:// server while a flag is refused there, and a missing
// or wrong file fails naming the flag or the variable. Not parallel: it
// sets the environment.
func TestCLIAPITLSFlags(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.New(t)
	caFile, flagCert, flagKey := ca.WriteFiles(t, dir, "flag", ca.Client(t, "from-flag"))
	_, envCert, envKey := ca.WriteFiles(t, dir, "env", ca.Client(t, "from-env"))
	var seen []string // the client certificates' names, request by request
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := "-"
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			name = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		seen = append(seen, name)
		_, _ = w.Write([]byte(`[]`))
	})
	tlsSrv := httptest.NewUnstartedServer(handler)
	tlsSrv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server}, ClientCAs: ca.Pool, ClientAuth: tls.VerifyClientCertIfGiven}
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	plain := httptest.NewServer(handler)
	defer plain.Close()

	t.Setenv(apiTokenEnv, "")
	for _, tc := range []struct {
		name string
		env  map[string]string // BATON_API_* beside the three below
		args []string
		want string // "": success; else in the error
		seen string // the client certificate the server saw ("-": none)
	}{
		{"files from the environment", map[string]string{apiCAEnv: caFile, apiCertEnv: envCert, apiKeyEnv: envKey},
			[]string{"--server", tlsSrv.URL}, "", "from-env"},
		{"flags win over the environment", map[string]string{apiCAEnv: "/nonexistent", apiCertEnv: envCert, apiKeyEnv: envKey},
			[]string{"--server", tlsSrv.URL, "--ca-file", caFile, "--cert-file", flagCert, "--key-file", flagKey}, "", "from-flag"},
		{"a CA alone", nil, []string{"--server", tlsSrv.URL, "--ca-file", caFile}, "", "-"},
		{"the environment against an http:// server", map[string]string{apiCAEnv: "/nonexistent", apiCertEnv: envCert},
			[]string{"--server", plain.URL}, "", "-"},
		{"a flag against an http:// server", nil, []string{"--server", plain.URL, "--ca-file", caFile},
			"--ca-file, --cert-file and --key-file are for an https:// --server", ""},
		{"a certificate without its key", nil, []string{"--server", tlsSrv.URL, "--ca-file", caFile, "--cert-file", flagCert},
			"--cert-file and --key-file go together", ""},
		{"a key from the environment without its certificate", map[string]string{apiKeyEnv: envKey}, []string{"--server", tlsSrv.URL, "--ca-file", caFile},
			"--cert-file and $BATON_API_KEY_FILE go together", ""},
		{"a missing CA file", nil, []string{"--server", tlsSrv.URL, "--ca-file", dir + "/nope.pem"}, "--ca-file: open ", ""},
		{"a missing CA file from the environment", map[string]string{apiCAEnv: dir + "/nope.pem"}, []string{"--server", tlsSrv.URL},
			"$BATON_API_CA_FILE: open ", ""},
		{"a key that is not the certificate's", nil, []string{"--server", tlsSrv.URL, "--ca-file", caFile, "--cert-file", flagCert, "--key-file", envKey},
			"--cert-file/--key-file: ", ""},
		{"no CA for the control plane's certificate", nil, []string{"--server", tlsSrv.URL},
			"not signed by a CA in the system's roots: pass the CA that signed it with --ca-file or $BATON_API_CA_FILE", ""},
		{"http:// to the HTTPS API", nil, []string{"--server", strings.Replace(tlsSrv.URL, "https://", "http://", 1)},
			"Client sent an HTTP request to an HTTPS server", ""},
	} {
		for _, env := range []string{apiCAEnv, apiCertEnv, apiKeyEnv} {
			t.Setenv(env, tc.env[env])
		}
		seen = nil
		_, err := runCLI(append([]string{"topic", "list"}, tc.args...)...)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		case tc.want == "" && (len(seen) != 1 || seen[0] != tc.seen):
			t.Errorf("%s: the server saw client certificates %q, want %q", tc.name, seen, tc.seen)
		}
	}
}

// tokenLine is an API token file entry for token.
func tokenLine(name, role, token string) string {
	sum := sha256.Sum256([]byte(token))
	return "- {name: " + name + ", role: " + role + ", sha256: " + hex.EncodeToString(sum[:]) + "}\n"
}

// A failed request to an HTTPS control plane names the flag that fixes it;
// errors it has no hint for pass unchanged, so that http.Client still
// reads those it reads by type (tls.RecordHeaderError: an http:// server
// answering an https:// --server).
func TestAPIHints(t *testing.T) {
	t.Parallel()
	withCert := hintTransport{ca: namedFile{"--ca-file", "/etc/ca.pem"}, cert: namedFile{"$BATON_API_CERT_FILE", "/home/op/me.pem"}}
	bare := hintTransport{ca: namedFile{name: "--ca-file"}, cert: namedFile{name: "--cert-file"}}
	alert := &net.OpError{Op: "remote error", Err: errors.New("tls: unknown certificate authority")}
	for _, tc := range []struct {
		name string
		h    hintTransport
		err  error
		want string // "": unchanged
	}{
		{"unknown CA, --ca-file given", withCert, &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}},
			"not signed by a CA in --ca-file (/etc/ca.pem): pass the CA that signed it with --ca-file or $BATON_API_CA_FILE"},
		{"unknown CA, system roots", bare, &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, "not signed by a CA in the system's roots"},
		{"no system roots", bare, &tls.CertificateVerificationError{Err: x509.SystemRootsError{}}, "--ca-file"},
		{"another host's certificate", bare, &tls.CertificateVerificationError{Err: x509.HostnameError{Host: "cp"}},
			"--server must name a host the control plane's certificate carries"},
		{"an alert after a client certificate", withCert, fmt.Errorf("readLoopPeekFailLocked: %w", alert),
			"the control plane refused the client certificate ($BATON_API_CERT_FILE /home/op/me.pem)"},
		{"an alert without one", bare, alert, ""},
		{"an http:// server", withCert, tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, ""},
		{"a refused connection", withCert, &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, ""},
	} {
		got := tc.h.hint(tc.err)
		switch {
		case tc.want == "" && got != tc.err:
			t.Errorf("%s: %v, want it unchanged", tc.name, got)
		case tc.want != "" && (!strings.Contains(got.Error(), tc.want) || !errors.Is(got, tc.err)):
			t.Errorf("%s: %v, want %q wrapping the error", tc.name, got, tc.want)
		}
	}
}

// The CLI against a real `baton controlplane` serving its API over HTTPS
// with client certificates mapped to callers: a read-only identity lists
// but may not migrate, an operator identity migrates and the event log
// records its mapped name, an unmapped certificate gets 403 naming it, no
// credentials 401, a token-only client still gets in, and TLS mistakes
// fail naming the flag that fixes them.
func TestCLIOverHTTPS(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a control plane process with embedded etcd and kfake clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	ca, other := testcert.New(t), testcert.New(t)
	caFile, srvCert, srvKey := ca.WriteFiles(t, dir, "server", ca.Server)
	files := func(name string, cert tls.Certificate, from testcert.CA) []string {
		sub := filepath.Join(dir, name)
		if err := os.Mkdir(sub, 0o700); err != nil {
			t.Fatal(err)
		}
		_, c, k := from.WriteFiles(t, sub, name, cert)
		return []string{"--cert-file", c, "--key-file", k}
	}
	operator := files("operator", ca.Client(t, "", "spiffe://example.org/ns/ops/sa/deploy"), ca)
	viewer := files("viewer", ca.Client(t, "viewer.example.org"), ca)
	unmapped := files("unmapped", ca.Client(t, "mallory"), ca)
	foreign := files("foreign", other.Client(t, "", "spiffe://example.org/ns/ops/sa/deploy"), other)
	ids := writeFile(t, dir, "identities.yaml", `
- {identity: "spiffe://example.org/ns/ops/sa/deploy", name: deployer, role: operator}
- {identity: viewer.example.org, name: viewer, role: read-only}
`)
	tokens := writeFile(t, dir, "tokens.yaml", tokenLine("dashboard", "read-only", "dash-secret"))
	tokenFile := writeFile(t, dir, "token", "dash-secret\n")

	src, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	dst, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dst.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(src.Addrs()...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("1")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	api, log := startControlPlane(t, "--source", src.Bootstrap(), "--destination", dst.Bootstrap(), "--write-guard", "none",
		"--data-dir", filepath.Join(dir, "etcd"), "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--http-tls-cert", srvCert, "--http-tls-key", srvKey, "--http-client-ca", caFile,
		"--api-identities", ids, "--api-tokens-file", tokens)
	if !strings.HasPrefix(api, "https://127.0.0.1:") {
		t.Fatalf("the control plane serves its API at %q, want https://", api)
	}
	cli := func(who []string, args ...string) (string, error) {
		return runCLI(append(append(args, "--server", api), who...)...)
	}
	withCA := func(who []string) []string { return append([]string{"--ca-file", caFile}, who...) }

	steps := []struct {
		name string
		who  []string
		args []string
		want string // "": success; else in the error
		out  string // in the output
	}{
		{"the operator adds", withCA(operator), []string{"topic", "add", "orders"}, "", "orders"},
		{"the viewer lists", withCA(viewer), []string{"topic", "list"}, "", "orders"},
		{"the viewer reads agents", withCA(viewer), []string{"agents"}, "", "NODE"},
		{"the viewer migrates", withCA(viewer), []string{"topic", "migrate", "orders"}, "viewer is read-only: POST /v1/topics/orders/migrate needs the operator role", ""},
		{"an unmapped certificate", withCA(unmapped), []string{"topic", "list"}, "the client certificate (mallory) maps to no role", ""},
		{"no credentials", withCA(nil), []string{"topic", "list"}, "a bearer token or a client certificate is required", ""},
		{"a token alone", withCA([]string{"--token-file", tokenFile}), []string{"topic", "list"}, "", "orders"},
		{"a token alone migrates", withCA([]string{"--token-file", tokenFile}), []string{"topic", "migrate", "orders"}, "dashboard is read-only", ""},
		{"no --ca-file", operator, []string{"topic", "list"}, "--ca-file", ""},
	}
	for _, s := range steps {
		out, err := cli(s.who, s.args...)
		t.Logf("%s: %v", s.name, err)
		switch {
		case s.want == "" && err != nil:
			t.Fatalf("%s: %v\ncontrol plane log:\n%s", s.name, err, log)
		case s.want != "" && (err == nil || !strings.Contains(err.Error(), s.want)):
			t.Errorf("%s: %v, want an error containing %q", s.name, err, s.want)
		case !strings.Contains(out, s.out):
			t.Errorf("%s: printed %q, want %q in it", s.name, out, s.out)
		}
	}

	// A certificate of another CA fails the handshake: no answer from the
	// API. Which error the client sees can vary (the control plane's
	// alert, or its reset of the connection if that arrives first); when
	// it is the alert, the hint names the flag.
	_, err = cli(withCA(foreign), "topic", "list")
	var ae *httpapi.Error
	if err == nil || errors.As(err, &ae) || strings.Contains(err.Error(), "http2:") {
		t.Errorf("a certificate of another CA: %v, want the handshake refused (over HTTP/1.1, whose errors keep the alert)", err)
	} else if strings.Contains(err.Error(), "remote error: tls:") && !strings.Contains(err.Error(), "the control plane refused the client certificate (--cert-file ") {
		t.Errorf("a certificate of another CA: %v does not name --cert-file", err)
	}

	// The operator migrates once the replicator has caught up (the gate
	// refuses before), and the log records the mapped name.
	var migrated string
	wait.For(t, 2*time.Minute, "the operator's migrate to pass the gate", func() string {
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
		out, err := cli(withCA(operator), "topic", "migrate", "orders")
		if errors.As(err, &ae) && ae.Status == http.StatusConflict && strings.Contains(ae.Message, "gate refused") {
			return err.Error()
		}
		if err != nil {
			t.Fatalf("migrate: %v", err)
		}
		migrated = out
		return ""
	})
	if !strings.Contains(migrated, "MIGRATING") && !strings.Contains(migrated, "COMPLETE") {
		t.Errorf("migrate printed %q, want the topic MIGRATING", migrated)
	}
	out, err := cli(withCA(viewer), "events", "--topic", "orders", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	actors := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e controlplane.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		actors[e.Kind] = e.Actor
	}
	if actors[controlplane.EventAdded] != "deployer" || actors[controlplane.EventInitiated] != "deployer" {
		t.Errorf("events record actors %v, want deployer (the operator identity's name) for added and initiated", actors)
	}
	if n := strings.Count(log.String(), "HTTP API caller refused: the client certificate (mallory) maps to no role"); n != 1 {
		t.Errorf("the unmapped certificate was logged %d times, want once", n)
	}
}
