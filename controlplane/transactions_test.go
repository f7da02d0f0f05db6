package controlplane

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/migration"
)

// TestWritersOf: which of a topic's producers the source describes are
// its transactional writers. Real Kafka describes every producer with
// state on a partition (idempotent ones too) with its last write; kfake
// only those in a transaction.
func TestWritersOf(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_000_000_000)
	since := now.Add(-time.Minute)
	recent, old := now.Add(-10*time.Second).UnixMilli(), now.Add(-time.Hour).UnixMilli()
	prod := func(pid int64, p int32, last, txnStart int64) kadm.DescribedProducer {
		return kadm.DescribedProducer{Topic: "t", Partition: p, ProducerID: pid, LastTimestamp: last, CurrentTxnStartOffset: txnStart}
	}
	named := func(pid int64, id, state string) kadm.ListedTransaction {
		return kadm.ListedTransaction{TxnID: id, ProducerID: pid, State: state}
	}
	cases := []struct {
		name      string
		producers []kadm.DescribedProducer
		named     []kadm.ListedTransaction
		txns      []kadm.DescribedTransaction
		since     time.Time
		want      map[int64]string          // producer id: transactional id
		open      map[int64]map[int32]int64 // producer id: its open partitions
	}{
		{name: "open, named", producers: []kadm.DescribedProducer{prod(5, 0, recent, 12), prod(5, 1, recent, 3)},
			named: []kadm.ListedTransaction{named(5, "app", "Ongoing")}, since: since,
			want: map[int64]string{5: "app"}, open: map[int64]map[int32]int64{5: {0: 12, 1: 3}}},
		{name: "open, nobody names it (hanging, or not ours to describe)", producers: []kadm.DescribedProducer{prod(6, 0, old, 40)}, since: since,
			want: map[int64]string{6: ""}, open: map[int64]map[int32]int64{6: {0: 40}}},
		{name: "recent, transactional, none open", producers: []kadm.DescribedProducer{prod(5, 0, recent, -1)},
			named: []kadm.ListedTransaction{named(5, "app", "CompleteCommit")}, since: since, want: map[int64]string{5: "app"}},
		{name: "recent, idempotent", producers: []kadm.DescribedProducer{prod(7, 0, recent, -1)}, since: since},
		{name: "old, transactional, none open", producers: []kadm.DescribedProducer{prod(5, 0, old, -1)},
			named: []kadm.ListedTransaction{named(5, "app", "CompleteCommit")}, since: since},
		{name: "recent, transactional, but open only asked", producers: []kadm.DescribedProducer{prod(5, 0, recent, -1)},
			named: []kadm.ListedTransaction{named(5, "app", "CompleteCommit")}},
		{name: "an ongoing transaction that added a partition, nothing written yet",
			txns: []kadm.DescribedTransaction{{TxnID: "early", ProducerID: 9, State: "Ongoing", Topics: kadm.TopicsSet{"t": {2: {}}}}},
			want: map[int64]string{9: "early"}, open: map[int64]map[int32]int64{9: {2: -1}}},
		{name: "an ongoing transaction of another topic",
			txns: []kadm.DescribedTransaction{{TxnID: "else", ProducerID: 9, State: "Ongoing", Topics: kadm.TopicsSet{"u": {0: {}}}}}},
		{name: "a finished transaction that still lists the topic",
			txns: []kadm.DescribedTransaction{{TxnID: "done", ProducerID: 9, State: "CompleteAbort", Topics: kadm.TopicsSet{"t": {0: {}}}}}},
		{name: "written and added", producers: []kadm.DescribedProducer{prod(5, 0, recent, 12)},
			named: []kadm.ListedTransaction{named(5, "app", "Ongoing")},
			txns:  []kadm.DescribedTransaction{{TxnID: "app", ProducerID: 5, State: "Ongoing", Topics: kadm.TopicsSet{"t": {0: {}, 1: {}}}}},
			since: since, want: map[int64]string{5: "app"}, open: map[int64]map[int32]int64{5: {0: 12, 1: -1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			lt := kadm.ListedTransactions{}
			for _, l := range c.named {
				lt[l.TxnID] = l
			}
			dt := kadm.DescribedTransactions{}
			for _, d := range c.txns {
				dt[d.TxnID] = d
			}
			ws := writersOf("t", c.producers, lt, dt, c.since)
			got := map[int64]string{}
			for _, w := range ws {
				got[w.ProducerID] = w.TransactionalID
				if want := c.open[w.ProducerID]; !maps.Equal(w.Open, want) && (len(w.Open) > 0 || len(want) > 0) {
					t.Errorf("producer %d open %v, want %v", w.ProducerID, w.Open, want)
				}
				if d := w.describe(now); (w.TransactionalID != "" && !strings.Contains(d, fmt.Sprintf("%q", w.TransactionalID))) ||
					!strings.Contains(d, fmt.Sprint(w.ProducerID)) {
					t.Errorf("described as %q: names neither its transactional id nor its producer id", d)
				}
			}
			if !maps.Equal(got, c.want) && (len(got) > 0 || len(c.want) > 0) {
				t.Errorf("writers %v, want %v", got, c.want)
			}
		})
	}
}

