package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/xds"
)

// Sizes of BenchmarkXDSFanOut (10,000 topics, 1,000 agents), overridable to smoke-run it small.
const (
	xdsClients    = 1000
	xdsTopics     = 10000
	xdsNamespaces = 4
	xdsChanges    = 5
)

// BenchmarkXDSFanOut: the xDS server as the control plane uses it
// (xds.NewServer, Update with every route of the new config version, each
// at the version at which its topic last changed) on loopback gRPC, 10,000
// TopicRoutes, 1,000 xds.Client nodes over 4 namespaces, each on its own
// connection. Once every node ACKed the initial version, one topic goes
// MIGRATING (a cutover's first push), and the time from Update to each
// node's ACK, as the server records it, is measured; repeated xdsChanges
// times, a different topic each time. Also reports the heap in use with
// every client connected (server and clients: one process).
//
// Sub-benchmarks: sotw (state of the world) and delta (incremental xDS, the
// client's default), each from a fresh server, run one after the other.
//
// BATON_BENCH_XDS_CLIENTS and BATON_BENCH_XDS_TOPICS override the sizes;
// BATON_BENCH_XDS_HEAPPROFILE names a directory to write a heap profile per
// sub-benchmark to, taken when the heap is measured.
func BenchmarkXDSFanOut(b *testing.B) {
	// SotW first: whatever the first leaves behind (heap, pooled buffers,
	// closing connections) weighs on the second, and delta is the one
	// measured against the goal.
	for _, p := range []xds.Protocol{xds.SotW, xds.Delta} {
		b.Run(p.String(), func(b *testing.B) { benchFanOut(b, p) })
	}
}

