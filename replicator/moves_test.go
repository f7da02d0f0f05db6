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

	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/replicator"
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
	var produced, shuffles atomic.Int64
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
			base := produced.Load()
			for i := range rs {
				n := base + int64(i)
				rs[i] = &kgo.Record{Key: []byte(fmt.Sprint(n % 23)), Value: []byte(fmt.Sprint("v", n))}
			}
			if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
				produceErr = err
				return
			}
			produced.Add(int64(len(rs)))
		}
	}()
	go func() { // leaders move on both clusters
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			s.Kfake().ShufflePartitionLeaders()
			d.Kfake().ShufflePartitionLeaders()
			shuffles.Add(1)
			select {
			case <-tick.C:
			case <-ctx.Done():
			}
		}
	}()

	rn := run(t, s.Addrs(), d.Addrs(), replicator.Topics(topic), replicator.FetchMaxBytes(8<<10),
		replicator.MaxBackoff(200*time.Millisecond))
	defer rn.stop(t)
	// Production and leader moves overlap the copy: enough of both, and
	// some of it copied, before they stop.
	wait.For(t, time.Minute, "records produced, copied and leaders moved meanwhile", func() string {
		var copied int64
		for _, ps := range topicStatus(rn, topic).Partitions {
			copied += ps.DestinationEnd
		}
		if n, m := produced.Load(), shuffles.Load(); n < 5000 || m < 20 || copied < 2000 {
			return fmt.Sprintf("%d produced, %d copied, %d leader shuffles", n, copied, m)
		}
		return ""
	})
	stop()
	wg.Wait()
	if produceErr != nil {
		t.Fatalf("producing to S: %v", produceErr)
	}
	waitCaughtUp(t, rn, s.Addrs(), topic)
	requireParity(t, s.Addrs(), d.Addrs(), topic, replicator.ParityExact, int(produced.Load()))
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

	waitTopicErr(t, rn, topic, replicator.ErrSourceTopicMissing)
	t.Logf("reported: %v", topicStatus(rn, topic).Err)

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
