package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/test/embedded"
)

func TestSASLFlags(t *testing.T) {
	t.Setenv("BATON_DESTINATION_SASL_PASSWORD", "from-env")
	tests := []struct {
		name          string
		args          []string
		wantOpts      int
		wantErr       bool
		wantPrincipal string
	}{
		{name: "none", args: nil},
		{name: "plain", args: []string{"--destination-sasl-mechanism", "PLAIN", "--destination-sasl-user", "r", "--destination-sasl-password", "p"}, wantOpts: 1, wantPrincipal: "User:r"},
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
			if !tt.wantErr && s.principal() != tt.wantPrincipal {
				t.Errorf("principal %q, want %q", s.principal(), tt.wantPrincipal)
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
	caPEM, serverCert := testCA(t)
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

// testCA returns a CA certificate (PEM) and a server certificate for
// 127.0.0.1 that it signed.
func testCA(t *testing.T) ([]byte, tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "baton test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srv := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}
}
