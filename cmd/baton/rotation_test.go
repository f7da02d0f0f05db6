package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"

	"github.com/baton-kafka/baton/internal/testcert"
)

// TestRotationWithoutRestart: a SASL password file and the TLS key pairs
// are read again at each authentication or handshake, so rotating them
// needs no restart.
func TestRotationWithoutRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			passFile := filepath.Join(dir, mech+".password")
			if err := os.WriteFile(passFile, []byte("first\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			var s securityFlags
			cmd := &cobra.Command{}
			s.add(cmd.Flags(), "source")
			if err := cmd.Flags().Parse([]string{"--source-sasl-mechanism", mech, "--source-sasl-user", "u", "--source-sasl-password-file", passFile}); err != nil {
				t.Fatal(err)
			}
			m, err := s.saslMechanism()
			if err != nil {
				t.Fatal(err)
			}
			if mech != "PLAIN" {
				// SCRAM never sends the password; that it is read
				// again is the same code as PLAIN's, below.
				if _, _, err := m.Authenticate(context.Background(), "b:9092"); err != nil {
					t.Fatal(err)
				}
				return
			}
			msg := func() []byte {
				t.Helper()
				_, first, err := m.Authenticate(context.Background(), "b:9092")
				if err != nil {
					t.Fatal(err)
				}
				return first
			}
			if !bytes.HasSuffix(msg(), []byte("\x00first")) {
				t.Fatal("PLAIN does not send the file's password")
			}
			if err := os.WriteFile(passFile, []byte("second\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if !bytes.HasSuffix(msg(), []byte("\x00second")) {
				t.Fatal("the rotated password was not read at the next authentication")
			}
			if err := os.WriteFile(passFile, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if !bytes.HasSuffix(msg(), []byte("\x00second")) {
				t.Fatal("an empty file mid-rotation replaced the last password")
			}
		})
	}

	ca := testcert.New(t)
	caFile, certFile, keyFile := ca.WriteFiles(t, dir, "c", ca.Client(t, "one"))
	cfg, err := clientTLS(namedFile{"--ca", caFile}, namedFile{"--cert", certFile}, namedFile{"--key", keyFile})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GetClientCertificate == nil || len(cfg.Certificates) != 0 {
		t.Fatal("the client certificate is loaded once, not at each handshake")
	}
	srv, err := serverTLS("listen", "", certFile, keyFile, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if srv.GetCertificate == nil || len(srv.Certificates) != 0 {
		t.Fatal("the served certificate is loaded once, not at each handshake")
	}
}
