package replicator_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/replicator"
	"github.com/baton-kafka/baton/test/embedded"
)

// TestLeadersMoveWhileCopying moves every partition leader of S and of D
// over and over while a producer writes S and the replicator copies: the
// copy follows the leaders (NOT_LEADER_OR_FOLLOWER, refreshed metadata)
// and D ends with exactly S's records at S's offsets.
func TestLeadersMoveWhileCopying(t *testing.T) {
	t.Parallel()
	var clusters []*embedded.Cluster
	for range 2 {
		c, err := embedded.Start(embedded.Brokers(3))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		clusters = append(clusters, c)
	}
	s, d := clusters[0], clusters[1]
	const topic = "moves"

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var produced int
	var produceErr error
	wg.Add(2)
	go func() { // the producer
		defer wg.Done()
		cl, err := kgo.NewClient(kgo.SeedBrokers(s.Addrs()...), kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation(),
			kgo.ProducerBatchCompression(kgo.SnappyCompression()))
		if err != nil {
			produceErr = err
			return
		}
		defer cl.Close()
		for ctx.Err() == nil {
			rs := make([]*kgo.Record, 50)
			for i := range rs {
				rs[i] = &kgo.Record{Key: []byte(fmt.Sprint(produced % 23)), Value: []byte(fmt.Sprint("v", produced))}
				produced++
			}
			if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
				produceErr = err
				return
			}
		}
	}()
	go func() { // leaders move on both clusters
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			s.Kfake().ShufflePartitionLeaders()
			d.Kfake().ShufflePartitionLeaders()
			select {
			case <-tick.C:
			case <-ctx.Done():
			}
		}
	}()

	rn := run(t, s.Addrs(), d.Addrs(), replicator.Topics(topic), replicator.FetchMaxBytes(8<<10),
		replicator.MaxBackoff(200*time.Millisecond))
	defer rn.stop(t)
	time.Sleep(3 * time.Second) // production and leader moves overlap the copy
	stop()
	wg.Wait()
	if produceErr != nil {
		t.Fatalf("producing to S: %v", produceErr)
	}
	if produced == 0 {
		t.Fatal("nothing was produced")
	}
	waitCaughtUp(t, rn, s.Addrs(), topic)
	requireParity(t, s.Addrs(), d.Addrs(), topic, replicator.ParityExact, produced)
}

// TestSourceTopicDeleted: a managed topic deleted on S is reported with
// ErrSourceTopicMissing, and D's copy is left as it was.
func TestSourceTopicDeleted(t *testing.T) {
	t.Parallel()
	src, dst := startPair(t)
	const topic = "deleted-on-source"
	produceMatrix(t, src, topic, 1000)
	rn := run(t, src, dst, replicator.Topics(topic), replicator.MaxBackoff(200*time.Millisecond))
	defer rn.stop(t)
	waitCaughtUp(t, rn, src, topic)

	dcl, err := kgo.NewClient(kgo.SeedBrokers(dst...))
	if err != nil {
		t.Fatal(err)
	}
	defer dcl.Close()
	dadm := kadm.NewClient(dcl)
	before, err := dadm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}

	scl, err := kgo.NewClient(kgo.SeedBrokers(src...))
	if err != nil {
		t.Fatal(err)
	}
	defer scl.Close()
	if _, err := kadm.NewClient(scl).DeleteTopic(context.Background(), topic); err != nil {
		t.Fatal(err)
	}

	deadline := time.Now().Add(time.Minute)
	for {
		var got error
		for _, ts := range rn.r.Status() {
			if ts.Topic == topic {
				got = ts.Err
			}
		}
		if errors.Is(got, replicator.ErrSourceTopicMissing) {
			t.Logf("reported: %v", got)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic deleted on S: status error %v, want ErrSourceTopicMissing", got)
		}
		time.Sleep(50 * time.Millisecond)
	}

	after, err := dadm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := after.Error(); err != nil {
		t.Fatalf("D's copy is gone or unreadable after the source topic was deleted: %v", err)
	}
	before.Each(func(o kadm.ListedOffset) {
		a, ok := after.Lookup(topic, o.Partition)
		if !ok || a.Offset != o.Offset {
			t.Errorf("D %s/%d end offset %d before S deleted the topic, %d after", topic, o.Partition, o.Offset, a.Offset)
		}
	})
}
