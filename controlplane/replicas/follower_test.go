package replicas

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/migration"
)

// replicaStores starts an embedded etcd that outlives the test's replicas
// and returns a client of it for the leader and one for a follower (each
// replica has its own; the plane or follower using one closes it).
func replicaStores(t *testing.T, ctx context.Context) (leader, follower *controlplane.EtcdStore) {
	t.Helper()
	etcd, err := controlplane.OpenEmbedded(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = etcd.Close() })
	if leader, err = controlplane.OpenEtcd(ctx, etcd.Endpoints()); err != nil {
		t.Fatal(err)
	}
	if follower, err = controlplane.OpenEtcd(ctx, etcd.Endpoints()); err != nil {
		t.Fatal(err)
	}
	return leader, follower
}

// startFollower serves a follower on st (which it closes) until the test
// ends; it returns the follower and its gRPC address. opts come last.
func startFollower(t *testing.T, ctx context.Context, st *controlplane.EtcdStore, k *kafkaEnv, id string, opts ...controlplane.Opt) (*Follower, string) {
	t.Helper()
	f, err := NewFollower(ctx, st, append([]controlplane.Opt{controlplane.ReplicaID(id), controlplane.LeaseDuration(tLease), controlplane.ForwardDeadline(tForward), controlplane.Logger(quiet),
		controlplane.Clusters(&batonv1.Cluster{Name: "source", Bootstrap: k.src.Addrs()}, &batonv1.Cluster{Name: "destination", Bootstrap: k.dst.Addrs()})},
		opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	f.XDS().Register(g)
	batonv1.RegisterLeaseServer(g, f)
	go func() { _ = g.Serve(ln) }()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = f.Run(rctx) }()
	t.Cleanup(func() { g.Stop(); cancel(); <-done; _ = st.Close() })
	return f, ln.Addr().String()
}

// TestFollowerServesLeasesTheLeaderWaitsFor: an agent attached to a
// follower replica gets the leader's routes and leases from it. The
// leader's cutover waits for that agent, which it knows only through the
// follower's records in etcd, until the agent reports (to the follower)
// that it drained. A follower's grant is recorded only at the version it
// was made at. With the leader gone, the follower keeps granting.
func TestFollowerServesLeasesTheLeaderWaitsFor(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := startKafka(t, ctx)
	ls, fs := replicaStores(t, ctx)
	p := startPlaneStore(t, ctx, ls, k, controlplane.ReplicaID("L"))
	_, faddr := startFollower(t, ctx, fs, k, "F")
	onLeader, onFollower := startAgent(t, ctx, p.addr, "on-leader"), startAgent(t, ctx, faddr, "on-follower")
	onFollower.mu.Lock()
	onFollower.stuck = true // one request in flight on every topic until released
	onFollower.mu.Unlock()

	k.produce(t, ctx, "ha", 20)
	if _, err := p.cp.AddTopic(ctx, controlplane.TopicSpec{Name: "ha", State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	waitLeases(t, ctx, p, onLeader, onFollower)
	if got := onFollower.state("ha"); got != batonv1.State_STATE_PROXY {
		t.Fatalf("the follower's agent has ha %v, want PROXY", got)
	}
	eventually(t, ctx, "the leader sees the follower's grant", func() bool {
		for _, a := range p.cp.Agents() {
			if a.Node == "on-follower" && a.Replica == "F" && a.LeaseValid {
				return true
			}
		}
		return false
	})

	migrateWhenGateOpens(t, ctx, p, "ha")
	top, err := p.cp.Topic("ha")
	if err != nil || top.Cutover == nil {
		t.Fatalf("ha after migrate: %+v, %v", top, err)
	}
	co := *top.Cutover
	// The follower's agent applied MIGRATING and reports one request in
	// flight: the leader sees that report, and waits.
	eventually(t, ctx, "the leader sees the follower's agent stopped with a request in flight", func() bool {
		for _, a := range p.cp.Agents() {
			if a.Node == "on-follower" && a.AckedVersion >= co.Version && a.Topics["ha"].StoppedForwarding && a.Topics["ha"].InFlight == 1 {
				return true
			}
		}
		return false
	})
	if top, _ = p.cp.Topic("ha"); top.State != migration.Migrating {
		t.Fatalf("ha %v while an agent of the follower has a request in flight", top.State)
	}
	onFollower.mu.Lock()
	onFollower.stuck = false
	onFollower.mu.Unlock()
	waitState(t, ctx, p, "ha", migration.Complete)
	var drained bool
	evs, _ := p.cp.Events(ctx, "ha", 0)
	for _, e := range evs {
		drained = drained || (e.Kind == controlplane.EventAgentDrained && e.Agent == "on-follower")
	}
	if !drained {
		t.Errorf("no agent_drained event for the follower's agent: %v", kinds(t, ctx, p, "ha"))
	}
	eventually(t, ctx, "the follower's agent applied COMPLETE", func() bool { return onFollower.state("ha") == batonv1.State_STATE_COMPLETE })

	// A grant made at a version etcd has moved past is not recorded.
	if err := fs.RecordGrants(ctx, 1, []controlplane.Agent{{Node: "late", GrantedAt: time.Now()}}); !errors.Is(err, controlplane.ErrVersionMoved) {
		t.Errorf("a grant at a stale version: %v, want controlplane.ErrVersionMoved", err)
	}

	// The leader stops: the follower keeps its agent's lease going.
	p.stop()
	stopped := time.Now()
	eventually(t, ctx, "a lease granted after the leader stopped", func() bool {
		l := onFollower.keeper.Last()
		return l.GetGranted() && l.GetGrantedAt().AsTime().After(stopped.Add(tLease)) && onFollower.keeper.Valid()
	})
}
