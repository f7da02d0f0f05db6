package access

import (
	"crypto/tls"
	"crypto/x509"
)

// VerifiedCert returns a connection's client certificate, nil unless it
// was verified: an unverified one names whoever made it. The gRPC services
// and the HTTP API take certificates alike through it.
func VerifiedCert(st *tls.ConnectionState) *x509.Certificate {
	if st == nil || len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return nil
	}
	return st.VerifiedChains[0][0]
}

// CertIdentities returns c's identities: its URI SANs, DNS SANs and common
// name, in that order.
func CertIdentities(c *x509.Certificate) []string {
	var ids []string
	for _, u := range c.URIs {
		ids = append(ids, u.String())
	}
	ids = append(ids, c.DNSNames...)
	if c.Subject.CommonName != "" {
		ids = append(ids, c.Subject.CommonName)
	}
	return ids
}
