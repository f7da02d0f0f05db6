// Package nodeauth owns the agents' identities (docs/controlplane.md,
// "Agent certificates"): which node ids a verified TLS client certificate
// may act as (Rule, read from the --agent-identities file by Load), and
// the gRPC interceptors that refuse every other node id an agent names,
// on each Heartbeat and each xDS request (Checker.ServerOptions).
//
// A lease lets an agent forward to the source, and the drain of a cutover
// trusts what an agent reports for its node id: an agent that could speak
// for another node could report it drained.
//
// It does not import the control plane, and needs nothing of it: the
// control plane (controlplane.NodeIdentity) holds a Checker and hands its
// ServerOptions to the gRPC servers of the leader and the followers.
package nodeauth

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"
	"sync"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/baton-kafka/baton/internal/access"
)

// Errors.
var (
	// ErrBadConfig refuses a node identity file; the message says where
	// and why.
	ErrBadConfig = errors.New("nodeauth: bad config")
)

// Rule lets a certificate identity act as some node ids.
type Rule struct {
	// Identity is one of a certificate's identities: a URI SAN (a SPIFFE
	// id, say), a DNS SAN or the subject's common name.
	Identity string `yaml:"identity"`
	// Nodes are the node ids it may use, as path.Match patterns
	// ("producer-*").
	Nodes []string `yaml:"nodes"`
}

// New is the check of rules.
func New(rules []Rule) *Checker { return &Checker{rules: rules} }

// Load reads a node identity file: a YAML list of identity and nodes.
func Load(file string) ([]Rule, error) {
	return access.Load(file, "agent identities", ErrBadConfig, Parse)
}

// Parse parses and validates a node identity file's contents.
func Parse(b []byte) ([]Rule, error) {
	rs, err := access.Decode[Rule](b, "agent identities", ErrBadConfig)
	if err != nil {
		return nil, err
	}
	for i, r := range rs {
		if r.Identity == "" {
			return nil, fmt.Errorf("%w: agent identities[%d]: identity is required", ErrBadConfig, i)
		}
		if len(r.Nodes) == 0 {
			return nil, fmt.Errorf("%w: agent identities[%d] (%s): nodes is required", ErrBadConfig, i, r.Identity)
		}
		for _, p := range r.Nodes {
			if _, err := path.Match(p, ""); err != nil {
				return nil, fmt.Errorf("%w: agent identities[%d] (%s): nodes: pattern %q: %w", ErrBadConfig, i, r.Identity, p, err)
			}
		}
	}
	return rs, nil
}

// Checker refuses a node id the connection's verified client certificate
// does not vouch for. A node id is allowed when it equals one of the
// certificate's identities, or matches a pattern of a rule for one of
// them. The gRPC server MUST require and verify client certificates
// (tls.RequireAndVerifyClientCert) and take its interceptors from
// ServerOptions.
type Checker struct {
	rules  []Rule
	log    *slog.Logger
	warned sync.Map // "identities -> node" refused, logged once
}

// ServerOptions returns the gRPC server options of the check: its
// interceptors, logging each refusal once to log.
func (a *Checker) ServerOptions(log *slog.Logger) []grpc.ServerOption {
	a.log = log
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(a.unary), grpc.ChainStreamInterceptor(a.stream)}
}

// identities returns the verified client certificate's identities.
func identities(ctx context.Context) ([]string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "no peer")
	}
	var cert *x509.Certificate
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
		cert = access.VerifiedCert(&ti.State)
	}
	if cert == nil {
		return nil, status.Error(codes.Unauthenticated, "a verified TLS client certificate is required")
	}
	return access.CertIdentities(cert), nil
}

// allow refuses node unless one of ids vouches for it.
func (a *Checker) allow(ids []string, node string) error {
	if slices.Contains(ids, node) {
		return nil
	}
	for _, r := range a.rules {
		if !slices.Contains(ids, r.Identity) {
			continue
		}
		for _, p := range r.Nodes {
			if ok, _ := path.Match(p, node); ok {
				return nil
			}
		}
	}
	msg := fmt.Sprintf("the client certificate (%s) may not act as node %q: give the agent a certificate for it, or map the identity in --agent-identities",
		strings.Join(ids, ", "), node)
	if _, dup := a.warned.LoadOrStore(strings.Join(ids, ",")+" -> "+node, true); !dup && a.log != nil {
		a.log.Warn("agent refused: " + msg)
	}
	return status.Error(codes.PermissionDenied, msg)
}

func (a *Checker) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ids, err := identities(ctx)
	if err != nil {
		return nil, err
	}
	if n, ok := req.(interface{ GetNodeId() string }); ok {
		if err := a.allow(ids, n.GetNodeId()); err != nil {
			return nil, err
		}
	}
	return handler(ctx, req)
}

func (a *Checker) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ids, err := identities(ss.Context())
	if err != nil {
		return err
	}
	cs := &checkedStream{ServerStream: ss, auth: a, ids: ids}
	err = handler(srv, cs)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.refused != nil {
		// The xDS server ends a stream whose receive failed without
		// passing the error on: the agent must see why.
		return cs.refused
	}
	return err
}

// checkedStream checks the node every xDS request names. The first request
// MUST name one (xDS clients send it first; later ones may omit it).
type checkedStream struct {
	grpc.ServerStream
	auth *Checker
	ids  []string
	node string // allowed so far; "" before the first request
	// refused is the refusal that ended the stream, if any: set by
	// RecvMsg (on the xDS server's receiving goroutine), read once the
	// handler returned.
	mu      sync.Mutex
	refused error
}

var _ grpc.ServerStream = (*checkedStream)(nil)

func (s *checkedStream) refuse(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refused = err
	return err
}

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	n, ok := m.(interface{ GetNode() *core.Node })
	if !ok {
		return nil
	}
	id := n.GetNode().GetId()
	switch {
	case id == "" && s.node == "":
		return s.refuse(status.Error(codes.PermissionDenied, "the first request of an xDS stream must name its node"))
	case id == "" || id == s.node:
		return nil
	}
	if err := s.auth.allow(s.ids, id); err != nil {
		return s.refuse(err)
	}
	s.node = id
	return nil
}
