package bench

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/baton-kafka/baton/bpf"
	"github.com/baton-kafka/baton/internal/embedded"
)

// BenchmarkAgentByteCounters: the same `baton agent` in front of kfake
// (blackhole, the agent's worst case) with --byte-counters=userspace and
// =ebpf, interleaved in one run; reports the eBPF agent's throughput and
// CPU per GiB as ratios to the userspace one's. Where eBPF cannot load
// (not root, no BTF) it skips with the reason. -short: one round, a
// smoke run.
func BenchmarkAgentByteCounters(b *testing.B) {
	if b.N > 1 {
		b.Skip("runs a fixed workload once; use -benchtime 1x")
	}
	c, err := bpf.NewEBPF()
	if err != nil {
		b.Skipf("eBPF cannot load here, nothing to compare: %v", err)
	}
	c.Close()
	cluster, err := embedded.Start(embedded.Partitions(partitions), embedded.KfakeOpts(kfake.BlackholeProduce()))
	if err != nil {
		b.Fatal(err)
	}
	defer cluster.Close()
	bootstrap := cluster.Bootstrap()
	bin := buildBaton(b)
	var paths []*path
	for _, impl := range []string{bpf.ImplUserspace, bpf.ImplEBPF} {
		addr, pid, stop := startAgentProcess(b, bin, bootstrap, "--byte-counters", impl)
		defer stop()
		paths = append(paths, &path{name: impl, addr: addr, pid: pid})
	}
	createTopic(b, bootstrap, "bench", 1)
	for _, p := range paths {
		warmUp(b, p.addr, nil)
	}
	rounds := 2
	if testing.Short() {
		rounds = 1
	}
	for round := range rounds {
		o := slices.Clone(paths)
		if round%2 == 1 {
			slices.Reverse(o)
		}
		for _, p := range o {
			cpu0 := processCPU(b, p.pid)
			t := throughput(b, p.addr, nil)
			p.mbps += t.mbps / float64(rounds)
			p.cpuPerGiB += (processCPU(b, p.pid) - cpu0).Seconds() / (float64(t.bytes) / (1 << 30)) / float64(rounds)
		}
	}
	user, kern := paths[0], paths[1]
	b.ReportMetric(user.mbps, "userspace-MB/s")
	b.ReportMetric(kern.mbps, "ebpf-MB/s")
	b.ReportMetric(kern.mbps/user.mbps, "ebpf-throughput-ratio")
	b.ReportMetric(kern.cpuPerGiB/user.cpuPerGiB, "ebpf-cpu-ratio")
	var t strings.Builder
	fmt.Fprintf(&t, "\nagent byte counters on kfake-blackhole\n(franz-go, 1 KiB records, acks=all, %d partitions, %d interleaved %s runs each, GOMAXPROCS=%d)\n",
		partitions, rounds, runFor, runtime.GOMAXPROCS(0))
	fmt.Fprintf(&t, "%-22s%14s%14s\n", "", user.name, kern.name)
	fmt.Fprintf(&t, "%-22s%14.1f%14.1f  (%.2fx)\n", "throughput MB/s", user.mbps, kern.mbps, kern.mbps/user.mbps)
	fmt.Fprintf(&t, "%-22s%14.2f%14.2f  (%.2fx)\n", "agent CPU s/GiB", user.cpuPerGiB, kern.cpuPerGiB, kern.cpuPerGiB/user.cpuPerGiB)
	fmt.Fprint(os.Stderr, t.String())
}
