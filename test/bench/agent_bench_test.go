// Package bench holds Baton's side-by-side benchmarks: each runs the
// baseline and Baton in one process run, on the same clusters, and reports
// both with their ratio. `make bench` runs them; docs/benchmarks.md records
// the numbers.
package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/bpf"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/testcert"
	"github.com/baton-kafka/baton/test/kafka"
)

const (
	recordBytes = 1 << 10
	partitions  = 6
	runFor      = 8 * time.Second
	latencyRate = 5000 // records/s for the latency runs: well under saturation
)

// BenchmarkAgentVsDirect: franz-go producers (1 KiB records, acks=all, 6
// partitions) straight to a 3-broker cluster, and through a `baton agent`
// process in front of the same cluster, side by side. Two clusters:
//
//   - kfake-blackhole: embedded kfake that discards record bytes (offsets and
//     sequences still checked). The broker costs almost nothing, so this is
//     the agent's worst case: client, broker and agent share 2 cores and
//     the agent's CPU shows directly in the ratio.
//   - apache-kafka: a real 3-broker Apache Kafka 4.4 cluster, RF 3.
//
// kfake-blackhole-proxy-features compares agents only, not direct: the
// PROXY-phase features on against off (proxyFeatures).
func BenchmarkAgentVsDirect(b *testing.B) {
	if b.N > 1 {
		b.Skip("runs a fixed workload once; use -benchtime 1x")
	}
	b.Run("kfake-blackhole", func(b *testing.B) {
		cluster, err := embedded.Start(embedded.Partitions(partitions), embedded.KfakeOpts(kfake.BlackholeProduce()))
		if err != nil {
			b.Fatal(err)
		}
		defer cluster.Close()
		agentVsDirect(b, "kfake-blackhole", cluster.Bootstrap(), 1)
	})
	b.Run("kfake-blackhole-tls", func(b *testing.B) {
		// TLS on every hop: client to cluster directly; client to agent
		// (the agent terminates it) and agent to cluster.
		ca := testcert.New(b)
		dir := b.TempDir()
		caFile, certFile, keyFile := ca.WriteFiles(b, dir, "server", ca.Server)
		cluster, err := embedded.Start(embedded.Partitions(partitions), embedded.KfakeOpts(kfake.BlackholeProduce(),
			kfake.TLS(&tls.Config{Certificates: []tls.Certificate{ca.Server}, MinVersion: tls.VersionTLS12})))
		if err != nil {
			b.Fatal(err)
		}
		defer cluster.Close()
		agentVsDirect(b, "kfake-blackhole, TLS on every hop", cluster.Bootstrap(), 1, secured{
			client: []kgo.Opt{kgo.DialTLSConfig(&tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12})},
			agentArgs: []string{"--listen-tls-cert", certFile, "--listen-tls-key", keyFile,
				"--source-tls-ca", caFile, "--destination-tls-ca", caFile},
		})
	})
	b.Run("kfake-blackhole-proxy-features", func(b *testing.B) {
		// The PROXY-phase features' cost, on against off: eBPF byte
		// counters need root and BTF.
		c, err := bpf.NewEBPF()
		if err != nil {
			b.Skipf("eBPF cannot load here, the on agent would not start: %v", err)
		}
		c.Close()
		cluster, err := embedded.Start(embedded.Partitions(partitions), embedded.KfakeOpts(kfake.BlackholeProduce()))
		if err != nil {
			b.Fatal(err)
		}
		defer cluster.Close()
		proxyFeatures(b, cluster.Bootstrap())
	})
	b.Run("apache-kafka", func(b *testing.B) {
		cluster, err := kafka.Start(context.Background(), kafka.Brokers(3), kafka.Dir(b.TempDir()))
		if err != nil {
			b.Fatal(err)
		}
		defer cluster.Stop()
		agentVsDirect(b, "apache-kafka (3 brokers, RF 3)", cluster.Bootstrap(), 3)
	})
}

// secured is how the clients and the agent reach a cluster that serves
// TLS: the clients' options (to the cluster directly, and to the agent),
// and the agent's flags.
type secured struct {
	client    []kgo.Opt
	agentArgs []string
}

// path is one way to the cluster the benchmark measures: direct, or
// through an agent process (pid set).
type path struct {
	name      string
	addr      string
	opts      []kgo.Opt // how a client dials addr
	pid       int
	mbps      float64
	p50, p99  time.Duration
	cpuPerGiB float64
}

