package bench

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/replicas"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/test/etcdcluster"
	"github.com/baton-kafka/baton/xds"
)

// takeoverKills is how many leaders BenchmarkLeaderTakeover kills
// (BATON_BENCH_TAKEOVER_KILLS overrides it).
const takeoverKills = 10

// BenchmarkLeaderTakeover: three `baton controlplane` replicas on a
// three-member etcd (--leader-ttl 1s; BATON_BENCH_TAKEOVER_TTL overrides
// it). Before each kill two agents (xDS client and lease keeper, given
// every replica's address) attach, one to the leader, one to a follower.
// The leader is killed with SIGKILL, and the time from the kill to the
// first lease each agent is granted afterwards is measured: the leader's
// agent's comes from another replica (followers serve leases), the
// follower's agent's is its next renewal. The killed replica is started
// again before the next kill; each kill comes at a random point of the
// agents' renewal period. Reported: p50 and p99 over the kills of the
// leader's agent, p99 as a ratio of the lease (what an agent's producers
// ride through without a stall: under 1, a takeover costs them nothing),
// and the follower's agent's p99.
func BenchmarkLeaderTakeover(b *testing.B) {
	kills := takeoverKills
	if v, err := strconv.Atoi(os.Getenv("BATON_BENCH_TAKEOVER_KILLS")); err == nil && v > 0 {
		kills = v
	}
	ttl := "1s"
	if v := os.Getenv("BATON_BENCH_TAKEOVER_TTL"); v != "" {
		ttl = v
	}
	for range b.N {
		benchTakeover(b, kills, ttl)
	}
}

func benchTakeover(b *testing.B, kills int, ttl string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	bin := buildBaton(b)
	etcd := etcdcluster.Start(b, 3)
	endpoints := strings.Join(etcd.Endpoints(), ",")
	src, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(1))
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	dst, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(1))
	if err != nil {
		b.Fatal(err)
	}
	defer dst.Close()

	addrs := []string{freeAddr(b), freeAddr(b), freeAddr(b)}
	type replica struct {
		cmd  *exec.Cmd
		log  *bytes.Buffer
		done chan struct{}
	}
	procs := make([]*replica, len(addrs))
	start := func(i int) {
		var log bytes.Buffer
		cmd := exec.Command(bin, "controlplane", "--source", src.Bootstrap(), "--destination", dst.Bootstrap(),
			"--write-guard", "none", "--source-fence", "none", "--etcd-endpoints", endpoints,
			"--replica-id", fmt.Sprintf("r%d", i), "--leader-ttl", ttl, "--grpc", addrs[i], "--http", "127.0.0.1:0",
			"--log-level", "warn")
		cmd.Stdout, cmd.Stderr = &syncWriter{w: &log}, &syncWriter{w: &log}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		r := &replica{cmd: cmd, log: &log, done: make(chan struct{})}
		go func() { _ = cmd.Wait(); close(r.done) }()
		procs[i] = r
	}
	defer func() {
		for _, r := range procs {
			if r != nil {
				_ = r.cmd.Process.Kill()
				<-r.done
			}
		}
	}()
	for i := range addrs {
		start(i)
	}
	store, err := controlplane.OpenEtcd(ctx, etcd.Endpoints())
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	leader := func(not string) string {
		var id string
		wait.For(b, time.Minute, "a leader other than "+not, func() string {
			st, err := replicas.Status(ctx, store)
			if err != nil || st.Leader == "" || st.Leader == not {
				return fmt.Sprintf("leader %q, %v", st.Leader, err)
			}
			id = st.Leader
			return ""
		})
		return id
	}

	b.ResetTimer()
	var took, kept []time.Duration
	lapsed := 0 // leases that ran out before the first grant after a kill
	for k := range kills {
		id := leader("")
		i, _ := strconv.Atoi(strings.TrimPrefix(id, "r"))
		// One agent attached to the leader, one to a follower, each
		// given every replica's address (as `baton agent --control-plane
		// a,b,c` dials them), its own first.
		order := func(first int) []string {
			out := []string{addrs[first]}
			for j, a := range addrs {
				if j != first {
					out = append(out, a)
				}
			}
			return out
		}
		onLeader, stopL := takeoverAgent(b, ctx, order(i), fmt.Sprintf("on-leader-%d", k))
		onFollower, stopF := takeoverAgent(b, ctx, order((i+1)%len(addrs)), fmt.Sprintf("on-follower-%d", k))
		// Anywhere in the agents' renewal period (lease/3): right after a
		// renewal the next one is a whole period away whatever serves it.
		time.Sleep(rand.N(migration.DefaultLease / 3))
		validL, validF := onLeader.ValidUntil(), onFollower.ValidUntil()
		_ = procs[i].cmd.Process.Kill()
		killed := time.Now()
		<-procs[i].done
		took = append(took, firstGrantAfter(b, ctx, onLeader, killed))
		if time.Now().After(validL) {
			lapsed++
		}
		kept = append(kept, firstGrantAfter(b, ctx, onFollower, killed))
		if time.Now().After(validF) {
			lapsed++
		}
		b.Logf("kill %d: leader %s killed; its agent's first lease from another replica %v later, the follower's agent's %v "+
			"(new leader %s)", k+1, id, took[k].Round(time.Millisecond), kept[k].Round(time.Millisecond), leader(id))
		stopL()
		stopF()
		start(i)
	}
	b.StopTimer()
	slices.Sort(took)
	slices.Sort(kept)
	p50, p99 := took[len(took)/2], took[min(len(took)-1, len(took)*99/100)]
	f99 := kept[min(len(kept)-1, len(kept)*99/100)]
	b.ReportMetric(p50.Seconds()*1000, "takeover-p50-ms")
	b.ReportMetric(p99.Seconds()*1000, "takeover-p99-ms")
	b.ReportMetric(p99.Seconds()/migration.DefaultLease.Seconds(), "p99/lease")
	b.ReportMetric(f99.Seconds()*1000, "follower-agent-p99-ms")
	b.ReportMetric(float64(lapsed), "leases-lapsed")
	fmt.Printf("\nleader takeover (3 replicas, 3-member etcd, --leader-ttl %s): %d kills; kill to the first lease granted "+
		"by another replica to the killed leader's agent: p50 %v, p99 %v (%.2f of the %v lease); "+
		"to the next renewal of an agent on a follower: p99 %v; leases that ran out meanwhile: %d of %d\n", ttl, len(took),
		p50.Round(time.Millisecond), p99.Round(time.Millisecond), p99.Seconds()/migration.DefaultLease.Seconds(), migration.DefaultLease,
		f99.Round(time.Millisecond), lapsed, 2*len(took))
}

