package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sys/unix"

	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/testcert"
)

// pacedClients is how many producer clients share a paced rate: each
// produces to a partition of its own, so that every produce request holds
// one batch of one record (see pacedClient) and arrivals at the agent are
// spread over a few connections, as from a few producers in one pod.
const pacedClients = 4

// envPacedFor overrides how long each paced run lasts (a Go duration);
// the default is 5 s.
const envPacedFor = "BATON_BENCH_PACED_FOR"

// BenchmarkAgentPaced: the agent's per-request cost at a fixed rate of
// single-record produce requests (linger 0, one record per request,
// acks=all), against a 3-broker kfake that discards record bytes, direct
// and through a `baton agent` process in the same run, plaintext and TLS
// on every hop. It reports the agent's CPU per request and per GB, the
// latency it adds at p50 and p99, and its resident memory idle and at
// 100 MB/s. BATON_BENCH_BASELINE_BIN adds a column for an agent built
// from another commit (test/bench/compare.sh).
func BenchmarkAgentPaced(b *testing.B) {
	if b.N > 1 {
		b.Skip("runs a fixed workload once; use -benchtime 1x")
	}
	cases := []struct {
		name  string
		size  int
		mbps  float64
		isRSS bool // the run whose resident memory is reported
	}{
		{"1KiB-20MBps", 1 << 10, 20, false},
		{"16KiB-20MBps", 16 << 10, 20, false},
		{"16KiB-100MBps", 16 << 10, 100, true},
	}
	for _, mode := range []string{"plaintext", "tls"} {
		b.Run(mode, func(b *testing.B) {
			bootstrap, sec, stop := pacedCluster(b, mode == "tls")
			defer stop()
			paths, idle := pacedPaths(b, bootstrap, sec)
			createTopic(b, bootstrap, "paced", 1, sec.client...) // partitions 0..pacedClients-1 are used
			for _, c := range cases {
				if c.isRSS && mode == "tls" {
					continue // memory is reported once, plaintext
				}
				b.Run(c.name, func(b *testing.B) {
					pacedCase(b, mode, paths, idle, c.size, c.mbps, c.isRSS)
				})
			}
		})
	}
}

// pacedCluster starts the blackholed kfake, with TLS when secure, and
// says how clients and agents reach it.
func pacedCluster(b *testing.B, secure bool) (string, secured, func()) {
	opts := []kfake.Opt{kfake.BlackholeProduce()}
	var s secured
	if secure {
		ca := testcert.New(b)
		caFile, certFile, keyFile := ca.WriteFiles(b, b.TempDir(), "server", ca.Server)
		opts = append(opts, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{ca.Server}, MinVersion: tls.VersionTLS12}))
		s = secured{
			client: []kgo.Opt{kgo.DialTLSConfig(&tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12})},
			agentArgs: []string{"--listen-tls-cert", certFile, "--listen-tls-key", keyFile,
				"--source-tls-ca", caFile, "--destination-tls-ca", caFile},
		}
	}
	cluster, err := embedded.Start(embedded.Partitions(partitions), embedded.KfakeOpts(opts...))
	if err != nil {
		b.Fatal(err)
	}
	return cluster.Bootstrap(), s, cluster.Close
}

// pacedPath is one way to the cluster and what a paced case measured on
// it, summed over rounds.
type pacedPath struct {
	path
	requests int64
	bytes    int64
	elapsed  time.Duration
	cpu      time.Duration
	lat      []time.Duration
	rssMax   int64
}

// pacedPaths starts this tree's agent (and the baseline's, if set) in
// front of bootstrap, and reads each agent's resident memory once it
// listens: idle after start.
func pacedPaths(b *testing.B, bootstrap string, s secured) ([]*pacedPath, map[string]int64) {
	paths := []*pacedPath{{path: path{name: "direct", addr: bootstrap, opts: s.client}}}
	idle := map[string]int64{}
	bins := [][2]string{{"agent", buildBaton(b)}}
	if bin := os.Getenv(envBaselineBin); bin != "" {
		label := os.Getenv(envBaselineName)
		if label == "" {
			label = "baseline"
		}
		bins = append(bins, [2]string{label, bin})
	}
	for _, bin := range bins {
		addr, pid, stop := startAgentProcess(b, bin[1], bootstrap, s.agentArgs...)
		b.Cleanup(stop)
		time.Sleep(500 * time.Millisecond) // let start-up garbage settle
		idle[bin[0]] = processRSS(b, pid)
		paths = append(paths, &pacedPath{path: path{name: bin[0], addr: addr, opts: s.client, pid: pid}})
	}
	return paths, idle
}

