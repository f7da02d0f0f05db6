package xds

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
)

// TestOlderRoutesSkippedThenRemovalKept: a client that applied version 5
// from one replica (orders MIGRATING, extra added at 4) moves to a replica
// behind at version 3 (no extra yet): the older set is not applied. That replica then jumps to version 6, where extra was removed.
// After applying 6 the client must not hold extra any more: version 6 has
// no such route.
func TestOlderRoutesSkippedThenRemovalKept(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cl := []*batonv1.Cluster{{Name: "src", Bootstrap: []string{"s:9092"}}}
			orders := func(v uint64, s batonv1.State) *batonv1.TopicRoute {
				return &batonv1.TopicRoute{Topic: "orders", State: s, Version: v}
			}
			ahead, behind := NewServer(), NewServer()
			ahead.Update(Resources{Version: 5, Clusters: cl, Routes: []*batonv1.TopicRoute{
				{Topic: "extra", State: batonv1.State_STATE_REJECT, Version: 4},
				orders(5, batonv1.State_STATE_MIGRATING)}})
			behind.Update(Resources{Version: 3, Clusters: cl, Routes: []*batonv1.TopicRoute{orders(3, batonv1.State_STATE_PROXY)}})
			addrA, gA, err := serveAt(t, "127.0.0.1:0", func(g *grpc.Server) { ahead.Register(g) })
			if err != nil {
				t.Fatal(err)
			}
			addrB, _, err := serveAt(t, "127.0.0.1:0", func(g *grpc.Server) { behind.Register(g) })
			if err != nil {
				t.Fatal(err)
			}
			target, opts := ReplicasTarget([]string{addrA, addrB})
			conn, err := grpc.NewClient(target, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			c, sn := startClient(t, ctx, conn, p, "r", "ns", nil)
			if err := c.WaitVersion(ctx, 5); err != nil {
				t.Fatal(err)
			}
			if sn.get("extra") == nil {
				t.Fatal("extra not held at version 5")
			}
			gA.Stop()
			waitFor(t, ctx, "the lagging replica's version 3 received", func() bool { return c.olderSeen.Load() > 0 })
			// The lagging replica catches up in one step: extra was added
			// (4) and removed (6) meanwhile.
			behind.Update(Resources{Version: 6, Clusters: cl, Routes: []*batonv1.TopicRoute{orders(5, batonv1.State_STATE_MIGRATING)}})
			if err := c.WaitVersion(ctx, 6); err != nil {
				t.Fatal(err)
			}
			waitFor(t, ctx, "version 6 acknowledged by the server", func() bool {
				n, _ := behind.Node("r")
				return n.AckedVersion == 6
			})
			if r := sn.get("extra"); r != nil {
				t.Fatalf("client acked version 6 but still holds route %v (removed at 6): the delta state diverged after skipping version 3", r)
			}
		})
	}
}
