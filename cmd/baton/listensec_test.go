package main

import (
	"bytes"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/filter/sasl"
	"github.com/baton-kafka/baton/internal/testcert"
)

// TestListenFlags: the agent listener's TLS and client SASL flags, each
// refused combination naming its flags.
func TestListenFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testcert.New(t)
	caFile, certFile, keyFile := ca.WriteFiles(t, dir, "agent", ca.Server)
	users := filepath.Join(dir, "users.yaml")
	c, err := sasl.NewSCRAMCredential(sasl.ScramSHA512, "app", "secret", 4096)
	if err != nil {
		t.Fatal(err)
	}
	entry := "- {user: app, mechanism: SCRAM-SHA-512, salt: " + c.Salt + ", iterations: 4096, storedKey: " + c.StoredKey + ", serverKey: " + c.ServerKey + "}\n"
	if err := os.WriteFile(users, []byte(entry), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsArgs := []string{"--listen-tls-cert", certFile, "--listen-tls-key", keyFile}
	cases := []struct {
		name    string
		listen  string
		args    []string
		wantErr string // a flag the error names; "" for none
		check   func(t *testing.T, cs agent.ClientSecurity)
	}{
		{name: "defaults", listen: "127.0.0.1:9092", check: func(t *testing.T, cs agent.ClientSecurity) {
			if cs.TLS != nil || cs.SASL != agent.SASLNone {
				t.Errorf("%+v, want plaintext without SASL", cs)
			}
		}},
		{name: "mTLS", listen: "0.0.0.0:9093", args: append(tlsArgs, "--listen-client-ca", caFile), check: func(t *testing.T, cs agent.ClientSecurity) {
			if cs.TLS == nil || cs.TLS.ClientAuth != tls.RequireAndVerifyClientCert || cs.TLS.ClientCAs == nil {
				t.Errorf("TLS %+v, want client certificates required", cs.TLS)
			}
		}},
		{name: "forward on loopback", listen: "127.0.0.1:9092", args: []string{"--client-sasl", "forward"}},
		{name: "forward over TLS", listen: "0.0.0.0:9093", args: append(tlsArgs, "--client-sasl", "forward", "--client-sasl-mechanisms", "oauthbearer"), check: func(t *testing.T, cs agent.ClientSecurity) {
			if cs.SASL != agent.SASLForward || strings.Join(cs.Mechanisms, ",") != "OAUTHBEARER" {
				t.Errorf("%s %v, want forward OAUTHBEARER", cs.SASL, cs.Mechanisms)
			}
		}},
		{name: "local", listen: "127.0.0.1:9092", args: []string{"--client-sasl", "local", "--client-sasl-scram-credentials", users}, check: func(t *testing.T, cs agent.ClientSecurity) {
			if !cs.SCRAM.Has(sasl.ScramSHA512) {
				t.Error("the users file's SCRAM-SHA-512 user was not loaded")
			}
		}},
		{name: "forward in the clear off loopback", listen: "0.0.0.0:9092", args: []string{"--client-sasl", "forward"}, wantErr: "--listen-tls-cert"},
		{name: "cert without key", listen: "127.0.0.1:9092", args: []string{"--listen-tls-cert", certFile}, wantErr: "--listen-tls-key"},
		{name: "client CA without TLS", listen: "127.0.0.1:9092", args: []string{"--listen-client-ca", caFile}, wantErr: "--listen-client-ca"},
		{name: "local without users", listen: "127.0.0.1:9092", args: []string{"--client-sasl", "local"}, wantErr: "--client-sasl-scram-credentials"},
		{name: "users without local", listen: "127.0.0.1:9092", args: []string{"--client-sasl", "forward", "--client-sasl-scram-credentials", users}, wantErr: "--client-sasl-scram-credentials"},
		{name: "a users file that is not there", listen: "127.0.0.1:9092", args: []string{"--client-sasl", "local", "--client-sasl-scram-credentials", users + ".missing"}, wantErr: "--client-sasl-scram-credentials"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var l listenFlags
			cmd := &cobra.Command{}
			l.add(cmd.Flags(), cmd.Flags())
			if err := cmd.Flags().Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			cs, err := l.clientSecurity(tc.listen)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one naming %s", err, tc.wantErr)
			}
			if tc.check != nil {
				tc.check(t, cs)
			}
		})
	}
}

// TestSCRAMCredentialCommand: the entries it prints are a users file the
// agent loads, with the password nowhere in them.
func TestSCRAMCredentialCommand(t *testing.T) {
	t.Parallel()
	cmd := newSCRAMCredentialCmd()
	var out bytes.Buffer
	cmd.SetIn(strings.NewReader("s3cret-password\n"))
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--user", "app"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "s3cret-password") {
		t.Fatal("the entry holds the password")
	}
	creds, err := sasl.ParseSCRAMCredentials(out.Bytes())
	if err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if !creds.Has(sasl.ScramSHA256) || !creds.Has(sasl.ScramSHA512) {
		t.Errorf("entries for %s; want both SCRAM mechanisms", out.String())
	}
	cmd = newSCRAMCredentialCmd()
	cmd.SetIn(strings.NewReader(""))
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--user", "app"})
	if err := cmd.Execute(); err == nil {
		t.Error("no password on stdin was accepted")
	}
}