// pacedCase runs size-byte records at mbps on every path, interleaved
// over two rounds (the agents swap places in the second), and reports.
func pacedCase(b *testing.B, mode string, paths []*pacedPath, idle map[string]int64, size int, mbps float64, rss bool) {
	runFor := 5 * time.Second
	if v := os.Getenv(envPacedFor); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("%s: %v", envPacedFor, err)
		}
		runFor = d
	}
	for _, p := range paths {
		p.requests, p.bytes, p.elapsed, p.cpu, p.lat, p.rssMax = 0, 0, 0, 0, nil, 0
		pacedRun(b, p, size, mbps, time.Second, false) // warm up; not counted
		p.requests, p.bytes, p.elapsed, p.cpu, p.lat, p.rssMax = 0, 0, 0, 0, nil, 0
	}
	const rounds = 2
	for round := range rounds {
		o := slices.Clone(paths)
		if round%2 == 1 {
			slices.Reverse(o[1:])
		}
		for _, p := range o {
			pacedRun(b, p, size, mbps, runFor, rss)
		}
	}
	direct := paths[0]
	slices.Sort(direct.lat)
	for _, p := range paths[1:] {
		slices.Sort(p.lat)
	}
	agent := paths[1]
	b.ReportMetric(agent.achievedMBps(), "agent-MB/s")
	b.ReportMetric(agent.usPerRequest(), "agent-us-cpu/req")
	b.ReportMetric(agent.cpuPerGB(), "agent-cpu-s/GB")
	b.ReportMetric(ms(pct(agent.lat, 50)-pct(direct.lat, 50)), "p50-added-ms")
	b.ReportMetric(ms(pct(agent.lat, 99)-pct(direct.lat, 99)), "p99-added-ms")
	if rss {
		b.ReportMetric(float64(idle["agent"])/(1<<20), "agent-rss-idle-MiB")
		b.ReportMetric(float64(agent.rssMax)/(1<<20), "agent-rss-MiB")
	}
	if len(paths) > 2 {
		base := paths[2]
		b.ReportMetric(base.usPerRequest(), "baseline-us-cpu/req")
		b.ReportMetric(ms(pct(base.lat, 99)-pct(direct.lat, 99)), "baseline-p99-added-ms")
	}
	pacedTable(mode, paths, idle, size, mbps, runFor, rounds, rss)
}

func (p *pacedPath) achievedMBps() float64 { return float64(p.bytes) / p.elapsed.Seconds() / 1e6 }
func (p *pacedPath) usPerRequest() float64 {
	return float64(p.cpu.Microseconds()) / float64(max(p.requests, 1))
}
func (p *pacedPath) cpuPerGB() float64 { return p.cpu.Seconds() / (float64(max(p.bytes, 1)) / 1e9) }

func pacedTable(mode string, paths []*pacedPath, idle map[string]int64, size int, mbps float64, runFor time.Duration, rounds int, rss bool) {
	direct := paths[0]
	var t strings.Builder
	fmt.Fprintf(&t, "\npaced, kfake blackholed, %s: %d B records at %.0f MB/s, one record per produce request, acks=all, %d clients, %d interleaved %s runs, GOMAXPROCS=%d\n",
		mode, size, mbps, pacedClients, rounds, runFor, runtime.GOMAXPROCS(0))
	fmt.Fprintf(&t, "%-22s", "")
	for _, p := range paths {
		fmt.Fprintf(&t, "%14s", p.name)
	}
	row := func(label string, f func(p *pacedPath) string) {
		fmt.Fprintf(&t, "\n%-22s", label)
		for _, p := range paths {
			fmt.Fprintf(&t, "%14s", f(p))
		}
	}
	agentOnly := func(f func(p *pacedPath) string) func(p *pacedPath) string {
		return func(p *pacedPath) string {
			if p.pid == 0 {
				return ""
			}
			return f(p)
		}
	}
	row("achieved MB/s", func(p *pacedPath) string { return fmt.Sprintf("%.1f", p.achievedMBps()) })
	row("requests/s", func(p *pacedPath) string {
		return fmt.Sprintf("%.0f", float64(p.requests)/p.elapsed.Seconds())
	})
	row("p50 ms", func(p *pacedPath) string { return fmt.Sprintf("%.3f", ms(pct(p.lat, 50))) })
	row("p99 ms", func(p *pacedPath) string { return fmt.Sprintf("%.3f", ms(pct(p.lat, 99))) })
	row("  p50 added ms", agentOnly(func(p *pacedPath) string {
		return fmt.Sprintf("%+.3f", ms(pct(p.lat, 50)-pct(direct.lat, 50)))
	}))
	row("  p99 added ms", agentOnly(func(p *pacedPath) string {
		return fmt.Sprintf("%+.3f", ms(pct(p.lat, 99)-pct(direct.lat, 99)))
	}))
	row("agent µs CPU/request", agentOnly(func(p *pacedPath) string { return fmt.Sprintf("%.2f", p.usPerRequest()) }))
	row("agent CPU s/GB", agentOnly(func(p *pacedPath) string { return fmt.Sprintf("%.3f", p.cpuPerGB()) }))
	if rss {
		row("agent RSS idle MiB", agentOnly(func(p *pacedPath) string { return fmt.Sprintf("%.1f", float64(idle[p.name])/(1<<20)) }))
		row("agent RSS max MiB", agentOnly(func(p *pacedPath) string { return fmt.Sprintf("%.1f", float64(p.rssMax)/(1<<20)) }))
	}
	fmt.Fprintln(os.Stderr, t.String())
}

