package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/test/clients"
	"github.com/baton-kafka/baton/test/kafka"
)

// Restart-stall workload: each producer paced at stallRate for stallRun,
// broker kills stallKillAt and stallKillAt+stallRound into it, each broker
// down for stallDown.
const (
	stallRate   = 200 // records/s per producer
	stallRun    = 75 * time.Second
	stallKillAt = 10 * time.Second
	stallRound  = 30 * time.Second
	stallDown   = 10 * time.Second
)

// BenchmarkBrokerRestartStall: the same idempotent producers (franz-go and
// the Java producer, acks=all) write one topic of a 3-broker Apache Kafka
// cluster (RF 3, 6 partitions) at once, one of each directly and one of
// each through a `baton agent` process with the topic in PROXY. Twice in
// the run, the broker leading most partitions is SIGKILLed and started
// again 10 s later. Each producer's longest gap between two acks is its
// stall; the agent's is reported as a ratio to the direct one of the same
// client, under the same faults in the same run. Every acked record is
// read back at its acked offset; any failed record fails the benchmark.
func BenchmarkBrokerRestartStall(b *testing.B) {
	if b.N > 1 {
		b.Skip("runs a fixed workload once; use -benchtime 1x")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const topic = "restart-stall"
	c, adm, agentAddr := stallCluster(b, ctx, topic)
	runs := startStallRuns(b, ctx, c.Bootstrap(), agentAddr, topic, int(stallRun.Seconds())*stallRate)
	start := time.Now()
	var killed []int
	for round := range 2 {
		time.Sleep(time.Until(start.Add(stallKillAt + time.Duration(round)*stallRound)))
		victim := mostLeaders(b, ctx, adm, topic, killed)
		if err := c.StopNode(victim, 0); err != nil {
			b.Fatalf("SIGKILL broker %d: %v", victim, err)
		}
		at := time.Since(start)
		time.Sleep(stallDown)
		if err := c.RestartNode(ctx, victim); err != nil {
			b.Fatalf("restarting broker %d: %v", victim, err)
		}
		b.Logf("round %d: broker %d SIGKILLed at +%.1fs, back at +%.1fs", round+1, victim, at.Seconds(), time.Since(start).Seconds())
		killed = append(killed, victim)
	}
	reportStalls(b, ctx, c.Bootstrap(), topic, runs,
		fmt.Sprintf("broker SIGKILL and restart, twice, %d records/s per producer", stallRate))
}

// mostLeaders returns the live broker leading most partitions of topic,
// not one of skip when another leads any.
func mostLeaders(b *testing.B, ctx context.Context, adm *kadm.Client, topic string, skip []int) int {
	b.Helper()
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		b.Fatal(err)
	}
	count := map[int]int{}
	for _, p := range td[topic].Partitions {
		if p.Leader >= 0 {
			count[int(p.Leader)]++
		}
	}
	ids := make([]int, 0, len(count))
	for id := range count {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		return count[ids[i]] > count[ids[j]] || count[ids[i]] == count[ids[j]] && ids[i] < ids[j]
	})
	for _, id := range ids {
		if !slices.Contains(skip, id) {
			return id
		}
	}
	if len(ids) == 0 {
		b.Fatalf("no leader for any partition of %s", topic)
	}
	return ids[0]
}

