package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"

	"github.com/baton-kafka/baton/controlplane"
)

// The HTTP API over TLS (docs/controlplane.md, "API callers"): the control
// plane's --http-tls-cert, --http-tls-key, --http-client-ca and
// --api-identities.

// httpSecurity returns the HTTP API's TLS config (nil: plain HTTP) and,
// with --http-client-ca, the API identity rules. A client certificate is
// verified when sent but not required at the handshake: a caller with a
// bearer token needs none, and one with neither gets the API's 401 saying
// what it takes instead of a failed handshake that says nothing.
func httpSecurity(certFile, keyFile, clientCA, identities string) (*tls.Config, []controlplane.APIIdentity, error) {
	cfg, err := serverTLS("http", "api-identities", certFile, keyFile, clientCA, identities, tls.VerifyClientCertIfGiven)
	if err != nil || clientCA == "" {
		return cfg, nil, err
	}
	if identities == "" {
		return nil, nil, errors.New("--http-client-ca needs --api-identities: a client certificate names a caller only through a rule that gives its identity a name and a role")
	}
	ids, err := controlplane.LoadAPIIdentities(identities)
	if err != nil {
		return nil, nil, fmt.Errorf("--api-identities: %w", err)
	}
	return cfg, ids, nil
}

// httpGuard refuses to serve, on an address reachable from the network,
// an API that takes no credentials (anyone who reaches it could migrate or
// abort any topic) unless insecure (--api-insecure), and warns once when
// bearer tokens would cross the network in the clear. It warns instead of
// refusing because a TLS proxy in front of the API is a sound setup the
// control plane cannot see.
func httpGuard(log *slog.Logger, addr string, tokens, identities, tlsOn, insecure bool) error {
	if loopback(addr) {
		return nil
	}
	if !tokens && !identities && !insecure {
		return fmt.Errorf("--http %s is reachable from the network and the API takes no credentials: anyone who reaches it could migrate or abort any topic; set --api-tokens-file, or --http-client-ca with --api-identities (docs/controlplane.md, API callers), or --api-insecure to accept that", addr)
	}
	if tokens && !tlsOn {
		log.Warn("the HTTP API takes bearer tokens over plain HTTP on an address reachable from the network: every request's token travels in the clear; serve HTTPS with --http-tls-cert and --http-tls-key, or reach the API only through a TLS proxy", "http", addr)
	}
	return nil
}
