package replicator_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/replicator"
	"github.com/baton-kafka/baton/test/kafka"
)

// TestBrokersGoAwayRealKafka takes brokers away under a live copy on Apache
// Kafka: one of S's three stops (its partitions' leaders move to the
// others) and comes back, then D's only broker is killed (every produce to
// D fails until it is back, and the partitions say so) and comes back. D
// ends with exactly what S acknowledged, at S's offsets.
func TestBrokersGoAwayRealKafka(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts two Apache Kafka clusters")
	}
	began := time.Now()
	s := kafka.StartT(t, kafka.Brokers(3), kafka.Partitions(6))
	d := kafka.StartT(t, kafka.Brokers(1), kafka.Partitions(6))
	src, dst := s.Addrs(), d.Addrs()
	const topic = "away"
	// Liveness bounds only, far above what a step takes on an idle
	// machine: on a loaded 2-core machine a broker restart alone was seen
	// to take 97 s.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	cl, err := kgo.NewClient(kgo.SeedBrokers(src...), kgo.DefaultProduceTopic(topic),
		kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 6, 3, nil, topic); err != nil {
		t.Fatal(err)
	}

	// The producer: idempotent, acks=all, retrying until acknowledged, so
	// every record it counts is on S exactly once.
	produceCtx, stopProducing := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var produced atomic.Int64
	produceErr := make(chan error, 1) // the producer's failure, if any
	wg.Add(1)
	go func() {
		defer wg.Done()
		for produceCtx.Err() == nil {
			rs := make([]*kgo.Record, 100)
			base := produced.Load()
			for i := range rs {
				n := base + int64(i)
				rs[i] = &kgo.Record{Key: []byte(fmt.Sprint(n % 31)), Value: []byte(fmt.Sprint("v", n))}
			}
			if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
				produceErr <- err
				return
			}
			produced.Add(int64(len(rs)))
			// At most about 5,000 records a second: the producer runs
			// through every step's wait, and the verify at the end reads
			// back every record from both clusters (40,000 took 26 s).
			time.Sleep(20 * time.Millisecond)
		}
	}()

	rn := run(t, src, dst, replicator.Topics(topic), replicator.MaxBackoff(500*time.Millisecond),
		replicator.RequestTimeout(5*time.Second)) // bounds one attempt while D is away
	defer func() {
		rn.stop(t)
		t.Logf("replicator stopped at %v", time.Since(began).Round(time.Millisecond))
	}()

	step := func(what string, f func() error) {
		t.Helper()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s at %v (%d records produced so far)", what, time.Since(began).Round(time.Millisecond), produced.Load())
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		wait.For(t, 4*time.Minute, what, func() string {
			if cond() {
				return ""
			}
			return "not yet"
		})
	}
	partitionErr := func() error {
		for _, ts := range rn.r.Status() {
			for _, p := range ts.Partitions {
				if p.Err != nil {
					return fmt.Errorf("%s/%d: %w", ts.Topic, p.Partition, p.Err)
				}
			}
		}
		return nil
	}
	produce := func(n int64) {
		t.Helper()
		target := produced.Load() + n
		waitFor(fmt.Sprintf("%d more records on S", n), func() bool { return produced.Load() >= target || len(produceErr) > 0 })
	}

	srcVictim := s.Nodes()[1].ID
	dstNode := d.Nodes()[0].ID
	produce(3000)
	// S's node shuts down cleanly (its leaders move at once) and comes
	// back; then D's only node is killed.
	step(fmt.Sprintf("stopped source node %d", srcVictim), func() error { return s.StopNode(srcVictim, 10*time.Second) })
	produce(3000)
	step(fmt.Sprintf("restarted source node %d", srcVictim), func() error { return s.RestartNode(ctx, srcVictim) })
	produce(3000)
	step("killed the destination's only node", func() error { return d.StopNode(dstNode, 0) })
	produce(3000)
	// D is gone and S has records to copy: the copy must say so per partition.
	waitFor("a partition error while D is down", func() bool { return partitionErr() != nil })
	t.Logf("reported while D is down: %v", partitionErr())
	step("restarted the destination", func() error { return d.RestartNode(ctx, dstNode) })
	produce(2000)
	stopProducing()
	wg.Wait()
	if len(produceErr) > 0 {
		t.Fatalf("producing to S: %v", <-produceErr)
	}

	t.Logf("producer stopped at %v (%d records)", time.Since(began).Round(time.Millisecond), produced.Load())
	waitCaughtUp(t, rn, src, topic)
	t.Logf("caught up at %v", time.Since(began).Round(time.Millisecond))
	if err := partitionErr(); err != nil {
		t.Errorf("caught up, but a partition still reports an error: %v", err)
	}
	requireParity(t, src, dst, topic, replicator.ParityExact, int(produced.Load()))
	t.Logf("verified at %v", time.Since(began).Round(time.Millisecond))
}

// TestSourceTopicRecreatedRealKafka: a topic deleted on S and created again
// under its name is a different topic (a new id; kfake keeps the id of a
// name, so this needs Apache Kafka). It is not copied onto D's copy
// of the old one (that would splice two topics at the same offsets): the
// status says ErrSourceTopicRecreated and D is left as it was. Once the
// operator deletes D's copy, the new topic is copied with exact parity.
func TestSourceTopicRecreatedRealKafka(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts two Apache Kafka clusters")
	}
	s := kafka.StartT(t, kafka.Brokers(1))
	d := kafka.StartT(t, kafka.Brokers(1))
	src, dst := s.Addrs(), d.Addrs()
	const topic = "recreated-on-source"
	ctx := context.Background()
	sadm, dadm := admin(t, src), admin(t, dst)
	if _, err := sadm.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	produce := func(value string, n int) {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(src...), kgo.DefaultProduceTopic(topic))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		for range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(value)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce("old", 10)
	rn := run(t, src, dst, replicator.Topics(topic), replicator.MaxBackoff(200*time.Millisecond))
	defer rn.stop(t)
	waitCaughtUp(t, rn, src, topic)
	status := func() error { return topicStatus(rn, topic).Err }
	waitErr := func(want error) { t.Helper(); waitTopicErr(t, rn, topic, want) }

	if _, err := sadm.DeleteTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	waitErr(replicator.ErrSourceTopicMissing)
	if _, err := sadm.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	produce("new", 25)
	waitErr(replicator.ErrSourceTopicRecreated)
	t.Logf("reported: %v", status())
	if got := sumOffsets(endOffsets(t, dadm, topic)); got != 10 {
		t.Fatalf("D holds %d records after the re-creation, want the old 10 untouched", got)
	}

	// The operator deletes D's copy: the new topic is copied from its start.
	if _, err := dadm.DeleteTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, rn, src, topic)
	requireParity(t, src, dst, topic, replicator.ParityExact, 25)
}

func sumOffsets(m map[int32]int64) int64 {
	var n int64
	for _, o := range m {
		n += o
	}
	return n
}
