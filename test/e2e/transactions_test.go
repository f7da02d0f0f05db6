package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/agent"
	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/controlplane/txngate"
	"github.com/baton-kafka/baton/internal/testlog"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
	"github.com/baton-kafka/baton/test/clients"
	"github.com/baton-kafka/baton/xds"
)

// TestTransactionalProducerRealKafka: Apache Kafka's Java transactional
// producer through the agent, across a cutover (docs/design.md §9,
// "Transactional producers"). S and D are Apache Kafka (one broker each);
// the control plane runs in process (memory store, replicator, the
// source's transactions read as baton controlplane reads them); one agent.
//
//   - PROXY: the producer (transactions of 10 records, every 4th aborted on
//     purpose) writes through the agent: every committed transaction's
//     records are acked, the aborted ones failed, nothing else.
//   - While it writes, migrate is refused by the transactional-producer
//     gate, naming its transactional id; once it stopped, still (it wrote
//     within the gate window); forced past the gate, the topic goes
//     COMPLETE.
//   - COMPLETE: the same producer, restarted through the agent, has every
//     record refused TOPIC_AUTHORIZATION_FAILED, said once at WARN by the
//     agent for its transactional id.
//   - D, read read_committed (and as it is: D holds no transaction),
//     holds exactly the committed records, in the order S holds them per
//     partition: nothing committed lost, nothing aborted or refused, no
//     partial transaction.
func TestTransactionalProducerRealKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Apache Kafka")
	}
	t.Parallel()
	srcStarted, dstStarted := startKafkaAsync(t, 1), startKafkaAsync(t, 1)
	src, dst := srcStarted(t), dstStarted(t)
	ctx, cancel := context.WithTimeout(t.Context(), caseTimeout)
	defer cancel()
	topic := fmt.Sprintf("e2e-txn-%d-%d", os.Getpid(), topicSeq.Add(1))
	if err := clients.CreateTopic(ctx, src.Bootstrap(), topic, 2, 1); err != nil {
		t.Fatal(err)
	}

	var cpLog, agentLog testlog.Buffer
	log := slog.New(slog.NewTextHandler(&cpLog, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("control plane and replicator log, last lines:\n%s", lastLines(cpLog.String(), 60))
			t.Logf("agent log, last lines:\n%s", lastLines(agentLog.String(), 40))
		}
	})
	r, err := replicator.New(replicator.Source(src.Addrs()...), replicator.Destination(dst.Addrs()...), replicator.Logger(log))
	if err != nil {
		t.Fatal(err)
	}
	srcAdm := kadm.NewClient(newClient(t, src.Bootstrap()))
	cp, err := controlplane.New(ctx, controlplane.WithStore(controlplane.NewMemStore()), controlplane.Logger(log),
		controlplane.WithReplication(&replication.ReplicatorAdapter{R: r, Source: srcAdm}),
		controlplane.WithTransactions(&txngate.Source{Admin: srcAdm}),
		// Room on a loaded machine: the gate wants lag <= timeout/4.
		controlplane.CutoverTimeout(30*time.Second),
		controlplane.Clusters(&batonv1.Cluster{Name: "source", Bootstrap: src.Addrs()},
			&batonv1.Cluster{Name: "destination", Bootstrap: dst.Addrs()}))
	if err != nil {
		t.Fatal(err)
	}
	conn := serveInProcess(t, cp, r)
	const node = "txn-agent"
	a := runAgent(t, ctx, node, agent.Source(src.Addrs()...), agent.Destination(dst.Addrs()...),
		agent.ControlPlane(conn, xds.NodeMeta(node, "e2e", "txn")),
		agent.Logger(slog.New(slog.NewTextHandler(&agentLog, &slog.HandlerOptions{Level: slog.LevelInfo}))))
	if _, err := cp.AddTopic(ctx, controlplane.TopicSpec{Name: topic, State: migration.Proxy}, "e2e"); err != nil {
		t.Fatal(err)
	}
	wait.For(t, time.Minute, "the agent to hold a lease at the current config version", func() string {
		v := cp.Version()
		for _, ag := range cp.Agents() {
			if ag.Node == node && ag.LeaseValid && ag.AckedVersion >= v {
				return ""
			}
		}
		return fmt.Sprintf("agents %+v, version %d", cp.Agents(), v)
	})

	const txnID = "e2e-txn-app"
	java := clients.Java{}
	run := func(prefix string, records, rate int, abortEvery int, onAck func(clients.Ack)) {
		t.Helper()
		cfg := clients.ProduceConfig{Bootstrap: a.Addr(), Topic: topic, Records: records, Rate: rate, KeyPrefix: prefix,
			Transactional: &clients.Transactional{ID: txnID, PerTransaction: 10, AbortEvery: abortEvery}}
		if err := java.Produce(ctx, cfg, onAck); err != nil {
			t.Fatalf("the Java transactional producer (%s): %v", prefix, err)
		}
	}

	// PROXY: the producer writes; migrate is refused while it does.
	var (
		mu        sync.Mutex
		committed = map[string]clients.Ack{}
		aborted   = map[string]bool{}
		failures  []string
	)
	proxyDone := make(chan struct{})
	go func() {
		defer close(proxyDone)
		run("proxy", 300, 40, 4, func(ack clients.Ack) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case ack.Err == "":
				committed[ack.Key] = ack
			case strings.Contains(ack.Err, clients.DriverAborted):
				aborted[ack.Key] = true
			default:
				failures = append(failures, fmt.Sprintf("%s: %s", ack.Key, ack.Err))
			}
		})
	}()
	wait.For(t, time.Minute, "three committed transactions through the agent", func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(committed) < 30 {
			return fmt.Sprintf("%d records committed, failures %v", len(committed), failures)
		}
		return ""
	})
	_, err = cp.Migrate(ctx, topic, "e2e")
	if !errors.Is(err, controlplane.ErrGateRefused) || !strings.Contains(err.Error(), "gate transactional-producer") ||
		!strings.Contains(err.Error(), `transactional id "`+txnID+`"`) {
		t.Fatalf("migrate while the transactional producer writes: %v; want the transactional-producer gate to refuse, naming %s", err, txnID)
	}
	t.Logf("migrate while it writes: %v", err)
	// What the gate reads: S's leaders report the open transaction's first
	// offset (DescribeProducers), as the gate names it.
	wait.For(t, time.Minute, "S to describe the producer's open transaction with its first offset", func() string {
		ws, err := (&txngate.Source{Admin: srcAdm}).Writers(ctx, topic, time.Time{})
		if err != nil {
			return err.Error()
		}
		for _, w := range ws {
			for _, o := range w.Open {
				if w.TransactionalID == txnID && o >= 0 {
					t.Logf("open: %+v", w)
					return ""
				}
			}
		}
		select {
		case <-proxyDone:
			t.Fatalf("the producer ended before S described an open transaction of it with an offset: last %+v", ws)
		default:
		}
		return fmt.Sprintf("%+v", ws)
	})
	select {
	case <-proxyDone:
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if len(failures) > 0 || len(committed) != 230 || len(aborted) != 70 {
		t.Fatalf("in PROXY: %d records committed, %d aborted by the driver, failures %v; want 230 and 70 (30 transactions, every 4th aborted), none failed",
			len(committed), len(aborted), failures)
	}

	// Stopped, it wrote within the window: still refused; forced, COMPLETE.
	_, err = cp.Migrate(ctx, topic, "e2e")
	if !errors.Is(err, controlplane.ErrGateRefused) || !strings.Contains(err.Error(), `transactional id "`+txnID+`"`) ||
		!strings.Contains(err.Error(), "last wrote the topic") {
		t.Fatalf("migrate right after the producer stopped: %v; want the gate to refuse for its recent writes", err)
	}
	t.Logf("migrate after it stopped: %v", err)
	wait.For(t, time.Minute, "a migrate forced past the transactional-producer gate to start", func() string {
		_, err := cp.Migrate(ctx, topic, "e2e", controlplane.GateTransactionalProducer)
		if err != nil && !errors.Is(err, controlplane.ErrGateRefused) {
			t.Fatal(err)
		}
		if err != nil {
			return err.Error()
		}
		return ""
	})
	wait.For(t, time.Minute, topic+" COMPLETE", func() string {
		tp, err := cp.Topic(topic)
		switch {
		case err != nil:
			t.Fatal(err)
		case tp.State == migration.Proxy && tp.Cutover == nil:
			evs, _ := cp.Events(ctx, topic, 0)
			t.Fatalf("the forced cutover rolled back: %+v", evs)
		case tp.State != migration.Complete:
			return tp.State.String()
		}
		return ""
	})
	evs, err := cp.Events(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(evs, func(e controlplane.Event) bool { return e.Kind == controlplane.EventInitiated }); i < 0 ||
		!strings.Contains(evs[i].Reason, "forced past gate transactional-producer") {
		t.Errorf("no initiated event recording the gate forced past: %+v", evs)
	}
	wait.For(t, time.Minute, "the agent to route "+topic+" to the destination", func() string {
		if got := cp.Agents(); len(got) == 0 || got[0].AckedVersion < cp.Version() {
			return fmt.Sprintf("agents %+v, version %d", got, cp.Version())
		}
		return ""
	})

	// COMPLETE: a transactional write through the agent is refused.
	var refused []clients.Ack
	run("complete", 20, 0, 0, func(ack clients.Ack) { refused = append(refused, ack) })
	for _, ack := range refused {
		if !topicDenied.MatchString(ack.Err) {
			t.Errorf("record %s after COMPLETE: %q, want TOPIC_AUTHORIZATION_FAILED", ack.Key, ack.Err)
		}
	}
	t.Logf("after COMPLETE: %s", refused[0].Err)
	warns := 0
	for _, l := range strings.Split(agentLog.String(), "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "transactional_id="+txnID) {
			warns++
			t.Logf("agent: %s", l)
		}
	}
	if warns != 1 {
		t.Errorf("%d agent WARN lines name %s, want one for its two refused transactions:\n%s", warns, txnID, agentLog.String())
	}

	// D, read_committed: exactly the committed records, in S's order.
	dctx, dcancel := context.WithTimeout(ctx, time.Minute)
	defer dcancel()
	onD, err := clients.ReadTopic(dctx, dst.Bootstrap(), topic, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatalf("reading D read_committed (an open transaction there would hold it): %v", err)
	}
	asIs, err := clients.ReadTopic(dctx, dst.Bootstrap(), topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(asIs) != len(onD) {
		t.Errorf("D holds %d records read_uncommitted, %d read_committed: want the same (the replicator writes no transaction)", len(asIs), len(onD))
	}
	want, got := map[int32][]string{}, map[int32][]string{}
	for _, p := range sortedAcks(committed) {
		want[p.Partition] = append(want[p.Partition], p.Key)
	}
	for _, pos := range slices.SortedFunc(func(yield func(clients.Position) bool) {
		for p := range onD {
			if !yield(p) {
				return
			}
		}
	}, func(a, b clients.Position) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	}) {
		r := onD[pos]
		got[pos.Partition] = append(got[pos.Partition], string(r.Key))
		if string(r.Value) != clients.Value("proxy", seqOf(t, string(r.Key))) {
			t.Errorf("D %d/%d: %s holds %q", pos.Partition, pos.Offset, r.Key, r.Value)
		}
	}
	for p := range int32(2) {
		if !slices.Equal(got[p], want[p]) {
			t.Errorf("D partition %d holds %d records %v\nwant the %d committed, in S's order %v", p, len(got[p]), got[p], len(want[p]), want[p])
		}
	}
	t.Logf("D holds the %d committed records (of 300 sent: %d aborted on purpose, none of the 20 refused), in order", len(onD), len(aborted))
}

// sortedAcks is acks by partition, then the offset S acked.
func sortedAcks(acks map[string]clients.Ack) []clients.Ack {
	out := slices.Collect(func(yield func(clients.Ack) bool) {
		for _, a := range acks {
			if !yield(a) {
				return
			}
		}
	})
	slices.SortFunc(out, func(a, b clients.Ack) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	})
	return out
}

// seqOf is the sequence number in a record's key (prefix-seq).
func seqOf(t *testing.T, key string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscanf(key[strings.LastIndexByte(key, '-')+1:], "%d", &n); err != nil {
		t.Fatalf("key %q: %v", key, err)
	}
	return n
}
