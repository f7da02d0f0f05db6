package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/internal/testcert"
	"github.com/baton-kafka/baton/replicator"
)

// The control plane's --grpc-tls-*, --grpc-client-ca and the agent's
// --control-plane-tls-* flags: the agent gets its lease over mTLS as the
// node its certificate names, and no other.
func TestControlPlaneMTLSFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testcert.New(t)
	caFile, srvCert, srvKey := ca.WriteFiles(t, dir, "server", ca.Server)
	_, agentCert, agentKey := ca.WriteFiles(t, dir, "agent", ca.Client(t, "pod-1"))

	for _, tc := range []struct {
		cert, key, clientCA, identities string
		want                            string
	}{
		{"", "", caFile, "", "--grpc-client-ca and --agent-identities need --grpc-tls-cert"},
		{srvCert, "", "", "", "--grpc-tls-cert and --grpc-tls-key go together"},
		{srvCert, srvKey, "", caFile, "--agent-identities needs --grpc-client-ca"},
		{srvCert, srvKey, dir + "/nope.pem", "", "--grpc-client-ca: "},
		{srvCert, srvKey, caFile, caFile, "--agent-identities: "},
	} {
		if _, _, err := grpcSecurity(tc.cert, tc.key, tc.clientCA, tc.identities); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("grpcSecurity(%q, %q, %q, %q) = %v, want an error containing %q", tc.cert, tc.key, tc.clientCA, tc.identities, err, tc.want)
		}
	}

	creds, opts, err := grpcSecurity(srvCert, srvKey, caFile, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cp, err := controlplane.New(ctx, append([]controlplane.Opt{controlplane.WithStore(controlplane.NewMemStore()),
		controlplane.WithReplication(noReplication{}), controlplane.Logger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		controlplane.Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	g := grpc.NewServer(append(cp.ServerOptions(), grpc.Creds(creds))...)
	cp.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	defer g.Stop()

	var cpTLS tlsFlags
	cmd := &cobra.Command{}
	cpTLS.add(cmd.Flags(), "control-plane", "the control plane")
	if err := cmd.Flags().Parse([]string{"--control-plane-tls-ca", caFile, "--control-plane-tls-cert", agentCert, "--control-plane-tls-key", agentKey}); err != nil {
		t.Fatal(err)
	}
	cfg, err := cpTLS.tlsConfig()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lease := batonv1.NewLeaseClient(conn)
	if _, err := lease.Heartbeat(ctx, &batonv1.HeartbeatRequest{NodeId: "pod-1"}); err != nil {
		t.Fatalf("heartbeat as the certificate's node: %v", err)
	}
	if _, err := lease.Heartbeat(ctx, &batonv1.HeartbeatRequest{NodeId: "pod-2"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("heartbeat as another node: %v, want PermissionDenied", err)
	}
}

// noReplication is a replicator with nothing to copy.
type noReplication struct{}

func (noReplication) Start(string) error { return nil }
func (noReplication) Stop(context.Context, string) (map[int32]int64, []replicator.SourceBatch, error) {
	return nil, nil, nil
}
func (noReplication) SetMigrating(string, bool) error          { return nil }
func (noReplication) Lag(string) (time.Duration, error)        { return 0, replication.ErrNotReady }
func (noReplication) Progress(string) (map[int32]int64, error) { return nil, replication.ErrNotReady }
func (noReplication) SourceEndOffsets(context.Context, string) (map[int32]int64, error) {
	return nil, replication.ErrNotReady
}
func (noReplication) Diverged(string) map[int32]string { return nil }