// txnEnv is kfake S and D with the replicator, a control plane reading
// S's transactions, topic in PROXY, and a transactional producer of S.
func txnEnv(t *testing.T, ctx context.Context, topic, txnID string, opts ...Opt) (*plane, *kgo.Client) {
	t.Helper()
	k := startKafka(t, ctx)
	k.produce(t, ctx, topic, 4)
	p := startPlane(t, ctx, t.TempDir(), "", k, append([]Opt{WithTransactions(&SourceTransactions{Admin: k.repl.Source})}, opts...)...)
	if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: topic, State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.src.Addrs()...), kgo.TransactionalID(txnID), kgo.TransactionTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return p, cl
}

// openTxn begins a transaction of cl and writes n records of topic in it,
// acked, uncommitted.
func openTxn(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, n int) {
	t.Helper()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: -1, Value: fmt.Appendf(nil, "txn %d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTransactionalProducerGate: while a transactional producer has a
// transaction open on the source topic, migrate is refused by the
// transactional-producer gate naming its transactional id and the
// partition; once it committed, the topic cuts over.
func TestTransactionalProducerGate(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic = "txn-gated"
	p, cl := txnEnv(t, ctx, topic, "app-gated")
	openTxn(t, ctx, cl, topic, 3)
	var err error
	eventually(t, ctx, "the gate to refuse for the open transaction", func() bool {
		_, err = p.cp.Migrate(ctx, topic, "test")
		if err == nil {
			t.Fatalf("migrate started with a transaction open on %s", topic)
		}
		return strings.Contains(err.Error(), "gate "+string(GateTransactionalProducer))
	})
	for _, want := range []string{`transactional id "app-gated"`, "has a transaction open on partition", "from offset",
		"cannot span the clusters", "--force=", string(GateTransactionalProducer)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	t.Logf("refused: %v", err)
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	migrateWhenGateOpens(t, ctx, p, topic)
	waitState(t, ctx, p, topic, migration.Complete)
}

// TestRollbackNamesOpenTransactions: a cutover forced past the gate while
// a transaction is open on the topic cannot copy to the end offsets (the
// replicator reads committed data only) and times out; its timed_out and
// rolled_back events name the open transaction's transactional id.
func TestRollbackNamesOpenTransactions(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic = "txn-rolled-back"
	p, cl := txnEnv(t, ctx, topic, "app-open", CutoverTimeout(3*time.Second))
	openTxn(t, ctx, cl, topic, 3)
	// The time lag grows with the open transaction: forced too.
	eventually(t, ctx, "the forced cutover to start", func() bool {
		_, err := p.cp.Migrate(ctx, topic, "test", GateTransactionalProducer, GateTimeLag)
		if err != nil && !errors.Is(err, ErrGateRefused) {
			t.Fatal(err)
		}
		return err == nil
	})
	// The rollback is decided (the topic PROXY again) before its event is
	// appended: wait for the event.
	var evs []Event
	eventually(t, ctx, "the cutover's rolled_back event", func() bool {
		var err error
		if evs, err = p.cp.Events(ctx, topic, 0); err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(evs, func(e Event) bool { return e.Kind == EventRolledBack })
	})
	if got, _ := p.cp.Topic(topic); got.Attempts != 1 || got.State != migration.Proxy || got.Cutover != nil {
		t.Fatalf("after the rollback the topic is %s (attempt %d, cutover %+v), not PROXY after attempt 1", got.State, got.Attempts, got.Cutover)
	}
	for _, kind := range []string{EventTimedOut, EventRolledBack} {
		i := slices.IndexFunc(evs, func(e Event) bool { return e.Kind == kind })
		if i < 0 {
			t.Fatalf("no %s event: %v", kind, eventLines(t, ctx, p, topic))
		}
		for _, want := range []string{"waiting for replication to reach the source end offsets", `transactional id "app-open"`,
			"open transactions on the source topic hold the copy"} {
			if !strings.Contains(evs[i].Reason, want) {
				t.Errorf("%s reason %q does not say %q", kind, evs[i].Reason, want)
			}
		}
		t.Logf("%s: %s", kind, evs[i].Reason)
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
}
