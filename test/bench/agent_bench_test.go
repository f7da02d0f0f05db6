// Package bench holds Baton's side-by-side benchmarks: each runs the
// baseline and Baton in one process run, on the same clusters, and reports
// both with their ratio. `make bench` runs them; docs/benchmarks.md records
// the numbers.
package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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

	"github.com/baton-kafka/baton/test/embedded"
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
	b.Run("apache-kafka", func(b *testing.B) {
		cluster, err := kafka.Start(context.Background(), kafka.Brokers(3), kafka.Dir(b.TempDir()))
		if err != nil {
			b.Fatal(err)
		}
		defer cluster.Stop()
		agentVsDirect(b, "apache-kafka (3 brokers, RF 3)", cluster.Bootstrap(), 3)
	})
}

func agentVsDirect(b *testing.B, name, bootstrap string, rf int16) {
	agentAddr, agentPID, stop := startAgentProcess(b, bootstrap)
	defer stop()
	createTopic(b, bootstrap, "bench", rf)

	type result struct {
		mbps      float64
		p50, p99  time.Duration
		cpuPerGiB float64
	}
	var direct, agent result
	// Warm up both paths (JIT on a JVM broker, connections, pools) before
	// anything is measured, then interleave so that drift hits both alike.
	warmUp(b, bootstrap)
	warmUp(b, agentAddr)
	for round := 0; round < 2; round++ {
		d := throughput(b, bootstrap)
		cpu0 := processCPU(b, agentPID)
		a := throughput(b, agentAddr)
		cpu1 := processCPU(b, agentPID)
		direct.mbps += d.mbps / 2
		agent.mbps += a.mbps / 2
		agent.cpuPerGiB += (cpu1 - cpu0).Seconds() / (float64(a.bytes) / (1 << 30)) / 2
	}
	for round := 0; round < 2; round++ {
		d50, d99 := latency(b, bootstrap)
		a50, a99 := latency(b, agentAddr)
		direct.p50, direct.p99 = direct.p50+d50/2, direct.p99+d99/2
		agent.p50, agent.p99 = agent.p50+a50/2, agent.p99+a99/2
	}

	b.ReportMetric(direct.mbps, "direct-MB/s")
	b.ReportMetric(agent.mbps, "agent-MB/s")
	b.ReportMetric(agent.mbps/direct.mbps, "throughput-ratio")
	b.ReportMetric(float64(agent.p99-direct.p99)/1e6, "p99-added-ms")
	b.ReportMetric(agent.cpuPerGiB, "agent-cpu-s/GiB")
	fmt.Fprintf(os.Stderr, `
agent vs direct on %s
(franz-go, 1 KiB records, acks=all, %d partitions, 2 interleaved %s runs each, GOMAXPROCS=%d)
                     direct      agent     ratio
throughput MB/s   %9.1f  %9.1f   %6.2fx
p50 latency ms    %9.2f  %9.2f   %+6.2f ms (at %d rec/s)
p99 latency ms    %9.2f  %9.2f   %+6.2f ms
agent CPU s/GiB              %9.2f
`, name, partitions, runFor, runtime.GOMAXPROCS(0),
		direct.mbps, agent.mbps, agent.mbps/direct.mbps,
		ms(direct.p50), ms(agent.p50), ms(agent.p50-direct.p50), latencyRate,
		ms(direct.p99), ms(agent.p99), ms(agent.p99-direct.p99),
		agent.cpuPerGiB)
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

type tput struct {
	mbps  float64
	bytes int64
}

// warmUp produces for a few seconds and throws the numbers away.
func warmUp(b *testing.B, bootstrap string) {
	cl := client(b, bootstrap)
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
func throughput(b *testing.B, bootstrap string) tput {
	cl := client(b, bootstrap)
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
func latency(b *testing.B, bootstrap string) (time.Duration, time.Duration) {
	cl := client(b, bootstrap, kgo.ProducerLinger(0))
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

func createTopic(b *testing.B, bootstrap, topic string, rf int16) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(bootstrap, ",")...))
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

// startAgentProcess builds and starts `baton agent` in front of bootstrap,
// so that its CPU time can be read apart from the benchmark's.
func startAgentProcess(b *testing.B, bootstrap string) (addr string, pid int, stop func()) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "baton")
	build := exec.Command("go", "build", "-o", bin, "github.com/baton-kafka/baton/cmd/baton")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building baton: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr = ln.Addr().String()
	ln.Close()
	admin := os.Getenv("BATON_BENCH_AGENT_ADMIN") // e.g. 127.0.0.1:9404, to profile the agent
	cmd := exec.Command(bin, "agent", "--listen", addr, "--admin", admin, "--log-level", "warn",
		"--source", bootstrap, "--destination", bootstrap)
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