// takeoverAgent is an agent's xDS client and lease keeper on addrs (the
// first is the one it attaches to), holding a lease when it returns.
func takeoverAgent(b *testing.B, ctx context.Context, addrs []string, id string) (*xds.LeaseKeeper, func()) {
	b.Helper()
	target, ropts := xds.ReplicasTarget(addrs)
	conn, err := grpc.NewClient(target, append(ropts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		b.Fatal(err)
	}
	node := xds.NodeMeta(id, "bench", "takeover")
	var applied atomic.Uint64
	client, err := xds.NewClient(conn, node, xds.OnRoutes(func(v uint64, _ []*batonv1.TopicRoute) error {
		applied.Store(v)
		return nil
	}))
	if err != nil {
		b.Fatal(err)
	}
	keeper, err := xds.NewLeaseKeeper(conn, node, func() (uint64, []*batonv1.TopicDrain) { return applied.Load(), nil })
	if err != nil {
		b.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = client.Run(rctx) }()
	go func() { defer wg.Done(); _ = keeper.Run(rctx) }()
	for !keeper.Valid() {
		select {
		case <-keeper.Renewed():
		case <-time.After(time.Second):
		case <-ctx.Done():
			b.Fatalf("%s: no lease: %v", id, ctx.Err())
		}
	}
	return keeper, func() { stop(); wg.Wait(); _ = conn.Close() }
}

// firstGrantAfter waits for a lease of a heartbeat sent after at (one in
// flight may have been answered by the killed replica just before) and
// returns how long after at it came.
func firstGrantAfter(b *testing.B, ctx context.Context, keeper *xds.LeaseKeeper, at time.Time) time.Duration {
	b.Helper()
	for keeper.ValidUntil().Add(-migration.DefaultLease).Before(at) {
		select {
		case <-keeper.Renewed():
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			b.Fatalf("no lease granted after the kill: %v", ctx.Err())
		}
	}
	return time.Since(at)
}

// syncWriter serializes writes to w (a process's stdout and stderr share
// one buffer).
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