func agentVsDirect(b *testing.B, name, bootstrap string, rf int16, sec ...secured) {
	var s secured
	if len(sec) > 0 {
		s = sec[0]
	}
	paths := []*path{{name: "direct", addr: bootstrap, opts: s.client}}
	addr, pid, stop := startAgentProcess(b, buildBaton(b), bootstrap, s.agentArgs...)
	defer stop()
	paths = append(paths, &path{name: "agent", addr: addr, opts: s.client, pid: pid})
	if bin := os.Getenv(envBaselineBin); bin != "" && s.agentArgs == nil {
		// (Not with TLS: an agent from before the listener's TLS flags
		// would refuse them.)
		// An agent built from another commit, measured in the same run:
		// the before of a before-and-after (test/bench/compare.sh).
		addr, pid, stop := startAgentProcess(b, bin, bootstrap)
		defer stop()
		label := os.Getenv(envBaselineName)
		if label == "" {
			label = "baseline"
		}
		paths = append(paths, &path{name: label, addr: addr, pid: pid})
	}
	if os.Getenv(envWriteRanges) != "" && s.agentArgs == nil {
		// The cost of keeping the acked offset ranges for bypass
		// detection, on against off in the same run: both agents route
		// the topic PROXY (static routes), where the ranges are kept.
		routes := b.TempDir() + "/routes.yaml"
		if err := os.WriteFile(routes, []byte("routes:\n  - topic: bench\n    state: PROXY\n"), 0o600); err != nil {
			b.Fatal(err)
		}
		bin := buildBaton(b)
		for _, mode := range []string{"off", "on"} {
			addr, pid, stop := startAgentProcess(b, bin, bootstrap, "--routes", routes, "--write-ranges", mode)
			defer stop()
			paths = append(paths, &path{name: "ranges-" + mode, addr: addr, pid: pid})
		}
	}
	createTopic(b, bootstrap, "bench", rf, s.client...)

	// Warm up every path (JIT on a JVM broker, connections, pools) before
	// anything is measured, then interleave so that drift hits all alike;
	// the agents swap places each round.
	for _, p := range paths {
		warmUp(b, p.addr, p.opts)
	}
	const rounds = 2
	order := func(round int) []*path {
		o := slices.Clone(paths)
		if round%2 == 1 {
			slices.Reverse(o[1:])
		}
		return o
	}
	for round := 0; round < rounds; round++ {
		for _, p := range order(round) {
			var cpu0 time.Duration
			if p.pid != 0 {
				cpu0 = processCPU(b, p.pid)
			}
			t := throughput(b, p.addr, p.opts)
			p.mbps += t.mbps / rounds
			if p.pid != 0 {
				p.cpuPerGiB += (processCPU(b, p.pid) - cpu0).Seconds() / (float64(t.bytes) / (1 << 30)) / rounds
			}
		}
	}
	for round := 0; round < rounds; round++ {
		for _, p := range order(round) {
			p50, p99 := latency(b, p.addr, p.opts)
			p.p50, p.p99 = p.p50+p50/rounds, p.p99+p99/rounds
		}
	}

	direct, agent := paths[0], paths[1]
	b.ReportMetric(direct.mbps, "direct-MB/s")
	b.ReportMetric(agent.mbps, "agent-MB/s")
	b.ReportMetric(agent.mbps/direct.mbps, "throughput-ratio")
	b.ReportMetric(float64(agent.p99-direct.p99)/1e6, "p99-added-ms")
	b.ReportMetric(agent.cpuPerGiB, "agent-cpu-s/GiB")
	var t strings.Builder
	fmt.Fprintf(&t, "\nagent vs direct on %s\n(franz-go, 1 KiB records, acks=all, %d partitions, %d interleaved %s runs each, GOMAXPROCS=%d)\n",
		name, partitions, rounds, runFor, runtime.GOMAXPROCS(0))
	fmt.Fprintf(&t, "%-22s", "")
	for _, p := range paths {
		fmt.Fprintf(&t, "%14s", p.name)
	}
	row := func(label string, f func(p *path) string) {
		fmt.Fprintf(&t, "\n%-22s", label)
		for _, p := range paths {
			fmt.Fprintf(&t, "%14s", f(p))
		}
	}
	row("throughput MB/s", func(p *path) string { return fmt.Sprintf("%.1f", p.mbps) })
	row("  ratio to direct", func(p *path) string { return fmt.Sprintf("%.2fx", p.mbps/direct.mbps) })
	row(fmt.Sprintf("p50 ms (%d rec/s)", latencyRate), func(p *path) string { return fmt.Sprintf("%.2f", ms(p.p50)) })
	row("p99 ms", func(p *path) string { return fmt.Sprintf("%.2f", ms(p.p99)) })
	row("  p99 added ms", func(p *path) string { return fmt.Sprintf("%+.2f", ms(p.p99-direct.p99)) })
	row("agent CPU s/GiB", func(p *path) string {
		if p.pid == 0 {
			return ""
		}
		return fmt.Sprintf("%.2f", p.cpuPerGiB)
	})
	fmt.Fprintln(os.Stderr, t.String())
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

type tput struct {
	mbps  float64
	bytes int64
}

// warmUp produces for a few seconds and throws the numbers away.
func warmUp(b *testing.B, bootstrap string, opts []kgo.Opt) {
	cl := client(b, bootstrap, opts...)
	defer cl.Close()
	value := make([]byte, recordBytes)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		cl.Produce(ctx, &kgo.Record{Value: value}, nil)
	}
	cl.Flush(context.Background())
}