// pacedRun produces size-byte records at mbps for d on p, one record per
// request, and adds what it measured to p (unless warm-up).
func pacedRun(b *testing.B, p *pacedPath, size int, mbps float64, d time.Duration, sampleRSS bool) {
	clients := make([]*kgo.Client, pacedClients)
	for i := range clients {
		clients[i] = pacedClient(b, p.addr, size, p.opts)
		defer clients[i].Close()
	}
	value := make([]byte, size)
	var mu sync.Mutex
	lats := make([]time.Duration, 0, int(mbps*1e6/float64(size)*d.Seconds())+16)
	var acked, failed atomic.Int64
	stopRSS := make(chan struct{})
	rssDone := make(chan struct{})
	go func() {
		defer close(rssDone)
		if !sampleRSS || p.pid == 0 {
			return
		}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopRSS:
				return
			case <-tick.C:
				if n, err := readRSS(p.pid); err == nil {
					p.rssMax = max(p.rssMax, n)
				}
			}
		}
	}()
	var cpu0 time.Duration
	if p.pid != 0 {
		cpu0 = processCPU(b, p.pid)
	}
	interval := time.Duration(float64(time.Second) * float64(size) / (mbps * 1e6))
	start := time.Now()
	pace(b, interval, d, func(i int) {
		at := time.Now()
		c := i % pacedClients
		clients[c].Produce(context.Background(), &kgo.Record{Value: value, Partition: int32(c)}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Add(1)
				return
			}
			lat := time.Since(at)
			acked.Add(1)
			mu.Lock()
			lats = append(lats, lat)
			mu.Unlock()
		})
	})
	for _, cl := range clients {
		cl.Flush(context.Background())
	}
	elapsed := time.Since(start)
	var cpu time.Duration
	if p.pid != 0 {
		cpu = processCPU(b, p.pid) - cpu0
	}
	close(stopRSS)
	<-rssDone
	if n := failed.Load(); n > 0 || acked.Load() == 0 {
		b.Fatalf("%d of %d records to %s failed", n, n+acked.Load(), p.name)
	}
	p.requests += acked.Load()
	p.bytes += acked.Load() * int64(size)
	p.elapsed += elapsed
	p.cpu += cpu
	p.lat = append(p.lat, lats...)
}

// pacedClient produces with no linger and batches of at most one record
// to the partition each record names: every produce request carries one
// record.
func pacedClient(b *testing.B, addr string, size int, opts []kgo.Opt) *kgo.Client {
	return client(b, addr, append(slices.Clone(opts),
		kgo.DefaultProduceTopic("paced"),
		kgo.ProducerLinger(0),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		// A batch header is 61 bytes and a record's overhead a few more:
		// one record fits, two do not.
		kgo.ProducerBatchMaxBytes(int32(size+256)),
	)...)
}

// pace calls f(i) for i = 0, 1, ... every interval for d, from a thread of
// its own sleeping on absolute deadlines with a 1 ns timer slack: Go's
// timers wake about once a millisecond on an idle process, which would
// send a rate in millisecond bursts. Late calls are made at once.
func pace(b *testing.B, interval, d time.Duration, f func(i int)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0); err != nil {
			b.Logf("timer slack stays at its default: %v", err)
		}
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			b.Errorf("clock: %v", err)
			return
		}
		t0 := ts.Nano()
		n := int(d / interval)
		for i := range n {
			next := unix.NsecToTimespec(t0 + int64(i)*int64(interval))
			for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &next, nil) == unix.EINTR {
			}
			f(i)
		}
	}()
	<-done
}

// processRSS is readRSS, failing b on an error.
func processRSS(b *testing.B, pid int) int64 {
	n, err := readRSS(pid)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// readRSS reads the resident set size (VmRSS) of pid in bytes.
func readRSS(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS of %d: %q", pid, line)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS for %d", pid)
}
