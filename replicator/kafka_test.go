package replicator_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/replicator"
	"github.com/baton-kafka/baton/test/kafka"
)

// TestParityRealKafka copies the producer matrix (every codec, idempotent
// and not, keys, headers, null values) and a transactional topic from a
// 3-broker Apache Kafka to a 1-broker one. The full acceptance run is
// 200k records: BATON_PARITY_RECORDS=200000 runs that; the default keeps
// CI time down.
func TestParityRealKafka(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts two Apache Kafka clusters")
	}
	n := 20000
	if s := os.Getenv("BATON_PARITY_RECORDS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatalf("BATON_PARITY_RECORDS=%q: %v", s, err)
		}
	}
	s := kafka.StartT(t, kafka.Brokers(3), kafka.Partitions(6))
	d := kafka.StartT(t, kafka.Brokers(1), kafka.Partitions(6))
	src, dst := s.Addrs(), d.Addrs()

	cl, err := kgo.NewClient(kgo.SeedBrokers(src...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, topic := range []string{"matrix", "txn"} {
		if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 6, 3, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	produceMatrix(t, src, "matrix", n)

	ctx := context.Background()
	tx, err := kgo.NewClient(kgo.SeedBrokers(src...), kgo.DefaultProduceTopic("txn"), kgo.TransactionalID("baton-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	committed := 0
	for i := range 12 {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for j := range 50 {
			tx.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprint(j)), Value: []byte(fmt.Sprint(i, "/", j))}, nil)
		}
		if err := tx.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		commit := i%4 != 3
		if commit {
			committed += 50
		}
		if err := tx.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}

	rn := run(t, src, dst, replicator.Topics("matrix", "txn"))
	defer rn.stop(t)
	waitCaughtUp(t, rn, src, "matrix")
	waitCaughtUp(t, rn, src, "txn")
	requireParity(t, src, dst, "matrix", replicator.ParityExact, n)
	requireParity(t, src, dst, "txn", replicator.ParityMapped, committed)
}
