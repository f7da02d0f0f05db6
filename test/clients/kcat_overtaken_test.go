package clients

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/test/kafka"
)

// TestKcatAcksWhenARetryIsOvertaken runs kcat without idempotence (and
// with max.in.flight.requests.per.connection=1) straight against Kafka, no
// agent, while a follower of the partition is stopped: the leader holds
// each acks=all write until the follower has it, so each request times out
// (REQUEST_TIMED_OUT after request.timeout.ms, 1 s here) although it was
// written. librdkafka retries its records, but the next request of the
// partition was built while the failed one was in flight and goes first:
// the retried records are written, and reported, after later ones. The
// driver must map every report to its record all the same: each ack names
// the offset its record sits at (Verify). Mapped by position, as the driver
// once did, the reports of the records that went first were taken for the
// retried ones' (the chaos suite's seed 302, through an agent whose forward
// deadline played the request timeout).
func TestKcatAcksWhenARetryIsOvertaken(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a 3-node Kafka cluster")
	}
	c := kafka.StartT(t, kafka.Brokers(3))
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const topic = "kcat-overtaken"
	if err := CreateTopic(ctx, c.Bootstrap(), topic, 1, 3); err != nil {
		t.Fatal(err)
	}
	pid := followerPID(t, ctx, c, topic)
	cont := func() { _ = syscall.Kill(-pid, syscall.SIGCONT) }
	t.Cleanup(cont)

	k := Kcat{extra: []string{"-X", "request.timeout.ms=1000"}}
	cfg := ProduceConfig{Bootstrap: c.Bootstrap(), Topic: topic, Records: 600, Rate: 100, KeyPrefix: "overtaken"}
	var acks []Ack
	var acked atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- k.Produce(ctx, cfg, func(a Ack) {
			acks = append(acks, a)
			acked.Add(1)
		})
	}()
	// Some records acked first: the producer is connected and producing.
	wait.For(t, time.Minute, "kcat's first acks", func() string {
		if n := acked.Load(); n < 20 {
			return fmt.Sprintf("%d acks", n)
		}
		return ""
	})
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // requests time out meanwhile; not a timing assertion
	cont()
	if err := <-done; err != nil {
		t.Fatalf("kcat: Produce: %v", err)
	}

	// Reports out of send order: this run is the case it covers.
	overtaken, last := 0, -1
	for _, a := range acks {
		if a.Err == "" && a.Seq < last {
			overtaken++
		}
		last = max(last, a.Seq)
	}
	t.Logf("%d of %d acks reported after a record sent later", overtaken, len(acks))
	if err := Verify(ctx, c.Bootstrap(), topic, acks, cfg); err != nil {
		t.Fatal(err)
	}
	if overtaken == 0 {
		t.Fatal("no report came out of send order: the stopped follower did not make librdkafka retry behind a later request, so the run covers nothing")
	}
}

// followerPID returns the process (group) id of a node that follows
// partition 0 of topic.
func followerPID(t *testing.T, ctx context.Context, c *kafka.Cluster, topic string) int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	md, err := kadm.NewClient(cl).Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := md.Topics[topic].Partitions[0]
	if !ok {
		t.Fatalf("no partition 0 of %s in %v", topic, md.Topics)
	}
	for _, r := range p.Replicas {
		if r == p.Leader {
			continue
		}
		for _, nd := range c.Nodes() {
			if int32(nd.ID) == r && nd.PID > 0 {
				return nd.PID
			}
		}
	}
	t.Fatalf("no follower of %s/0 (leader %d, replicas %v) among the nodes", topic, p.Leader, p.Replicas)
	return 0
}
