package e2e

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/replicator"
)

// serveInProcess runs the control plane cp and its replicator r in this
// process until the test ends, with cp's xDS and lease services on a
// loopback gRPC port, and returns a plaintext connection to it for agents.
func serveInProcess(t *testing.T, cp *controlplane.ControlPlane, r *replicator.Replicator) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	cp.Register(gs)
	runCtx, stop := context.WithCancel(context.Background())
	var running sync.WaitGroup
	running.Add(3)
	go func() { defer running.Done(); _ = gs.Serve(ln) }()
	go func() { defer running.Done(); _ = cp.Run(runCtx) }()
	go func() { defer running.Done(); _ = r.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		gs.Stop()
		running.Wait()
	})
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
