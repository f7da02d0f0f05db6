// Package kafkaenv starts what the control plane's Kafka-backed tests share:
// a source and a destination cluster on embedded kfake (one broker, two
// partitions each), a replicator copying between them behind the control
// plane's ReplicatorAdapter, and a producer to the source. Test code only.
package kafkaenv

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/replicator"
)

// Env is a running source, destination and replicator; Start's cleanup
// stops them when the test ends.
type Env struct {
	Src, Dst *embedded.Cluster
	Repl     *replication.ReplicatorAdapter
	// Prod produces to Src, creating topics as it goes.
	Prod *kgo.Client
}

// Start starts an Env for t. The replicator samples every 50 ms and backs
// off at most 200 ms, so copies and lag follow within a test's patience.
func Start(t testing.TB, ctx context.Context) *Env {
	t.Helper()
	var cs [2]*embedded.Cluster
	for i := range cs {
		c, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(2))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		cs[i] = c
	}
	src, dst := cs[0], cs[1]
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := replicator.New(replicator.Source(src.Addrs()...), replicator.Destination(dst.Addrs()...),
		replicator.SampleInterval(50*time.Millisecond), replicator.MaxBackoff(200*time.Millisecond), replicator.Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })
	scl, err := kgo.NewClient(kgo.SeedBrokers(src.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(scl.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(src.Addrs()...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	return &Env{Src: src, Dst: dst, Repl: &replication.ReplicatorAdapter{R: r, Source: kadm.NewClient(scl)}, Prod: prod}
}

// Produce writes n records to topic with cl, each acknowledged. It takes
// the client, not an Env: tests that build their source by hand (the
// source-fence tests' authorizing kfake) produce with their own client.
func Produce(t testing.TB, ctx context.Context, cl *kgo.Client, topic string, n int) {
	t.Helper()
	for i := range n {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}
