// Package keypair owns TLS certificates kept in files that are replaced
// while the process runs (cert-manager and Kubernetes secrets rotate them
// in place): a Reloader hands out the key pair the files hold now, read
// again whenever either file changed, so a rotated certificate is used
// from the next TLS handshake on without a restart.
package keypair

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"sync"
)

// ErrKeyPair wraps every error of this package.
var ErrKeyPair = errors.New("keypair: no usable certificate")

// Reloader is a certificate and key in two PEM files. It is safe for
// concurrent use.
type Reloader struct {
	certFile, keyFile string

	mu              sync.Mutex
	cert            *tls.Certificate
	certPEM, keyPEM []byte // what cert was parsed from
}

// New loads the pair once, so a bad file is refused at start.
func New(certFile, keyFile string) (*Reloader, error) {
	r := &Reloader{certFile: certFile, keyFile: keyFile}
	if _, err := r.Get(); err != nil {
		return nil, err
	}
	return r, nil
}

// Get returns the pair the files hold now. The files are read at every
// call (a few kilobytes, at a TLS handshake) and parsed when they differ
// from the last pair, however they were replaced: in place, renamed over,
// or by a symlink swap. A pair that no longer loads (a rotation caught
// halfway, the key written before its certificate) leaves the last good
// one in use until the files load again.
func (r *Reloader) Get() (*tls.Certificate, error) {
	certPEM, cerr := os.ReadFile(r.certFile)
	keyPEM, kerr := os.ReadFile(r.keyFile)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cert != nil && (cerr != nil || kerr != nil || (bytes.Equal(certPEM, r.certPEM) && bytes.Equal(keyPEM, r.keyPEM))) {
		return r.cert, nil
	}
	if err := errors.Join(cerr, kerr); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyPair, err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if r.cert != nil {
			return r.cert, nil
		}
		return nil, fmt.Errorf("%w: %s, %s: %w", ErrKeyPair, r.certFile, r.keyFile, err)
	}
	r.cert, r.certPEM, r.keyPEM = &c, certPEM, keyPEM
	return r.cert, nil
}

// ServerConfig sets cfg to serve the pair the files hold at each
// handshake.
func (r *Reloader) ServerConfig(cfg *tls.Config) {
	cfg.Certificates = nil
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.Get() }
}

// ClientConfig sets cfg to present the pair the files hold at each
// handshake that asks for a client certificate.
func (r *Reloader) ClientConfig(cfg *tls.Config) {
	cfg.Certificates = nil
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return r.Get() }
}
