package keypair_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/baton-kafka/baton/internal/keypair"
	"github.com/baton-kafka/baton/internal/testcert"
)

// TestRotation: a certificate rewritten in place, or swapped in by a
// symlink as Kubernetes does, is what the next Get returns; a broken
// rewrite keeps the last good pair.
func TestRotation(t *testing.T) {
	t.Parallel()
	ca := testcert.New(t)
	dir := t.TempDir()
	_, cert1, key1 := ca.WriteFiles(t, dir, "one", ca.Client(t, "one"))
	_, cert2, key2 := ca.WriteFiles(t, dir, "two", ca.Client(t, "two"))
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	copyFile := func(from, to string) {
		t.Helper()
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(cert1, certFile)
	copyFile(key1, keyFile)
	r, err := keypair.New(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func() []byte {
		t.Helper()
		c, err := r.Get()
		if err != nil {
			t.Fatal(err)
		}
		return c.Certificate[0]
	}
	first := leaf()

	// In place.
	copyFile(cert2, certFile)
	copyFile(key2, keyFile)
	second := leaf()
	if bytes.Equal(first, second) {
		t.Fatal("the rewritten certificate was not picked up")
	}

	// A broken rewrite keeps the last good pair.
	if err := os.WriteFile(certFile, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := leaf(); !bytes.Equal(got, second) {
		t.Fatal("a broken certificate file replaced the good pair")
	}

	// A symlink swap.
	linkCert, linkKey := filepath.Join(dir, "link.crt"), filepath.Join(dir, "link.key")
	if err := os.Symlink(cert1, linkCert); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(key1, linkKey); err != nil {
		t.Fatal(err)
	}
	r, err = keypair.New(linkCert, linkKey)
	if err != nil {
		t.Fatal(err)
	}
	one := leaf()
	for _, l := range [][2]string{{cert2, linkCert}, {key2, linkKey}} {
		tmp := l[1] + ".new"
		if err := os.Symlink(l[0], tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, l[1]); err != nil {
			t.Fatal(err)
		}
	}
	if bytes.Equal(one, leaf()) {
		t.Fatal("the swapped-in certificate was not picked up")
	}

	var cfg tls.Config
	r.ServerConfig(&cfg)
	if c, err := cfg.GetCertificate(nil); err != nil || !bytes.Equal(c.Certificate[0], leaf()) {
		t.Fatalf("ServerConfig hands out %v, %v", c, err)
	}
	if _, err := keypair.New(certFile, keyFile); !errors.Is(err, keypair.ErrKeyPair) {
		t.Fatalf("a pair that does not load at start: %v, want ErrKeyPair", err)
	}
}
