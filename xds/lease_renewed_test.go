package xds

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
)

// fixedLease answers every heartbeat granted or refused.
type fixedLease struct {
	batonv1.UnimplementedLeaseServer
	grant bool
}

func (l fixedLease) Heartbeat(context.Context, *batonv1.HeartbeatRequest) (*batonv1.HeartbeatResponse, error) {
	return &batonv1.HeartbeatResponse{Granted: l.grant, Lease: durationpb.New(time.Minute)}, nil
}

// Renewed fires at a granted heartbeat only: a write waiting for the lease
// is woken when it becomes valid, and not by a refusal.
func TestLeaseKeeperRenewed(t *testing.T) {
	t.Parallel()
	for _, grant := range []bool{true, false} {
		t.Run(map[bool]string{true: "granted", false: "refused"}[grant], func(t *testing.T) {
			t.Parallel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			g := grpc.NewServer()
			batonv1.RegisterLeaseServer(g, fixedLease{grant: grant})
			go func() { _ = g.Serve(ln) }()
			defer g.Stop()
			conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			k, err := NewLeaseKeeper(conn, NodeMeta("n", "", ""), func() (uint64, []*batonv1.TopicDrain) { return 0, nil })
			if err != nil {
				t.Fatal(err)
			}
			renewed := k.Renewed()
			if _, err := k.Heartbeat(context.Background()); err != nil {
				t.Fatal(err)
			}
			select {
			case <-renewed:
				if !grant {
					t.Fatal("Renewed fired at a refused heartbeat")
				}
				if !k.Valid() {
					t.Fatal("Renewed fired but the lease is not valid")
				}
				if k.Renewed() == renewed {
					t.Fatal("Renewed returns the fired channel again")
				}
			default:
				if grant {
					t.Fatal("Renewed did not fire at a granted heartbeat")
				}
			}
		})
	}
}
