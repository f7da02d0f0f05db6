// Package testcert owns the certificates Baton's tests use: a throwaway CA,
// a server certificate for 127.0.0.1 and client certificates it signed,
// made fresh per test.
// Only tests import it.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// CA is a test CA and a server certificate it signed.
type CA struct {
	// PEM is the CA certificate, PEM encoded, as a CA file holds it.
	PEM []byte
	// Pool holds the CA certificate, for a client's RootCAs.
	Pool *x509.CertPool
	// Server is a certificate for 127.0.0.1, valid for an hour.
	Server tls.Certificate

	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// New makes a CA and a server certificate; it fails t on error.
func New(t testing.TB) CA {
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
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return CA{
		PEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		Pool:   pool,
		Server: tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey},
		cert:   caCert,
		key:    caKey,
	}
}

// Client returns a client certificate the CA signed, with common name cn
// and the SANs sans, valid for an hour; it fails t on error. A SAN with a
// scheme ("spiffe://...") is a URI SAN, any other a DNS SAN.
func (c CA) Client(t testing.TB, cn string, sans ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	for _, san := range sans {
		if !strings.Contains(san, "://") {
			tmpl.DNSNames = append(tmpl.DNSNames, san)
			continue
		}
		pu, err := url.Parse(san)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// WriteFiles writes the CA and cert (the CA's Server, or one from Client)
// into dir as PEM files named after name, and returns their paths; it
// fails t on error.
func (c CA) WriteFiles(t testing.TB, dir, name string, cert tls.Certificate) (caFile, certFile, keyFile string) {
	t.Helper()
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	for file, b := range map[string][]byte{
		caFile:   c.PEM,
		certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}),
		keyFile:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}),
	} {
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caFile, certFile, keyFile
}
