package main

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/testcert"
)

func TestSASLFlags(t *testing.T) {
	t.Setenv("BATON_DESTINATION_SASL_PASSWORD", "from-env")
	dir := t.TempDir()
	passFile, emptyFile := filepath.Join(dir, "password"), filepath.Join(dir, "empty")
	if err := os.WriteFile(passFile, []byte("p\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(emptyFile, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name          string
		args          []string
		wantOpts      int
		wantErr       bool
		wantPrincipal string
	}{
		{name: "none", args: nil},
		{name: "plain, password from a file", args: []string{"--destination-sasl-mechanism", "PLAIN", "--destination-sasl-user", "r", "--destination-sasl-password-file", passFile}, wantOpts: 1, wantPrincipal: "User:r"},
		{name: "a password file that is not there", args: []string{"--destination-sasl-mechanism", "PLAIN", "--destination-sasl-user", "r", "--destination-sasl-password-file", passFile + ".missing"}, wantErr: true},
		{name: "an empty password file", args: []string{"--destination-sasl-mechanism", "PLAIN", "--destination-sasl-user", "r", "--destination-sasl-password-file", emptyFile}, wantErr: true},
		{name: "a password file without a mechanism", args: []string{"--destination-sasl-password-file", passFile}, wantErr: true},
		{name: "scram, password from env", args: []string{"--destination-sasl-mechanism", "scram-sha-512", "--destination-sasl-user", "r"}, wantOpts: 1, wantPrincipal: "User:r"},
		{name: "scram-256", args: []string{"--destination-sasl-mechanism", "SCRAM-SHA-256", "--destination-sasl-user", "r"}, wantOpts: 1, wantPrincipal: "User:r"},
		{name: "unknown mechanism", args: []string{"--destination-sasl-mechanism", "GSSAPI", "--destination-sasl-user", "r"}, wantErr: true},
		{name: "user without mechanism", args: []string{"--destination-sasl-user", "r"}, wantErr: true},
		{name: "mechanism without user", args: []string{"--destination-sasl-mechanism", "PLAIN"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s securityFlags
			cmd := &cobra.Command{}
			s.add(cmd.Flags(), "destination")
			if err := cmd.Flags().Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			opts, err := s.opts()
			if (err != nil) != tt.wantErr {
				t.Fatalf("opts: %v, want error %v", err, tt.wantErr)
			}
			if len(opts) != tt.wantOpts {
				t.Errorf("%d options, want %d", len(opts), tt.wantOpts)
			}
			if !tt.wantErr && tt.wantOpts > 0 {
				want := "from-env"
				if slices.Contains(tt.args, "--destination-sasl-password-file") {
					want = "p" // the file's line, without its newline
				}
				if got, _ := s.password(); got != want {
					t.Errorf("password %q, want %q", got, want)
				}
			}
			if p, err := s.principal(context.Background()); !tt.wantErr && (err != nil || p != tt.wantPrincipal) {
				t.Errorf("principal %q, %v; want %q", p, err, tt.wantPrincipal)
			}
		})
	}
}

func TestSASLFlagsWithoutPassword(t *testing.T) {
	t.Setenv("BATON_SOURCE_SASL_PASSWORD", "")
	var s securityFlags
	cmd := &cobra.Command{}
	s.add(cmd.Flags(), "source")
	if err := cmd.Flags().Parse([]string{"--source-sasl-mechanism", "PLAIN", "--source-sasl-user", "r"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.opts(); err == nil {
		t.Fatal("SASL without a password accepted")
	}
}

// TestTLSFlags connects to a TLS-only kfake cluster with the flags' options:
// with the CA it works, with the system's roots it does not, and bad
// flags are refused naming the flag.
func TestTLSFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testcert.New(t)
	caPEM, serverCert := ca.PEM, ca.Server
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := embedded.Start(embedded.Brokers(1), embedded.KfakeOpts(kfake.TLS(&tls.Config{Certificates: []tls.Certificate{serverCert}})))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	for _, tc := range []struct {
		name    string
		args    []string
		flagErr string // a flag error naming this, or "" for options
		works   bool
	}{
		{"CA given", []string{"--destination-tls-ca", caFile}, "", true},
		{"TLS with the system's roots", []string{"--destination-tls"}, "", false},
		{"missing CA file", []string{"--destination-tls-ca", filepath.Join(dir, "nope.pem")}, "--destination-tls-ca", false},
		{"cert without key", []string{"--destination-tls-cert", caFile}, "--destination-tls-key", false},
		{"the certificate's name", []string{"--destination-tls-ca", caFile, "--destination-tls-server-name", "127.0.0.1"}, "", true},
		{"a name the certificate does not carry", []string{"--destination-tls-ca", caFile, "--destination-tls-server-name", "kafka.example"}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s securityFlags
			cmd := &cobra.Command{}
			s.add(cmd.Flags(), "destination")
			if err := cmd.Flags().Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			opts, err := s.opts()
			if tc.flagErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.flagErr) {
					t.Fatalf("opts() = %v, want an error naming %s", err, tc.flagErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Addrs()...)}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = cl.Ping(ctx)
			if tc.works && err != nil {
				t.Fatalf("over TLS with the CA: %v", err)
			}
			if !tc.works && err == nil {
				t.Fatal("a broker whose CA the client does not trust was accepted")
			}
		})
	}
}