// throughput produces as fast as one client goes for runFor.
func throughput(b *testing.B, bootstrap string, opts []kgo.Opt) tput {
	cl := client(b, bootstrap, opts...)
	defer cl.Close()
	value := make([]byte, recordBytes)
	ctx, cancel := context.WithTimeout(context.Background(), runFor)
	defer cancel()
	var acked atomic.Int64
	var failed atomic.Int64
	start := time.Now()
	for ctx.Err() == nil {
		cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Add(1)
				return
			}
			acked.Add(1)
		})
	}
	elapsed := time.Since(start)
	cl.Flush(context.Background())
	if n := failed.Load(); n > 0 && acked.Load() == 0 {
		b.Fatalf("every record to %s failed", bootstrap)
	}
	n := acked.Load() * recordBytes
	return tput{mbps: float64(n) / elapsed.Seconds() / 1e6, bytes: n}
}

// latency produces at latencyRate for runFor and returns p50 and p99 of the
// time from Produce to ack.
func latency(b *testing.B, bootstrap string, opts []kgo.Opt) (time.Duration, time.Duration) {
	cl := client(b, bootstrap, append(opts, kgo.ProducerLinger(0))...)
	defer cl.Close()
	value := make([]byte, recordBytes)
	var mu sync.Mutex
	var lats []time.Duration
	tick := time.NewTicker(time.Second / latencyRate)
	defer tick.Stop()
	end := time.Now().Add(runFor)
	for time.Now().Before(end) {
		<-tick.C
		at := time.Now()
		cl.Produce(context.Background(), &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				return
			}
			d := time.Since(at)
			mu.Lock()
			lats = append(lats, d)
			mu.Unlock()
		})
	}
	cl.Flush(context.Background())
	if len(lats) == 0 {
		b.Fatalf("no record to %s was acked", bootstrap)
	}
	slices.Sort(lats)
	return lats[len(lats)/2], lats[len(lats)*99/100]
}

func client(b *testing.B, bootstrap string, opts ...kgo.Opt) *kgo.Client {
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.DefaultProduceTopic("bench"),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	return cl
}

func createTopic(b *testing.B, bootstrap, topic string, rf int16, opts ...kgo.Opt) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(bootstrap, ",")...)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(context.Background(), partitions, rf, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		b.Fatal(err)
	}
}

// Environment of BenchmarkAgentVsDirect, for a before-and-after in one run
// (test/bench/compare.sh sets both).
const (
	envBaselineBin  = "BATON_BENCH_BASELINE_BIN"  // a baton binary to measure as well
	envBaselineName = "BATON_BENCH_BASELINE_NAME" // its column's name; default "baseline"
	// envWriteRanges, set, adds two agents routing the topic PROXY, one
	// keeping the acked offset ranges for bypass detection and one not
	// (--write-ranges on and off), as columns ranges-on and ranges-off.
	envWriteRanges = "BATON_BENCH_WRITE_RANGES"
)

// startAgentProcess starts `baton agent` from bin in front of bootstrap, so
// that its CPU time can be read apart from the benchmark's.
func startAgentProcess(b *testing.B, bin, bootstrap string, args ...string) (addr string, pid int, stop func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr = ln.Addr().String()
	ln.Close()
	admin := os.Getenv("BATON_BENCH_AGENT_ADMIN") // e.g. 127.0.0.1:9404, to profile the agent
	cmd := exec.Command(bin, append([]string{"agent", "--listen", addr, "--admin", admin, "--log-level", "warn",
		"--source", bootstrap, "--destination", bootstrap}, args...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			b.Fatalf("agent never listened on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return addr, cmd.Process.Pid, func() { cmd.Process.Kill(); cmd.Wait() }
}

// processCPU reads user+system CPU time of pid from /proc.
func processCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name, which is in parentheses.
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clkTck
}