func benchFanOut(b *testing.B, protocol xds.Protocol) {
	if b.N > 1 {
		b.Skip("runs a fixed workload once; use -benchtime 1x")
	}
	debug.FreeOSMemory() // start from a collected heap
	nClients := envInt(b, "BATON_BENCH_XDS_CLIENTS", xdsClients)
	nTopics := envInt(b, "BATON_BENCH_XDS_TOPICS", xdsTopics)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	srv := xds.NewServer(xds.WithLogger(quiet))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	go func() { _ = g.Serve(ln) }()
	defer g.Stop()

	states := make([]batonv1.State, nTopics)
	changedAt := make([]uint64, nTopics) // per topic, the config version it last changed at
	var version uint64 = 1
	for i := range states {
		states[i], changedAt[i] = batonv1.State_STATE_PROXY, version
	}
	publish := func() { srv.Update(fanOutResources(version, states, changedAt)) }
	publish()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ids := make([]string, nClients)
	conns := make([]*grpc.ClientConn, nClients)
	defer func() {
		cancel()
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	start := time.Now()
	for i := range nClients {
		ids[i] = fmt.Sprintf("agent-%04d", i)
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
		if err != nil {
			b.Fatal(err)
		}
		conns[i] = conn
		c, err := xds.NewClient(conn, xds.NodeMeta(ids[i], fmt.Sprintf("ns-%d", i%xdsNamespaces), "app"),
			xds.ClientLogger(quiet), xds.UseProtocol(protocol))
		if err != nil {
			b.Fatal(err)
		}
		go func() { _ = c.Run(ctx) }()
	}
	if _, err := waitAcks(ctx, srv, ids, version, time.Now(), 10*time.Minute); err != nil {
		b.Fatal(err)
	}
	connectAll := time.Since(start)

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heapMiB := float64(ms.HeapInuse) / (1 << 20)
	if dir := os.Getenv("BATON_BENCH_XDS_HEAPPROFILE"); dir != "" {
		writeHeapProfile(b, filepath.Join(dir, "xds-heap-"+protocol.String()+".prof"))
	}

	var all []time.Duration
	var rounds []string
	for round := range xdsChanges {
		// A cutover in progress: each round one more topic goes MIGRATING
		// (the ones before stay), so each publish changes one route.
		topic := (round * 7919) % nTopics
		version++
		states[topic], changedAt[topic] = batonv1.State_STATE_MIGRATING, version
		at := time.Now()
		publish()
		lats, err := waitAcks(ctx, srv, ids, version, at, 5*time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		slices.Sort(lats)
		all = append(all, lats...)
		rounds = append(rounds, fmt.Sprintf("change %d (v%d)   %9.1f  %9.1f  %9.1f",
			round+1, version, ms64(pct(lats, 50)), ms64(pct(lats, 99)), ms64(lats[len(lats)-1])))
	}
	slices.Sort(all)
	b.ReportMetric(ms64(pct(all, 50)), "p50-ms")
	b.ReportMetric(ms64(pct(all, 99)), "p99-ms")
	b.ReportMetric(ms64(all[len(all)-1]), "max-ms")
	b.ReportMetric(heapMiB, "heap-MiB")
	b.ReportMetric(connectAll.Seconds(), "connect-s")
	fmt.Fprintf(os.Stderr, `
xDS fan-out (%s): %d TopicRoutes, %d clients (%d namespaces, one connection each), GOMAXPROCS=%d
all clients connected and ACKed v1 in %v; heap in use after GC: %.0f MiB (server and clients)
time from Update to each client's ACK (ms):
                     p50        p99        max
%s
all %d changes      %9.1f  %9.1f  %9.1f
`, protocol, nTopics, nClients, xdsNamespaces, runtime.GOMAXPROCS(0), connectAll.Round(time.Millisecond), heapMiB,
		joinLines(rounds), xdsChanges, ms64(pct(all, 50)), ms64(pct(all, 99)), ms64(all[len(all)-1]))
}

// writeHeapProfile writes the live heap to path: where the heap in use goes.
func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// fanOutResources renders the routes the way the control plane's publish
// does: every route a new message at each config version, carrying the
// version at which its topic last changed (changedAt).
func fanOutResources(version uint64, states []batonv1.State, changedAt []uint64) xds.Resources {
	res := xds.Resources{Version: version, Targets: map[string]xds.Target{},
		Clusters: []*batonv1.Cluster{
			{Name: "source", Bootstrap: []string{"source-0:9092", "source-1:9092", "source-2:9092"}},
			{Name: "destination", Bootstrap: []string{"dest-0:9092", "dest-1:9092", "dest-2:9092"}},
		}}
	res.Routes = make([]*batonv1.TopicRoute, len(states))
	for i, st := range states {
		res.Routes[i] = &batonv1.TopicRoute{Topic: fmt.Sprintf("topic-%05d", i), State: st, Version: changedAt[i],
			SourceCluster: "source", DestinationCluster: "destination",
			HoldMax: durationpb.New(5 * time.Second), ForwardDeadline: durationpb.New(2 * time.Second)}
	}
	return res
}

// waitAcks waits until the server recorded an ACK of version from every
// node, and returns, per node, the time from at to when the ACK was seen.
func waitAcks(ctx context.Context, srv *xds.Server, ids []string, version uint64, at time.Time,
	limit time.Duration) ([]time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	pending := slices.Clone(ids)
	lats := make([]time.Duration, 0, len(ids))
	for {
		ch := srv.Changed()
		now := time.Now()
		pending = slices.DeleteFunc(pending, func(id string) bool {
			n, ok := srv.Node(id)
			if ok && n.AckedVersion >= version {
				lats = append(lats, now.Sub(at))
				return true
			}
			return false
		})
		if len(pending) == 0 {
			return lats, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d clients did not ACK version %d within %v", len(pending), len(ids), version, limit)
		case <-ch:
		}
	}
}

func envInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

func pct(sorted []time.Duration, p int) time.Duration {
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

func ms64(d time.Duration) float64 { return float64(d) / 1e6 }

func joinLines(ls []string) string {
	out := ""
	for i, l := range ls {
		if i > 0 {
			out += "\n"
		}
		out += l
	}
	return out
}
