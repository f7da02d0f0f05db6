package replicator_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/replicator"
)

func startPair(t *testing.T) (src, dst []string) {
	t.Helper()
	s, err := embedded.Start(embedded.Brokers(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	d, err := embedded.Start(embedded.Brokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return s.Addrs(), d.Addrs()
}

var codecs = []struct {
	name  string
	codec kgo.CompressionCodec
}{
	{"none", kgo.NoCompression()}, {"gzip", kgo.GzipCompression()}, {"snappy", kgo.SnappyCompression()},
	{"lz4", kgo.Lz4Compression()}, {"zstd", kgo.ZstdCompression()},
}

// produceMatrix writes n records to topic: every codec, idempotent and
// not, keyed and not, with headers, some null values.
func produceMatrix(t testing.TB, seeds []string, topic string, n int) {
	t.Helper()
	ctx := context.Background()
	per := n / (2 * len(codecs))
	for _, c := range codecs {
		for _, idem := range []bool{true, false} {
			opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(c.codec),
				kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(2 * time.Millisecond)}
			if !idem {
				opts = append(opts, kgo.DisableIdempotentWrite())
			}
			cl, err := kgo.NewClient(opts...)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			var firstErr error
			for i := range per {
				r := &kgo.Record{Value: []byte(fmt.Sprintf("%s-%v-%d %s", c.name, idem, i, strings.Repeat("x", i%200)))}
				if i%3 != 0 {
					r.Key = []byte(fmt.Sprintf("k%d", i%50))
				}
				if i%7 == 0 {
					r.Value = nil
				}
				if i%2 == 0 {
					r.Headers = []kgo.RecordHeader{{Key: "h", Value: []byte(c.name)}, {Key: "i", Value: []byte(fmt.Sprint(i))}}
				}
				wg.Add(1)
				cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
					defer wg.Done()
					if err != nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			cl.Close()
			if firstErr != nil {
				t.Fatal(firstErr)
			}
		}
	}
}

type running struct {
	r      *replicator.Replicator
	cancel context.CancelFunc
	done   chan error
}

func run(t testing.TB, src, dst []string, opts ...replicator.Opt) *running {
	t.Helper()
	r, err := replicator.New(append([]replicator.Opt{replicator.Source(src...), replicator.Destination(dst...),
		replicator.SampleInterval(50 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rn := &running{r: r, cancel: cancel, done: make(chan error, 1)}
	go func() { rn.done <- r.Run(ctx) }()
	return rn
}

func (rn *running) stop(t testing.TB) {
	t.Helper()
	rn.cancel()
	if err := <-rn.done; err != nil {
		t.Fatal(err)
	}
}

// waitCaughtUp waits until every partition of topic was copied up to S's
// last stable offset.
func waitCaughtUp(t testing.TB, rn *running, src []string, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(src...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	wait.For(t, 2*time.Minute, topic+" caught up", func() string {
		ends, err := adm.ListCommittedOffsets(context.Background(), topic)
		if err != nil {
			return err.Error()
		}
		ts := topicStatus(rn, topic)
		if !ts.Ready || len(ts.Partitions) == 0 {
			return fmt.Sprintf("not set up: %+v", ts)
		}
		for _, ps := range ts.Partitions {
			if e, ok := ends.Lookup(topic, ps.Partition); !ok || ps.Next < e.Offset {
				return fmt.Sprintf("partition %d at %d of %d", ps.Partition, ps.Next, e.Offset)
			}
		}
		return ""
	})
}

// topicStatus is topic's entry in rn's Status (zero if it has none).
func topicStatus(rn *running, topic string) replicator.TopicStatus {
	for _, ts := range rn.r.Status() {
		if ts.Topic == topic {
			return ts
		}
	}
	return replicator.TopicStatus{}
}

// waitTopicErr waits until topic's status error is want.
func waitTopicErr(t testing.TB, rn *running, topic string, want error) {
	t.Helper()
	wait.For(t, time.Minute, fmt.Sprintf("%s reported with %v", topic, want), func() string {
		if err := topicStatus(rn, topic).Err; !errors.Is(err, want) {
			return fmt.Sprintf("status error %v", err)
		}
		return ""
	})
}

func requireParity(t testing.TB, src, dst []string, topic string, want replicator.Parity, wantRecords int) {
	t.Helper()
	rep, err := replicator.Verify(context.Background(), src, dst, topic, replicator.DefaultOffsetMapTopic)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range rep.Mismatches {
		t.Errorf("mismatch: %v", m)
	}
	total := 0
	for _, p := range rep.Partitions {
		total += p.Records
		if p.Parity != want {
			t.Errorf("partition %d parity %s, want %s", p.Partition, p.Parity, want)
		}
	}
	if wantRecords >= 0 && total != wantRecords {
		t.Errorf("verified %d source records, want %d", total, wantRecords)
	}
	t.Logf("verify %s: %d source records on %d partitions, parity wanted %s, %d mismatches",
		topic, total, len(rep.Partitions), want, len(rep.Mismatches))
}

func TestCopyMatrixExactParity(t *testing.T) {
	t.Parallel()
	src, dst := startPair(t)
	const n = 20000
	produceMatrix(t, src, "matrix", n)
	rn := run(t, src, dst, replicator.Topics("matrix"))
	defer rn.stop(t)
	waitCaughtUp(t, rn, src, "matrix")
	requireParity(t, src, dst, "matrix", replicator.ParityExact, n)
	st := rn.r.Status()[0]
	for _, p := range st.Partitions {
		if p.Parity != replicator.ParityExact || p.Err != nil || p.Lag != 0 {
			t.Errorf("partition status %+v", p)
		}
	}
}

func TestTransactionalSourceIsMapped(t *testing.T) {
	t.Parallel()
	src, dst := startPair(t)
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(src...), kgo.DefaultProduceTopic("txn"), kgo.TransactionalID("tx-1"),
		kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	committed := 0
	for txn := range 10 {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			r := &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("txn %d rec %d", txn, i))}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		commit := txn%3 != 1
		if commit {
			committed += 20
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	plain, err := kgo.NewClient(kgo.SeedBrokers(src...), kgo.DefaultProduceTopic("txn"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for i := range 30 {
		if err := plain.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprint("plain ", i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	committed += 30

	rn := run(t, src, dst, replicator.Topics("txn"))
	waitCaughtUp(t, rn, src, "txn")
	requireParity(t, src, dst, "txn", replicator.ParityMapped, committed)
	rn.stop(t)

	// A restart resumes through the map: nothing is copied twice.
	for i := range 10 {
		if err := plain.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprint("after ", i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	rn = run(t, src, dst, replicator.Topics("txn"))
	defer rn.stop(t)
	waitCaughtUp(t, rn, src, "txn")
	requireParity(t, src, dst, "txn", replicator.ParityMapped, committed+10)
}

// TestResumeAfterKills cancels the replicator at random moments while a
// producer writes to S; D ends with exactly S's records at S's offsets.
func TestResumeAfterKills(t *testing.T) {
	t.Parallel()
	src, dst := startPair(t)
	ctx, stopProducing := context.WithCancel(context.Background())
	var produced sync.WaitGroup
	produced.Add(1)
	go func() {
		defer produced.Done()
		cl, err := kgo.NewClient(kgo.SeedBrokers(src...), kgo.DefaultProduceTopic("kills"), kgo.AllowAutoTopicCreation(),
			kgo.ProducerBatchCompression(kgo.Lz4Compression()))
		if err != nil {
			t.Error(err)
			return
		}
		defer cl.Close()
		for i := 0; ctx.Err() == nil; i++ {
			cl.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprint(i % 17)), Value: []byte(fmt.Sprint("v", i))}, nil)
			if i%100 == 0 {
				time.Sleep(2 * time.Millisecond)
			}
		}
		_ = cl.Flush(context.Background())
	}()
	rng := rand.New(rand.NewPCG(1, 2))
	for kill := range 12 {
		rn := run(t, src, dst, replicator.Topics("kills"), replicator.FetchMaxBytes(16<<10))
		time.Sleep(time.Duration(50+rng.IntN(400)) * time.Millisecond)
		rn.stop(t)
		t.Logf("kill %d done", kill)
	}
	stopProducing()
	produced.Wait()
	rn := run(t, src, dst, replicator.Topics("kills"))
	defer rn.stop(t)
	waitCaughtUp(t, rn, src, "kills")
	requireParity(t, src, dst, "kills", replicator.ParityExact, -1)
}

func TestStopReportsFinalOffsets(t *testing.T) {
	t.Parallel()
	src, dst := startPair(t)
	produceMatrix(t, src, "stop", 2000)
	rn := run(t, src, dst, replicator.Topics("stop"))
	defer rn.stop(t)
	waitCaughtUp(t, rn, src, "stop")
	stopped, err := rn.r.Stop(context.Background(), "stop")
	if err != nil {
		t.Fatal(err)
	}
	parts := stopped.Partitions
	cl, err := kgo.NewClient(kgo.SeedBrokers(dst...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), "stop")
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != embedded.DefaultPartitions {
		t.Fatalf("Stop reported %d partitions", len(parts))
	}
	for _, p := range parts {
		e, _ := ends.Lookup("stop", p.Partition)
		if p.DestinationEnd != e.Offset || p.Next != e.Offset {
			t.Errorf("partition %d: Stop says next %d, destination end %d; D's end is %d", p.Partition, p.Next, p.DestinationEnd, e.Offset)
		}
	}
	if _, err := rn.r.Lag("stop"); err == nil {
		t.Error("a stopped topic still reports lag")
	}
	if _, err := rn.r.Stop(context.Background(), "stop"); err == nil {
		t.Error("stopping twice succeeded")
	}
}

// TestLagWhilePaused pauses a topic under a steady producer: the lag grows
// with the pause, never beyond the time since the copy was last seen caught
// up, and drops after Resume. It waits on the lag rather than sleeping for
// the pause, so a loaded machine only makes it slower; TestLagClockPause
// checks the arithmetic exactly.
func TestLagWhilePaused(t *testing.T) {
	t.Parallel()
	src, dst := startPair(t)
	ctx, stopProducing := context.WithCancel(context.Background())
	defer stopProducing()
	cl, err := kgo.NewClient(kgo.SeedBrokers(src...), kgo.DefaultProduceTopic("lag"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("first")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	go func() {
		for ctx.Err() == nil {
			cl.Produce(ctx, &kgo.Record{Value: []byte("tick")}, nil)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	rn := run(t, src, dst, replicator.Topics("lag"))
	defer rn.stop(t)
	// Every record older than the successful check of waitCaughtUp (which
	// began after before) is copied, and the replicator samples a record
	// only once it exists: the lag cannot exceed the time since before.
	before := time.Now()
	waitCaughtUp(t, rn, src, "lag")
	const pause = 3 * time.Second
	if err := rn.r.Pause("lag"); err != nil {
		t.Fatal(err)
	}
	wait.For(t, time.Minute, fmt.Sprintf("a lag of %v while paused", pause), func() string {
		lag, err := rn.r.Lag("lag")
		if err != nil {
			t.Fatal(err)
		}
		if bound := time.Since(before); lag > bound {
			t.Fatalf("lag %v while paused, above the %v since the copy was last seen caught up", lag, bound)
		}
		if lag < pause {
			return fmt.Sprintf("lag %v", lag)
		}
		return ""
	})
	if err := rn.r.Resume("lag"); err != nil {
		t.Fatal(err)
	}
	wait.For(t, time.Minute, "the lag back under 200ms after resume", func() string {
		if lag, _ := rn.r.Lag("lag"); lag >= 200*time.Millisecond {
			return fmt.Sprintf("lag %v", lag)
		}
		return ""
	})
}

func TestVerifyFindsMismatch(t *testing.T) {
	t.Parallel()
	src, dst := startPair(t)
	produceMatrix(t, src, "bad", 200)
	rn := run(t, src, dst, replicator.Topics("bad"))
	waitCaughtUp(t, rn, src, "bad")
	rn.stop(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(dst...), kgo.DefaultProduceTopic("bad"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Partition: 0, Value: []byte("intruder")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	rep, err := replicator.Verify(context.Background(), src, dst, "bad", replicator.DefaultOffsetMapTopic)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Count == 0 {
		t.Fatal("Verify found no mismatch after a foreign write to D")
	}
	t.Logf("found: %v", rep.Mismatches[0])
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts []replicator.Opt
	}{
		{"no source", []replicator.Opt{replicator.Destination("d:1")}},
		{"no destination", []replicator.Opt{replicator.Source("s:1")}},
		{"workers", []replicator.Opt{replicator.Source("s:1"), replicator.Destination("d:1"), replicator.Workers(0)}},
		{"sample", []replicator.Opt{replicator.Source("s:1"), replicator.Destination("d:1"), replicator.SampleInterval(0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := replicator.New(tt.opts...); err == nil {
				t.Fatal("New accepted a bad config")
			}
		})
	}
}

// OnProgress tells the topic each time its copy advances, so that a
// cutover waiting for the copy to reach the source's end learns of it at
// once: records copied later are told of again.
func TestOnProgressTellsEachAdvance(t *testing.T) {
	t.Parallel()
	src, dst := startPair(t)
	produceMatrix(t, src, "told", 500)
	r, err := replicator.New(replicator.Source(src...), replicator.Destination(dst...),
		replicator.SampleInterval(50*time.Millisecond), replicator.Topics("told"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	told := map[string]int{}
	r.OnProgress(func(topic string) {
		mu.Lock()
		told[topic]++
		mu.Unlock()
	})
	ctx, cancel := context.WithCancel(context.Background())
	rn := &running{r: r, cancel: cancel, done: make(chan error, 1)}
	go func() { rn.done <- r.Run(ctx) }()
	defer rn.stop(t)
	count := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return told["told"], len(told)
	}
	waitCaughtUp(t, rn, src, "told")
	// Told after the step that copied, which the status shows first.
	wait.For(t, time.Minute, "the copy told", func() string {
		if n, _ := count(); n == 0 {
			return "not told"
		}
		return ""
	})
	first, topics := count()
	if topics != 1 {
		t.Fatalf("told %v: want only the topic copied", told)
	}
	produceMatrix(t, src, "told", 500)
	waitCaughtUp(t, rn, src, "told")
	wait.For(t, time.Minute, "the second copy told", func() string {
		if n, _ := count(); n <= first {
			return fmt.Sprintf("told %d times, as many as before the second copy", n)
		}
		return ""
	})
}

// A topic set migrating is copied to the source's end at once: the
// sampler, whose samples bound what the copy reads, samples then instead
// of at its next tick (an hour away here).
func TestSetMigratingSamplesAtOnce(t *testing.T) {
	t.Parallel()
	src, dst := startPair(t)
	produceMatrix(t, src, "hurried", 100)
	rn := run(t, src, dst, replicator.Topics("hurried"), replicator.SampleInterval(time.Hour))
	defer rn.stop(t)
	waitCaughtUp(t, rn, src, "hurried") // the first sample, at the start
	produceMatrix(t, src, "hurried", 100)
	if err := rn.r.SetMigrating("hurried", true); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, rn, src, "hurried")
	requireParity(t, src, dst, "hurried", replicator.ParityExact, 200)
}
