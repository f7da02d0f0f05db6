package nodeauth

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/internal/testcert"
	"github.com/baton-kafka/baton/xds"
)

// leases is a Lease service granting every heartbeat it is let through.
type leases struct {
	batonv1.UnimplementedLeaseServer
}

func (leases) Heartbeat(context.Context, *batonv1.HeartbeatRequest) (*batonv1.HeartbeatResponse, error) {
	return &batonv1.HeartbeatResponse{Granted: true}, nil
}

// Behind a Checker's interceptors, an agent may name only the node ids its
// client certificate vouches for, on the Lease service and on xDS; without
// a client certificate it does not get in.
func TestChecker(t *testing.T) {
	t.Parallel()
	ca := testcert.New(t)
	rules, err := Parse([]byte(`
- identity: spiffe://cluster.local/ns/team-a/sa/producer
  nodes: ["producer-*"]
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{ca.Server}, ClientCAs: ca.Pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	g := grpc.NewServer(append(New(rules).ServerOptions(log), grpc.Creds(creds))...)
	x := xds.NewServer(xds.WithLogger(log))
	x.Update(xds.Resources{Version: 1, Targets: map[string]xds.Target{}})
	x.Register(g)
	batonv1.RegisterLeaseServer(g, leases{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)

	dial := func(cert *tls.Certificate) *grpc.ClientConn {
		cfg := &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	heartbeat := func(conn *grpc.ClientConn, node string) error {
		_, err := batonv1.NewLeaseClient(conn).Heartbeat(ctx, &batonv1.HeartbeatRequest{NodeId: node})
		return err
	}
	// xdsFirst sends one ADS request naming node and returns the stream's
	// first error (nil: the server took it).
	xdsFirst := func(conn *grpc.ClientConn, node string) error {
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
		defer scancel()
		st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
		if err != nil {
			return err
		}
		req := &discovery.DiscoveryRequest{TypeUrl: xds.TopicRouteType}
		if node != "" {
			req.Node = &core.Node{Id: node}
		}
		if err := st.Send(req); err != nil {
			return err
		}
		_, err = st.Recv()
		return err
	}
	byCN, bySPIFFE := ca.Client(t, "agent-1"), ca.Client(t, "", "spiffe://cluster.local/ns/team-a/sa/producer")
	tests := []struct {
		name string
		cert *tls.Certificate
		node string
		want codes.Code
	}{
		{"common name is the node id", &byCN, "agent-1", codes.OK},
		{"another node's id", &byCN, "agent-2", codes.PermissionDenied},
		{"a rule's pattern", &bySPIFFE, "producer-7", codes.OK},
		{"outside the rule", &bySPIFFE, "agent-1", codes.PermissionDenied},
	}
	for _, tt := range tests {
		conn := dial(tt.cert)
		for what, call := range map[string]func(*grpc.ClientConn, string) error{"heartbeat": heartbeat, "xds": xdsFirst} {
			err := call(conn, tt.node)
			got := status.Code(err)
			if what == "xds" && tt.want == codes.OK && got == codes.DeadlineExceeded {
				got = codes.OK // the server took the request and had nothing to send yet
			}
			if got != tt.want {
				t.Errorf("%s: %s: %v, want %v", tt.name, what, err, tt.want)
			}
			if tt.want == codes.PermissionDenied && !strings.Contains(err.Error(), "may not act as node") {
				t.Errorf("%s: %s: %v does not say why", tt.name, what, err)
			}
		}
	}
	if err := xdsFirst(dial(&byCN), ""); status.Code(err) != codes.PermissionDenied {
		t.Errorf("an xDS stream whose first request names no node: %v, want PermissionDenied", err)
	}
	if err := heartbeat(dial(nil), "agent-1"); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("no client certificate: %v, want the handshake refused", err)
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ file, want string }{
		{`[{nodes: [a]}]`, "identities[0]: identity is required"},
		{`[{identity: x}]`, "identities[0] (x): nodes is required"},
		{`[{identity: x, nodes: ["[a"]}]`, `identities[0] (x): nodes: pattern "[a"`},
		{`[{identity: x, nodes: [a], node: b}]`, "field node not found"},
	} {
		if _, err := Parse([]byte(tt.file)); !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want ErrBadConfig containing %q", tt.file, err, tt.want)
		}
	}
}