// stallCluster starts the stall benchmarks' cluster: 3 Apache Kafka
// brokers with topic (RF 3, min.insync.replicas 2), and a `baton agent`
// process in front of them with topic in PROXY. Both end with b.
func stallCluster(b *testing.B, ctx context.Context, topic string) (*kafka.Cluster, *kadm.Client, string) {
	b.Helper()
	c := kafka.StartT(b, kafka.Brokers(3))
	createTopic(b, c.Bootstrap(), topic, 3)
	adm := kadm.NewClient(client(b, c.Bootstrap(), kgo.MetadataMinAge(10*time.Millisecond)))
	b.Cleanup(adm.Close)
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "min.insync.replicas", Value: ptr("2")}}, topic); err != nil {
		b.Fatal(err)
	}
	routes := filepath.Join(b.TempDir(), "routes.yaml")
	if err := os.WriteFile(routes, []byte("routes:\n  - topic: "+topic+"\n    state: PROXY\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	agentAddr, _, stopAgent := startAgentProcess(b, buildBaton(b), c.Bootstrap(), "--routes", routes)
	b.Cleanup(stopAgent)
	return c, adm, agentAddr
}

// stallProducer is one producer of a stall benchmark: a client, directly or
// through the agent, and what it was told.
type stallProducer struct {
	name, via string
	p         clients.Producer
	cfg       clients.ProduceConfig
	done      chan struct{}
	mu        sync.Mutex
	acks      []clients.Ack
	err       error
}

// startStallRuns starts the stall benchmarks' four idempotent producers,
// franz-go and the Java producer, one of each to direct and one of each to
// agent, each writing records to topic at stallRate, and returns once every
// one has acked a record: a JVM's start is not counted in its stall.
func startStallRuns(b *testing.B, ctx context.Context, direct, agent, topic string, records int) []*stallProducer {
	b.Helper()
	var runs []*stallProducer
	for _, p := range []clients.Producer{clients.Franz{}, clients.Java{}} {
		for _, via := range []struct{ name, addr string }{{"direct", direct}, {"agent", agent}} {
			r := &stallProducer{name: p.Name(), via: via.name, p: p, done: make(chan struct{}), cfg: clients.ProduceConfig{
				Bootstrap: via.addr, Topic: topic, Records: records, Rate: stallRate,
				Idempotent: true, KeyPrefix: "stall-" + p.Name() + "-" + via.name,
			}}
			runs = append(runs, r)
			go func() {
				defer close(r.done)
				r.err = r.p.Produce(ctx, r.cfg, func(a clients.Ack) { r.mu.Lock(); r.acks = append(r.acks, a); r.mu.Unlock() })
			}()
		}
	}
	acked := func() bool {
		for _, r := range runs {
			r.mu.Lock()
			n := len(r.acks)
			r.mu.Unlock()
			if n == 0 {
				return false
			}
		}
		return true
	}
	wait.For(b, 5*time.Minute, "every producer's first ack", func() string {
		if !acked() {
			return "a producer has acked nothing yet"
		}
		return ""
	})
	return runs
}

// stallsRunning reports whether any of runs is still producing.
func stallsRunning(runs []*stallProducer) bool {
	for _, r := range runs {
		select {
		case <-r.done:
		default:
			return true
		}
	}
	return false
}

// reportStalls waits for runs to end, checks that every record was acked
// and is where its ack says, once (clients.Verify, on bootstrap), and
// reports each producer's longest gap between two acks and the agent's
// ratio to the direct one of the same client, under what.
func reportStalls(b *testing.B, ctx context.Context, bootstrap, topic string, runs []*stallProducer, what string) {
	b.Helper()
	for _, r := range runs {
		<-r.done
	}
	gap := map[string]time.Duration{}
	var table strings.Builder
	fmt.Fprintf(&table, "%-6s %-7s %7s %7s %10s  %15s  %s\n", "client", "via", "acked", "failed", "longest gap",
		"one partition's", "the gap ended")
	for _, r := range runs {
		if r.err != nil {
			b.Errorf("%s %s: %v", r.name, r.via, r.err)
		}
		var ok []clients.Ack
		failed := 0
		for _, a := range r.acks {
			if a.Err != "" {
				failed++
				continue
			}
			ok = append(ok, a)
		}
		if failed > 0 || len(ok) != r.cfg.Records {
			b.Errorf("%s %s: %d of %d records acked, %d failed", r.name, r.via, len(ok), r.cfg.Records, failed)
		}
		if err := clients.Verify(ctx, bootstrap, topic, r.acks, r.cfg); err != nil {
			b.Errorf("%s %s: %v", r.name, r.via, err)
		}
		g, end := longestAckGap(ok)
		gap[r.name+"/"+r.via] = g
		pg, pp := longestPartitionGap(ok)
		fmt.Fprintf(&table, "%-6s %-7s %7d %7d %9.2fs  %9.2fs (p%d)  %s\n", r.name, r.via, len(ok), failed, g.Seconds(),
			pg.Seconds(), pp, end.Format("15:04:05.000"))
		b.ReportMetric(g.Seconds(), r.name+"-"+r.via+"-gap-s")
	}
	for _, name := range []string{"franz", "java"} {
		if d := gap[name+"/direct"]; d > 0 {
			ratio := float64(gap[name+"/agent"]) / float64(d)
			fmt.Fprintf(&table, "%s: agent/direct %.2fx\n", name, ratio)
			b.ReportMetric(ratio, name+"-agent/direct")
		}
	}
	b.Logf("%s:\n%s", what, table.String())
}

// longestAckGap is the longest time between two successive acks, and
// when it ended.
func longestAckGap(acks []clients.Ack) (time.Duration, time.Time) {
	at := make([]time.Time, len(acks))
	for i, a := range acks {
		at[i] = a.At
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	var g time.Duration
	var end time.Time
	for i := 1; i < len(at); i++ {
		if d := at[i].Sub(at[i-1]); d > g {
			g, end = d, at[i]
		}
	}
	return g, end
}

// longestPartitionGap is the longest time between two successive acks of
// one partition, and the partition. Beside longestAckGap it tells a stall
// of one partition (its leader's) from one of every partition: the agent
// is one broker to its clients, and a request it answers late holds the
// answers of every partition in it and behind it on the connection.
func longestPartitionGap(acks []clients.Ack) (time.Duration, int32) {
	by := map[int32][]clients.Ack{}
	for _, a := range acks {
		by[a.Partition] = append(by[a.Partition], a)
	}
	var g time.Duration
	var p int32
	for part, as := range by {
		if d, _ := longestAckGap(as); d > g {
			g, p = d, part
		}
	}
	return g, p
}

func ptr[T any](v T) *T { return &v }
