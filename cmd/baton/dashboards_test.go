package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/httpapi"
	"github.com/baton-kafka/baton/deploy"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
)

var (
	// metricsLine is the "admin endpoints" log line of `baton agent` and
	// `baton controlplane --admin`.
	metricsLine = regexp.MustCompile(`msg="admin endpoints" metrics=(\S+)`)
	grpcLine    = regexp.MustCompile(`msg="control plane up" grpc=(\S+)`)
)

// logged waits until log has a line re matches and returns its group.
func logged(t *testing.T, what string, p *controlPlaneProc, re *regexp.Regexp) string {
	t.Helper()
	var got string
	wait.For(t, 2*time.Minute, what, func() string {
		select {
		case <-p.exited:
			t.Fatalf("exited:\n%s", p.log)
		default:
		}
		if m := re.FindStringSubmatch(p.log.String()); m != nil {
			got = m[1]
			return ""
		}
		return "not yet; log:\n" + p.log.String()
	})
	return got
}

// scrape reads a /metrics page.
func scrape(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// exported scrapes urls and returns the series names they expose.
func exported(t *testing.T, urls ...string) map[string]bool {
	t.Helper()
	var bodies [][]byte
	for _, u := range urls {
		b, err := scrape(u)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	fams, err := deploy.ParseScrapes(bodies...)
	if err != nil {
		t.Fatal(err)
	}
	return deploy.SeriesNames(fams)
}

// TestDashboardsUseExportedMetrics is the check of the
// dashboard and the alert rules: every metric their expressions read is
// on a running agent's or control plane's /metrics (`baton agent` and
// `baton controlplane --admin`, processes of their own, on kfake
// clusters). Most series appear only once what they count has happened,
// so the test makes each happen for real: traffic through the agent and a
// cutover; a destination that answers produce after 200 ms, latency
// emulation and a producer with one request in flight, for a headroom
// warning; a producer writing a PROXY topic's source directly, and one
// writing the migrated topic's source after COMPLETE, for the forgotten
// producers; a destination topic whose max.message.bytes is below a
// source record, for a replication error. Then it checks every name.
func TestDashboardsUseExportedMetrics(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a control plane and an agent process with embedded etcd and kfake clusters")
	}
	var qs []deploy.Query
	for _, f := range []func() ([]deploy.Query, error){
		func() ([]deploy.Query, error) { return deploy.DashboardQueries(deploy.Dashboard) },
		func() ([]deploy.Query, error) { return deploy.RuleQueries(deploy.Rules) },
	} {
		q, err := f()
		if err != nil {
			t.Fatal(err)
		}
		qs = append(qs, q...)
	}
	used, err := deploy.MetricNames(qs)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	src, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	dst, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dst.Close)
	// A slow destination while slow is set: every produce waits destDelay
	// (the replicator's: nothing else writes the destination before the
	// cutover), which the replicator measures and the control plane pushes
	// as the latency to emulate. A plain sleep holds the cluster's loop,
	// unlike kfake's SleepControl, whose concurrent sleeps -race reports.
	const destDelay = 200 * time.Millisecond
	var slow atomic.Bool
	slow.Store(true)
	kc := dst.Kfake()
	kc.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if slow.Load() {
			time.Sleep(destDelay)
		}
		return nil, nil, false // then answered as usual
	})
	// Uncompressed: the record for large must stay larger than 1 KiB.
	direct, err := kgo.NewClient(kgo.SeedBrokers(src.Addrs()...), kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	dcl, err := kgo.NewClient(kgo.SeedBrokers(dst.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer dcl.Close()
	for _, topic := range []string{"orders", "slow", "large"} {
		if _, err := kadm.NewClient(direct).CreateTopic(ctx, 1, -1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	small := "1024"
	if _, err := kadm.NewClient(dcl).CreateTopic(ctx, 1, -1, map[string]*string{"max.message.bytes": &small}, "large"); err != nil {
		t.Fatal(err)
	}

	cp := runControlPlane(t, "--source", src.Bootstrap(), "--destination", dst.Bootstrap(), "--write-guard", "none",
		"--data-dir", filepath.Join(t.TempDir(), "etcd"), "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--bypass-grace", "1s", "--cutover-timeout", "40s")
	cpMetrics := logged(t, "the control plane's admin endpoints", cp, metricsLine)
	grpcAddr := logged(t, "the control plane up", cp, grpcLine)
	api := logged(t, "the control plane's API", cp, upLine)
	cli := func(args ...string) string {
		t.Helper()
		out, err := runCLI(append(args, "--server", api)...)
		if err != nil {
			t.Fatalf("baton %s: %v\n%s", strings.Join(args, " "), err, cp.log)
		}
		return out
	}
	cli("topic", "add", "orders")
	cli("topic", "add", "large")
	cli("topic", "add", "slow", "--latency-emulation", "--headroom")

	listen := freeTCPAddr(t)
	ag := runBaton(t, "agent", "--listen", listen, "--admin", "127.0.0.1:0", "--source", src.Bootstrap(),
		"--destination", dst.Bootstrap(), "--control-plane", grpcAddr, "--node-id", "pod-dash", "--namespace", "shop",
		"--workload", "app", "--byte-counters", "userspace")
	agentMetrics := logged(t, "the agent's admin endpoints", ag, metricsLine)
	wait.For(t, time.Minute, "the agent to apply routes", func() string {
		if !strings.Contains(ag.log.String(), "routes applied") {
			return "not yet; log:\n" + ag.log.String()
		}
		return ""
	})

	// Producers through the agent: a steady one on orders, whose every
	// acked record must reach the destination, and one on slow limited to
	// a request of 16 KiB in flight, writing as fast as that lets it.
	pctx, stopProducers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopProducers(); wg.Wait() }()
	var mu sync.Mutex
	var acked []string
	steady, err := kgo.NewClient(kgo.SeedBrokers(listen), kgo.DefaultProduceTopic("orders"), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer steady.Close()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; pctx.Err() == nil; i++ {
			v := fmt.Sprintf("orders-%d", i)
			if err := steady.ProduceSync(pctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err == nil {
				mu.Lock()
				acked = append(acked, v)
				mu.Unlock()
			}
			select {
			case <-pctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	limited, err := kgo.NewClient(kgo.SeedBrokers(listen), kgo.ClientID("limited-app"), kgo.DefaultProduceTopic("slow"),
		kgo.ProducerLinger(0), kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(1),
		kgo.ProducerBatchMaxBytes(16<<10), kgo.MaxBufferedRecords(64))
	if err != nil {
		t.Fatal(err)
	}
	defer limited.Close()
	lctx, stopLimited := context.WithCancel(pctx)
	defer stopLimited()
	wg.Add(1)
	go func() {
		defer wg.Done()
		value := make([]byte, 1<<10)
		for lctx.Err() == nil {
			limited.Produce(lctx, &kgo.Record{Value: value}, nil) // blocks while the buffer is full
		}
	}()
	// A record larger than the destination's large topic takes.
	if err := direct.ProduceSync(ctx, &kgo.Record{Topic: "large", Value: []byte(strings.Repeat("L", 8<<10))}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// A producer around the agents on slow, until the control plane
	// counts it; meanwhile the headroom warning and the replication error.
	wait.For(t, 3*time.Minute, "a headroom warning, a forgotten producer and a replication error", func() string {
		if err := direct.ProduceSync(ctx, &kgo.Record{Topic: "slow", Value: []byte("around the agents")}).FirstErr(); err != nil {
			return err.Error()
		}
		have := exported(t, agentMetrics, cpMetrics)
		var missing []string
		for _, n := range []string{"baton_agent_headroom_warnings_total", "baton_controlplane_bypass_records_total",
			"baton_replicator_partition_error"} {
			if !have[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			return "not exported yet: " + strings.Join(missing, ", ")
		}
		return ""
	})
	stopLimited()
	// Fast again, so that the copy of orders catches up for its cutover.
	slow.Store(false)

	// The cutover of orders, once its time-lag gate passes.
	wait.For(t, 2*time.Minute, "the migrate of orders to start", func() string {
		_, err := runCLI("topic", "migrate", "orders", "--server", api)
		var ae *httpapi.Error
		if errors.As(err, &ae) && ae.Status == http.StatusConflict && strings.Contains(ae.Message, "gate time-lag") {
			return err.Error()
		}
		if err != nil {
			t.Fatalf("topic migrate orders: %v\n%s", err, cp.log)
		}
		return ""
	})
	wait.For(t, 2*time.Minute, "the cutover of orders to complete", func() string {
		out := cli("events", "--topic", "orders")
		if strings.Contains(out, controlplane.EventRolledBack) {
			t.Fatalf("the cutover rolled back:\n%s", out)
		}
		if !strings.Contains(out, controlplane.EventCompleted) {
			return "events:\n" + out
		}
		return ""
	})
	// A forgotten producer of orders, writing its source after COMPLETE.
	wait.For(t, 2*time.Minute, "records on the source after COMPLETE counted", func() string {
		if err := direct.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("forgotten")}).FirstErr(); err != nil {
			return err.Error()
		}
		if !exported(t, cpMetrics)["baton_controlplane_source_written_after_complete_records_total"] {
			return "not exported yet"
		}
		return ""
	})

	missing := deploy.Missing(used, exported(t, agentMetrics, cpMetrics))
	for _, m := range missing {
		t.Errorf("not on the agent's or the control plane's /metrics: %s", m)
	}
	if len(missing) == 0 {
		t.Logf("%d metric names read by the dashboard and the rules, each on a running agent's or control plane's /metrics", len(used))
	}

	stopProducers()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(acked) == 0 {
		t.Fatal("the steady producer had nothing acked")
	}
	checkOnDestination(t, ctx, dst.Addrs(), acked)
}
