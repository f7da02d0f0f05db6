package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-kafka/baton/internal/oauthbearer"
	"github.com/baton-kafka/baton/internal/oauthtest"
)

// TestOAuthFlags: --destination-sasl-mechanism OAUTHBEARER with each token
// source gives one SASL option whose mechanism sends the source's token,
// and the principal is User:<the token's sub>; every bad combination is
// refused naming the flags, and no error carries the client secret or a
// token.
func TestOAuthFlags(t *testing.T) {
	// Not parallel: cases set $BATON_DESTINATION_SASL_OAUTH_CLIENT_SECRET.
	const secret = "client-s3cret:/+" // oauthtest's default
	dir := t.TempDir()
	exp := time.Now().Add(time.Hour).Unix()
	jwt := oauthtest.UnsecuredJWT(map[string]any{"sub": "baton-repl", "exp": exp})
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	jwtFile, opaqueFile, emptyFile := file("jwt", jwt+"\n"), file("opaque", "opaque-token"), file("empty", "\n")
	secretFile, missing := file("secret", secret+"\n"), filepath.Join(dir, "missing")
	minted := func(int64) string {
		return oauthtest.UnsecuredJWT(map[string]any{"sub": "baton-cc", "exp": exp})
	}

	const (
		mech     = "--destination-sasl-mechanism"
		tokFile  = "--destination-sasl-oauth-token-file"
		endpoint = "--destination-sasl-oauth-token-endpoint"
		clientID = "--destination-sasl-oauth-client-id"
		secFile  = "--destination-sasl-oauth-client-secret-file"
		scope    = "--destination-sasl-oauth-scope"
		secEnv   = "$BATON_DESTINATION_SASL_OAUTH_CLIENT_SECRET"
		endURL   = "{endpoint}" // the case's token endpoint
	)
	cases := []struct {
		name  string
		args  []string
		env   string   // the client secret in the environment
		scope string   // the scope the endpoint wants
		want  []string // an error naming each of these; nil: no error
		// Without an error: the token sent, and the principal or an
		// error about it.
		token, principal string
		principalErr     error
	}{
		{name: "token file", args: []string{mech, "OAUTHBEARER", tokFile, jwtFile}, token: jwt, principal: "User:baton-repl"},
		{name: "lower-case mechanism", args: []string{mech, "oauthbearer", tokFile, jwtFile}, token: jwt, principal: "User:baton-repl"},
		{name: "opaque token: no principal", args: []string{mech, "OAUTHBEARER", tokFile, opaqueFile}, token: "opaque-token", principalErr: oauthbearer.ErrNoSubject},
		{name: "endpoint, secret file", args: []string{mech, "OAUTHBEARER", endpoint, endURL, clientID, "baton-client", secFile, secretFile},
			token: minted(0), principal: "User:baton-cc"},
		{name: "endpoint, secret from env, scope", args: []string{mech, "OAUTHBEARER", endpoint, endURL, clientID, "baton-client", scope, "kafka:write kafka:read"},
			env: secret, scope: "kafka:write kafka:read", token: minted(0), principal: "User:baton-cc"},
		{name: "endpoint, wrong secret: refused at the endpoint, not at start", args: []string{mech, "OAUTHBEARER", endpoint, endURL, clientID, "baton-client"},
			env: "wrong-s3cret", token: "", principalErr: oauthbearer.ErrTokenEndpoint},

		{name: "token file and endpoint", args: []string{mech, "OAUTHBEARER", tokFile, jwtFile, endpoint, endURL, clientID, "baton-client"}, env: secret, want: []string{tokFile, endpoint}},
		{name: "no token source", args: []string{mech, "OAUTHBEARER"}, want: []string{tokFile, endpoint}},
		{name: "endpoint without client id", args: []string{mech, "OAUTHBEARER", endpoint, endURL}, env: secret, want: []string{clientID}},
		{name: "endpoint without a secret", args: []string{mech, "OAUTHBEARER", endpoint, endURL, clientID, "baton-client"}, want: []string{secFile, secEnv}},
		{name: "a secret file that is not there", args: []string{mech, "OAUTHBEARER", endpoint, endURL, clientID, "baton-client", secFile, missing}, want: []string{secFile}},
		{name: "user with OAUTHBEARER", args: []string{mech, "OAUTHBEARER", tokFile, jwtFile, "--destination-sasl-user", "repl"}, want: []string{"--destination-sasl-user"}},
		{name: "password file with OAUTHBEARER", args: []string{mech, "OAUTHBEARER", tokFile, jwtFile, "--destination-sasl-password-file", secretFile}, want: []string{"--destination-sasl-password-file"}},
		{name: "a token file that is not there", args: []string{mech, "OAUTHBEARER", tokFile, missing}, want: []string{tokFile, missing}},
		{name: "an empty token file", args: []string{mech, "OAUTHBEARER", tokFile, emptyFile}, want: []string{tokFile, "empty"}},
		{name: "token file with PLAIN", args: []string{mech, "PLAIN", "--destination-sasl-user", "r", tokFile, jwtFile}, want: []string{tokFile, "OAUTHBEARER"}},
		{name: "endpoint without a mechanism", args: []string{endpoint, endURL}, want: []string{endpoint, mech + " OAUTHBEARER"}},
		{name: "client id with a token file", args: []string{mech, "OAUTHBEARER", tokFile, jwtFile, clientID, "baton-client"}, want: []string{clientID, tokFile}},
		{name: "scope with a token file", args: []string{mech, "OAUTHBEARER", tokFile, jwtFile, scope, "kafka"}, want: []string{scope}},
		{name: "secret file with a token file", args: []string{mech, "OAUTHBEARER", tokFile, jwtFile, secFile, secretFile}, want: []string{secFile}},
		{name: "http to a remote host", args: []string{mech, "OAUTHBEARER", endpoint, "http://idp.example/token", clientID, "baton-client"}, env: secret, want: []string{endpoint, "https://"}},
		{name: "not an http URL", args: []string{mech, "OAUTHBEARER", endpoint, "idp.example:443", clientID, "baton-client"}, env: secret, want: []string{endpoint}},
		{name: "unknown mechanism", args: []string{mech, "GSSAPI", "--destination-sasl-user", "r"}, want: []string{mech, "OAUTHBEARER"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("BATON_DESTINATION_SASL_OAUTH_CLIENT_SECRET", c.env)
			e := oauthtest.NewEndpoint(t, oauthtest.Config{Scope: c.scope, ExpiresIn: 3600, Mint: minted})
			args := append([]string(nil), c.args...)
			for i, a := range args {
				if a == endURL {
					args[i] = e.URL + "/token"
				}
			}
			var s securityFlags
			cmd := &cobra.Command{}
			s.add(cmd.Flags(), "destination")
			if err := cmd.Flags().Parse(args); err != nil {
				t.Fatal(err)
			}
			noSecrets := func(what string, err error) {
				t.Helper()
				for _, s := range []string{secret, "wrong-s3cret", jwt, "opaque-token", minted(0)} {
					if err != nil && strings.Contains(err.Error(), s) {
						t.Errorf("%s %q carries a secret or token", what, err)
					}
				}
			}
			opts, err := s.opts()
			noSecrets("opts error", err)
			if c.want != nil {
				if err == nil {
					t.Fatalf("accepted, want an error naming %q", c.want)
				}
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%q does not name %s", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(opts) != 1 {
				t.Fatalf("%d options, want the SASL one", len(opts))
			}

			p, err := s.principal(context.Background())
			noSecrets("principal error", err)
			if c.principalErr != nil {
				if !errors.Is(err, c.principalErr) || !strings.Contains(err.Error(), "--destination-sasl-oauth-") {
					t.Errorf("principal %q, %v; want an error wrapping %v naming the flags", p, err, c.principalErr)
				}
			} else if err != nil || p != c.principal {
				t.Errorf("principal %q, %v; want %q", p, err, c.principal)
			}

			sec, err := s.agentSecurity()
			if err != nil {
				t.Fatal(err)
			}
			if sec.SASL.Name() != "OAUTHBEARER" {
				t.Fatalf("mechanism %s, want OAUTHBEARER", sec.SASL.Name())
			}
			_, msg, err := sec.SASL.Authenticate(context.Background(), "127.0.0.1:9092")
			noSecrets("authentication error", err)
			if c.token == "" {
				if !errors.Is(err, oauthbearer.ErrTokenEndpoint) {
					t.Fatalf("authentication: %v, want ErrTokenEndpoint", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(msg), "auth=Bearer "+c.token+"\x01") {
				t.Errorf("the first OAUTHBEARER message does not carry the token %q", c.token)
			}
			// The principal's token and the connection's are one fetch:
			// all clients of a cluster share the flags' cache.
			if n := e.Requests.Load(); strings.Contains(strings.Join(args, " "), e.URL) && n != 1 {
				t.Errorf("%d token requests, want 1", n)
			}
		})
	}
}

// TestReplicatorPrincipal: the control plane's replicator principal is
// --replicator-principal, else the destination flags' principal (with
// OAUTHBEARER the token's sub), else none with a client certificate (the
// broker maps it), else User:ANONYMOUS; a token that names no
// principal fails the start naming --replicator-principal, unless the guard
// that needs it is off.
func TestReplicatorPrincipal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	jwtFile, opaqueFile := filepath.Join(dir, "jwt"), filepath.Join(dir, "opaque")
	if err := os.WriteFile(jwtFile, []byte(oauthtest.UnsecuredJWT(map[string]any{"sub": "baton-repl"})), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(opaqueFile, []byte("opaque-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	down := oauthtest.NewEndpoint(t, oauthtest.Config{})
	down.Close()
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte(down.Secret), 0o600); err != nil {
		t.Fatal(err)
	}
	oauthArgs := func(src ...string) []string {
		return append([]string{"--destination-sasl-mechanism", "OAUTHBEARER"}, src...)
	}
	cases := []struct {
		name, flag, guard string
		args              []string
		want              string
		wantErr           []string
	}{
		{name: "the flag", flag: "User:ops-repl", guard: "auto", args: oauthArgs("--destination-sasl-oauth-token-file", opaqueFile), want: "User:ops-repl"},
		{name: "no SASL", guard: "auto", want: "User:ANONYMOUS"},
		{name: "client certificate, no SASL", guard: "auto", args: []string{"--destination-tls-cert", "repl.pem", "--destination-tls-key", "repl.key"}, want: ""},
		{name: "client certificate and SCRAM", guard: "auto", args: []string{"--destination-tls-cert", "repl.pem", "--destination-tls-key", "repl.key",
			"--destination-sasl-mechanism", "SCRAM-SHA-512", "--destination-sasl-user", "repl"}, want: "User:repl"},
		{name: "SCRAM user", guard: "auto", args: []string{"--destination-sasl-mechanism", "SCRAM-SHA-512", "--destination-sasl-user", "repl"}, want: "User:repl"},
		{name: "OAUTHBEARER JWT", guard: "acl", args: oauthArgs("--destination-sasl-oauth-token-file", jwtFile), want: "User:baton-repl"},
		{name: "OAUTHBEARER opaque token", guard: "auto", args: oauthArgs("--destination-sasl-oauth-token-file", opaqueFile),
			wantErr: []string{"--replicator-principal", "--destination-sasl-oauth-", "not a JWT"}},
		{name: "OAUTHBEARER opaque token, no guard", guard: "none", args: oauthArgs("--destination-sasl-oauth-token-file", opaqueFile), want: "User:ANONYMOUS"},
		{name: "OAUTHBEARER endpoint down", guard: "acl", args: oauthArgs("--destination-sasl-oauth-token-endpoint", down.URL,
			"--destination-sasl-oauth-client-id", down.ClientID, "--destination-sasl-oauth-client-secret-file", secretFile),
			wantErr: []string{"--replicator-principal", "no token from the token endpoint"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var s securityFlags
			cmd := &cobra.Command{}
			s.add(cmd.Flags(), "destination")
			if err := cmd.Flags().Parse(c.args); err != nil {
				t.Fatal(err)
			}
			got, err := replicatorPrincipal(context.Background(), c.flag, c.guard, &s)
			if c.wantErr != nil {
				if err == nil {
					t.Fatalf("principal %q, want an error naming %q", got, c.wantErr)
				}
				for _, w := range c.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%q does not name %s", err, w)
					}
				}
				if strings.Contains(err.Error(), "opaque-token") || strings.Contains(err.Error(), down.Secret) {
					t.Errorf("%q carries a token or secret", err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("principal %q, %v; want %q", got, err, c.want)
			}
		})
	}
}
