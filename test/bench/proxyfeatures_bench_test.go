package bench

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-kafka/baton/bpf"
)

// Route files of the proxy-features run: the bench topic in PROXY, with
// the shadow switches off, and with latency emulation and headroom on at a
// zero destination latency (every response's emulation target is 0, so
// the filters run and add no delay).
const (
	routesFeaturesOff = "routes:\n  - topic: bench\n    state: PROXY\n"
	routesFeaturesOn  = routesFeaturesOff + "    latencyEmulation: true\n    destinationLatency: {p50: 0s, p99: 0s}\n    headroom: true\n"
)

// proxyFeatures measures the PROXY-phase features' cost: the same agent
// with eBPF byte counters, write ranges, latency emulation and headroom on
// (column "on") against userspace counters and all of them off ("off"),
// plus a second "off" agent ("off-again"), whose ratio to the first is the
// A/A spread of the run. Each agent process lives only while it is
// measured: the eBPF programs hook every send and receive on the machine,
// so an "on" agent left running would tax the "off" ones too. Rounds
// rotate the order so each agent is measured once in each place.
func proxyFeatures(b *testing.B, bootstrap string) {
	dir := b.TempDir()
	off, on := filepath.Join(dir, "off.yaml"), filepath.Join(dir, "on.yaml")
	for f, s := range map[string]string{off: routesFeaturesOff, on: routesFeaturesOn} {
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	offArgs := []string{"--routes", off, "--byte-counters", bpf.ImplUserspace, "--write-ranges", "off"}
	onArgs := []string{"--routes", on, "--byte-counters", bpf.ImplEBPF, "--write-ranges", "on"}
	type variant struct {
		*path
		args []string
	}
	vs := []variant{{&path{name: "off"}, offArgs}, {&path{name: "on"}, onArgs}, {&path{name: "off-again"}, offArgs}}
	bin := buildBaton(b)
	createTopic(b, bootstrap, "bench", 1)
	rounds := 3
	if n, err := strconv.Atoi(os.Getenv("BATON_BENCH_PROXY_ROUNDS")); err == nil && n > 0 {
		rounds = n // more rounds narrow the paired ratios' spread
	}
	if testing.Short() {
		rounds = 1
	}
	// perRound[v][r] is variant v's throughput in round r: ratios within a
	// round compare agents measured minutes apart at most.
	perRound := make([][]float64, len(vs))
	for i := range perRound {
		perRound[i] = make([]float64, rounds)
	}
	emulated := 0.0
	for round := range rounds {
		for i := range vs {
			vi := (i + round) % len(vs)
			v := vs[vi]
			admin := freeAddr(b)
			addr, pid, stop := startAgentProcess(b, bin, bootstrap, append(v.args, "--admin", admin)...)
			if v.name == "on" {
				// The latency filter emulates only what /routes lists
				// with a profile (the same test on the route).
				if want := "bench\tPROXY\tlatency emulation p50 0s p99 0s"; !strings.Contains(adminGet(b, admin, "/routes"), want) {
					b.Fatalf("the on agent's /routes lacks %q", want)
				}
			}
			warmUp(b, addr, nil)
			cpu0 := processCPU(b, pid)
			t := throughput(b, addr, nil)
			v.mbps += t.mbps / float64(rounds)
			perRound[vi][round] = t.mbps
			v.cpuPerGiB += (processCPU(b, pid) - cpu0).Seconds() / (float64(t.bytes) / (1 << 30)) / float64(rounds)
			p50, p99 := latency(b, addr, nil)
			v.p50, v.p99 = v.p50+p50/time.Duration(rounds), v.p99+p99/time.Duration(rounds)
			if v.name == "on" {
				emulated += metricValue(adminGet(b, admin, "/metrics"), "baton_agent_latency_emulation_added_seconds_count")
			}
			stop()
		}
	}
	o, n, aa := vs[0], vs[1], vs[2]
	b.ReportMetric(o.mbps, "off-MB/s")
	b.ReportMetric(n.mbps, "on-MB/s")
	b.ReportMetric(n.mbps/o.mbps, "on/off-throughput-ratio")
	b.ReportMetric(aa.mbps/o.mbps, "A/A-throughput-ratio")
	b.ReportMetric(n.cpuPerGiB/o.cpuPerGiB, "on/off-cpu-ratio")
	var t strings.Builder
	fmt.Fprintf(&t, "\nPROXY features on vs off on kfake-blackhole\n(franz-go, 1 KiB records, acks=all, %d partitions, %d rotated %s runs each, GOMAXPROCS=%d)\n",
		partitions, rounds, runFor, runtime.GOMAXPROCS(0))
	fmt.Fprintf(&t, "%-22s", "")
	row := func(label string, f func(p *path) string) {
		fmt.Fprintf(&t, "\n%-22s", label)
		for _, v := range vs {
			fmt.Fprintf(&t, "%14s", f(v.path))
		}
	}
	for _, v := range vs {
		fmt.Fprintf(&t, "%14s", v.name)
	}
	row("throughput MB/s", func(p *path) string { return fmt.Sprintf("%.1f", p.mbps) })
	row("  ratio to off", func(p *path) string { return fmt.Sprintf("%.3fx", p.mbps/o.mbps) })
	row("agent CPU s/GiB", func(p *path) string { return fmt.Sprintf("%.3f", p.cpuPerGiB) })
	row("  ratio to off", func(p *path) string { return fmt.Sprintf("%.3fx", p.cpuPerGiB/o.cpuPerGiB) })
	row(fmt.Sprintf("p50 ms (%d rec/s)", latencyRate), func(p *path) string { return fmt.Sprintf("%.2f", ms(p.p50)) })
	row("p99 ms", func(p *path) string { return fmt.Sprintf("%.2f", ms(p.p99)) })
	fmt.Fprintf(&t, "\nresponses the on agent's latency filter delayed: %.0f\n", emulated)
	onOff, aa2 := pairedRatios(perRound[1], perRound[0]), pairedRatios(perRound[2], perRound[0])
	fmt.Fprintf(&t, "per-round throughput ratios, median [min, max]: on/off %s, A/A (off-again/off) %s\n", onOff, aa2)
	b.ReportMetric(onOff.median, "on/off-median-round-ratio")
	b.ReportMetric(aa2.median, "A/A-median-round-ratio")
	fmt.Fprint(os.Stderr, t.String())
}

// freeAddr returns a loopback address free a moment ago.
func freeAddr(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// adminGet returns the body of an agent admin endpoint.
func adminGet(b *testing.B, admin, p string) string {
	resp, err := http.Get("http://" + admin + p)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	return string(body)
}

// metricValue is the value of an unlabelled sample in a Prometheus text
// exposition; 0 if absent.
func metricValue(exposition, name string) float64 {
	for _, l := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}

// ratioSpread is the median, least and greatest of per-round ratios.
type ratioSpread struct{ median, min, max float64 }

func (r ratioSpread) String() string {
	return fmt.Sprintf("%.3f [%.3f, %.3f]", r.median, r.min, r.max)
}

// pairedRatios is a[i]/b[i] over the rounds.
func pairedRatios(a, b []float64) ratioSpread {
	rs := make([]float64, len(a))
	for i := range a {
		rs[i] = a[i] / b[i]
	}
	slices.Sort(rs)
	m := rs[len(rs)/2]
	if len(rs)%2 == 0 {
		m = (rs[len(rs)/2-1] + rs[len(rs)/2]) / 2
	}
	return ratioSpread{median: m, min: rs[0], max: rs[len(rs)-1]}
}
