package controlplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/controlplane/txngate"
	"github.com/baton-kafka/baton/migration"
)

// txnEnv is kfake S and D with the replicator, a control plane reading
// S's transactions, topic in PROXY, and a transactional producer of S.
func txnEnv(t *testing.T, ctx context.Context, topic, txnID string, opts ...Opt) (*plane, *kgo.Client) {
	t.Helper()
	k := startKafka(t, ctx)
	k.produce(t, ctx, topic, 4)
	p := startPlane(t, ctx, t.TempDir(), "", k, append([]Opt{WithTransactions(&txngate.Source{Admin: k.repl.Source})}, opts...)...)
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
