package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/replicas"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
	"github.com/baton-kafka/baton/test/etcdcluster"
	"github.com/baton-kafka/baton/xds"
)

// BenchmarkXDSFanOutReplicas: the xDS fan-out of BenchmarkXDSFanOut through
// three control-plane replicas on a three-member etcd: a leader
// (controlplane.New) and two followers (replicas.NewFollower), each on
// loopback gRPC, with 1,000 xds.Client nodes (delta xDS, one connection
// each) spread evenly across them and 10,000 topics. Each round the leader
// moves one topic from REJECT to PROXY (SetState: stored in etcd at a new
// config version, and published); the followers publish it once their
// etcd watch delivers it. Measured: the time from SetState to each node's
// ACK, as its replica records it, over xdsChanges rounds; reported for
// every node, and for the leader's and the followers' nodes side by side
// (the ratio is what serving from followers adds: the etcd watch and a
// second render of the routes).
//
// BATON_BENCH_XDS_CLIENTS and BATON_BENCH_XDS_TOPICS override the sizes.
func BenchmarkXDSFanOutReplicas(b *testing.B) {
	if b.N > 1 {
		b.Skip("runs a fixed workload once; use -benchtime 1x")
	}
	nClients := envInt(b, "BATON_BENCH_XDS_CLIENTS", xdsClients)
	nTopics := envInt(b, "BATON_BENCH_XDS_TOPICS", xdsTopics)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	etcd := etcdcluster.Start(b, 3)
	open := func() *controlplane.EtcdStore {
		st, err := controlplane.OpenEtcd(ctx, etcd.Endpoints())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Close() })
		return st
	}
	// The topics, stored as the leader stores them (REJECT, version 1).
	seed := open()
	var g errgroup.Group
	g.SetLimit(32)
	for i := range nTopics {
		g.Go(func() error {
			return seed.PutTopic(ctx, controlplane.Topic{TopicSpec: controlplane.TopicSpec{Name: fanOutTopic(i), State: migration.Reject,
				Source: "source", Destination: "destination"}, Version: 1}, 1)
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	clusters := controlplane.Clusters(&batonv1.Cluster{Name: "source", Bootstrap: []string{"source-0:9092"}},
		&batonv1.Cluster{Name: "destination", Bootstrap: []string{"dest-0:9092"}})

	type replica struct {
		xds  *xds.Server
		addr string
	}
	serve := func(register func(*grpc.Server)) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		gs := grpc.NewServer()
		register(gs)
		go func() { _ = gs.Serve(ln) }()
		b.Cleanup(gs.Stop)
		return ln.Addr().String()
	}
	leaderStore := open()
	cp, err := controlplane.New(ctx, controlplane.WithStore(leaderStore), controlplane.WithReplication(noReplication{}),
		controlplane.ReplicaID("r1"), controlplane.WithRecords(replicas.NewRecords(leaderStore, quiet)), controlplane.Logger(quiet), clusters)
	if err != nil {
		b.Fatal(err)
	}
	defer cp.Close()
	served := []replica{{xds: cp.XDS(), addr: serve(cp.Register)}}
	for _, id := range []string{"r2", "r3"} {
		f, err := replicas.NewFollower(ctx, open(), controlplane.ReplicaID(id), controlplane.Logger(quiet), clusters)
		if err != nil {
			b.Fatal(err)
		}
		fctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = f.Run(fctx) }()
		defer func() { stop(); <-done }()
		served = append(served, replica{xds: f.XDS(), addr: serve(func(gs *grpc.Server) {
			f.XDS().Register(gs)
			batonv1.RegisterLeaseServer(gs, f)
		})})
	}

	cctx, stopClients := context.WithCancel(ctx)
	ids := make([][]string, len(served)) // per replica, its nodes
	var wg sync.WaitGroup
	defer func() { stopClients(); wg.Wait() }()
	start := time.Now()
	for i := range nClients {
		r := i % len(served)
		id := fmt.Sprintf("agent-%04d", i)
		ids[r] = append(ids[r], id)
		conn, err := grpc.NewClient(served[r].addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
		if err != nil {
			b.Fatal(err)
		}
		c, err := xds.NewClient(conn, xds.NodeMeta(id, fmt.Sprintf("ns-%d", i%xdsNamespaces), "app"), xds.ClientLogger(quiet))
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); defer conn.Close(); _ = c.Run(cctx) }()
	}
	acks := func(version uint64, at time.Time, limit time.Duration) ([][]time.Duration, error) {
		out := make([][]time.Duration, len(served))
		var g errgroup.Group
		for r := range served {
			g.Go(func() error {
				lats, err := waitAcks(ctx, served[r].xds, ids[r], version, at, limit)
				out[r] = lats
				return err
			})
		}
		return out, g.Wait()
	}
	if _, err := acks(cp.Version(), time.Now(), 10*time.Minute); err != nil {
		b.Fatal(err)
	}
	connectAll := time.Since(start)

	b.ResetTimer()
	var all, leaders, followers []time.Duration
	var rounds []string
	for round := range xdsChanges {
		topic := fanOutTopic((round * 7919) % nTopics)
		at := time.Now()
		if _, err := cp.SetState(ctx, topic, migration.Proxy, "bench"); err != nil {
			b.Fatal(err)
		}
		lats, err := acks(cp.Version(), at, 5*time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		var round []time.Duration
		for r, l := range lats {
			round = append(round, l...)
			if r > 0 {
				followers = append(followers, l...)
			} else {
				leaders = append(leaders, l...)
			}
		}
		slices.Sort(round)
		all = append(all, round...)
		rounds = append(rounds, fmt.Sprintf("change %d (v%d)   %9.1f  %9.1f  %9.1f", len(rounds)+1, cp.Version(),
			ms64(pct(round, 50)), ms64(pct(round, 99)), ms64(round[len(round)-1])))
	}
	b.StopTimer()
	slices.Sort(all)
	slices.Sort(followers)
	slices.Sort(leaders)
	b.ReportMetric(ms64(pct(all, 50)), "p50-ms")
	b.ReportMetric(ms64(pct(all, 99)), "p99-ms")
	b.ReportMetric(ms64(all[len(all)-1]), "max-ms")
	b.ReportMetric(ms64(pct(followers, 99)), "followers-p99-ms")
	b.ReportMetric(ms64(pct(followers, 99))/ms64(pct(leaders, 99)), "followers/leader-p99")
	b.ReportMetric(connectAll.Seconds(), "connect-s")
	fmt.Fprintf(os.Stderr, `
xDS fan-out through 3 replicas (leader + 2 followers, 3-member etcd, delta): %d TopicRoutes, %d clients (%d per replica), GOMAXPROCS=%d
all clients connected and ACKed in %v
time from the leader's SetState to each client's ACK (ms):
                     p50        p99        max
%s
all %d changes      %9.1f  %9.1f  %9.1f
the leader's clients      %9.1f  %9.1f  %9.1f
the followers' clients    %9.1f  %9.1f  %9.1f (p99 %.2f times the leader's)
`, nTopics, nClients, nClients/len(served), runtime.GOMAXPROCS(0), connectAll.Round(time.Millisecond), joinLines(rounds), xdsChanges,
		ms64(pct(all, 50)), ms64(pct(all, 99)), ms64(all[len(all)-1]),
		ms64(pct(leaders, 50)), ms64(pct(leaders, 99)), ms64(leaders[len(leaders)-1]),
		ms64(pct(followers, 50)), ms64(pct(followers, 99)), ms64(followers[len(followers)-1]), ms64(pct(followers, 99))/ms64(pct(leaders, 99)))
}

func fanOutTopic(i int) string { return fmt.Sprintf("topic-%05d", i) }

// noReplication is a Replication that copies nothing: the fan-out measures
// routes, and no cutover runs.
type noReplication struct{}

var _ controlplane.Replication = noReplication{}

func (noReplication) Start(string) error { return nil }
func (noReplication) Stop(context.Context, string) (map[int32]int64, []replicator.SourceBatch, error) {
	return nil, nil, nil
}
func (noReplication) SetMigrating(string, bool) error          { return nil }
func (noReplication) Lag(string) (time.Duration, error)        { return 0, nil }
func (noReplication) Progress(string) (map[int32]int64, error) { return nil, nil }
func (noReplication) Diverged(string) map[int32]string         { return nil }
func (noReplication) SourceEndOffsets(context.Context, string) (map[int32]int64, error) {
	return nil, nil
}
