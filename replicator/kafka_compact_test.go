package replicator_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/replicator"
	"github.com/baton-kafka/baton/test/kafka"
)

// startKafkaPair starts a 1-node source (with opts) and a 1-node
// destination Apache Kafka at once, stopped at cleanup.
func startKafkaPair(t *testing.T, srcOpts ...kafka.Opt) (src, dst *kafka.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), kafka.DefaultStartTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var cs [2]*kafka.Cluster
	var errs [2]error
	for i, opts := range [][]kafka.Opt{srcOpts, nil} {
		dir := t.TempDir()
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs[i], errs[i] = kafka.Start(ctx, append([]kafka.Opt{kafka.Brokers(1), kafka.Dir(dir)}, opts...)...)
		}()
	}
	wg.Wait()
	for i, c := range cs {
		if c == nil {
			continue
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("kafka cluster %d in %s, log tail:\n%s", i, c.Dir(), c.LogTail(40))
			}
			if err := c.Stop(); err != nil {
				t.Errorf("kafka: stopping cluster: %v", err)
			}
		})
	}
	for _, err := range errs {
		if err != nil {
			t.Fatalf("kafka.Start: %v", err)
		}
	}
	return cs[0], cs[1]
}

// scanBatches fetches every batch of topic/p from the start with raw
// Fetches and returns, per batch, its base offset, last offset delta and
// record count, plus the offsets of the records.
type scannedBatch struct {
	base      int64
	lastDelta int32
	records   int32
}

func scanBatches(t *testing.T, seeds []string, topic string, p int32, end int64) []scannedBatch {
	t.Helper()
	v := kversion.Stable()
	v.SetMaxKeyVersion(1, 12) // Fetch by topic name
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.MaxVersions(v))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []scannedBatch
	for next := int64(0); next < end; {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxWaitMillis, req.MaxBytes, req.SessionEpoch = -1, 100, 8<<20, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = p, next, 8<<20, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		raw := resp.Topics[0].Partitions[0].RecordBatches
		moved := false
		for len(raw) >= 12 {
			l := int(binary.BigEndian.Uint32(raw[8:12])) + 12
			if l > len(raw) {
				break
			}
			var b kmsg.RecordBatch
			if err := b.ReadFrom(raw[:l]); err != nil {
				t.Fatal(err)
			}
			raw = raw[l:]
			if b.FirstOffset+int64(b.LastOffsetDelta) < next {
				continue
			}
			out = append(out, scannedBatch{base: b.FirstOffset, lastDelta: b.LastOffsetDelta, records: b.NumRecords})
			next = b.FirstOffset + int64(b.LastOffsetDelta) + 1
			moved = true
		}
		if !moved {
			t.Fatalf("fetch at %d of %s/%d returned no batch", next, topic, p)
		}
	}
	return out
}

// TestCompactedSourceRealKafka compacts a topic on Apache Kafka (the log
// cleaner removes overwritten keys, leaving batches whose records do not
// fill their offset range, and gaps between batches), copies it with a
// restart in the middle, and checks record by record that D holds every
// surviving record through the offset map, each partition reported mapped.
// A group offset committed on S at a removed record is synced to the next
// surviving record on D.
func TestCompactedSourceRealKafka(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts two Apache Kafka clusters")
	}
	s, d := startKafkaPair(t, kafka.BrokerConfig("log.cleaner.backoff.ms", "100"))
	src, dst := s.Addrs(), d.Addrs()
	ctx := context.Background()
	const topic, partitions, rounds, perRound = "compacted", 2, 10, 150

	cl, err := kgo.NewClient(kgo.SeedBrokers(src...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	cfg := map[string]*string{}
	for k, v := range map[string]string{"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
		"min.compaction.lag.ms": "0"} {
		cfg[k] = kmsg.StringPtr(v)
	}
	if resp, err := adm.CreateTopic(ctx, partitions, 1, cfg, topic); err != nil || resp.Err != nil {
		t.Fatal(err, resp.Err)
	}

	// Every round rolls a segment (segment.ms) and overwrites the keys
	// k0..k39 of the earlier rounds; one record in three has a key of its
	// own and survives, some of those as tombstones (the cleaner then sets
	// the batch's delete horizon).
	keys := map[int32]map[string]bool{}
	for round := range rounds {
		c := codecs[round%len(codecs)]
		pr, err := kgo.NewClient(kgo.SeedBrokers(src...), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(c.codec),
			kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		// First a batch of only overwritten keys, which its own round's
		// next batch from the same producer overwrites again: the cleaner
		// removes it whole, a gap between batches.
		var pre []*kgo.Record
		for j := range 40 {
			pre = append(pre, &kgo.Record{Partition: int32(j % partitions), Key: []byte(fmt.Sprintf("k%d", j)), Value: []byte("soon gone")})
		}
		if err := pr.ProduceSync(ctx, pre...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for i := range perRound {
			r := &kgo.Record{Partition: int32(i % partitions), Key: []byte(fmt.Sprintf("k%d", i%40)),
				Value: []byte(fmt.Sprintf("round %d record %d %s", round, i, c.name))}
			if i%3 == 0 {
				r.Key = []byte(fmt.Sprintf("u%d-%d", round, i))
				if i%27 == 0 {
					r.Value = nil
				}
			}
			if i%2 == 0 {
				r.Headers = []kgo.RecordHeader{{Key: "round", Value: []byte(fmt.Sprint(round))}}
			}
			recs = append(recs, r)
		}
		if err := pr.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		pr.Close()
		for _, r := range recs {
			if keys[r.Partition] == nil {
				keys[r.Partition] = map[string]bool{}
			}
			keys[r.Partition][string(r.Key)] = true
		}
		time.Sleep(150 * time.Millisecond) // past segment.ms: the next append rolls
	}
	// One more record per partition rolls the last round's segment, so that
	// every round can be cleaned.
	for p := range int32(partitions) {
		r := &kgo.Record{Topic: topic, Partition: p, Key: []byte(fmt.Sprint("roll", p)), Value: []byte("roll")}
		pr, err := kgo.NewClient(kgo.SeedBrokers(src...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		if err := pr.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		pr.Close()
		keys[p][string(r.Key)] = true
	}
	want := 0
	for _, ks := range keys {
		want += len(ks)
	}

	// Wait until the cleaner has left one record per key.
	var batches map[int32][]scannedBatch
	wait.For(t, 90*time.Second, fmt.Sprintf("the log cleaner to leave %d records (one per key)", want), func() string {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return err.Error()
		}
		batches = map[int32][]scannedBatch{}
		got := 0
		for p := range int32(partitions) {
			e, _ := ends.Lookup(topic, p)
			batches[p] = scanBatches(t, src, topic, p, e.Offset)
			for _, b := range batches[p] {
				got += int(b.records)
			}
		}
		if got != want {
			return fmt.Sprintf("%d records left", got)
		}
		return ""
	})
	// The source has holes inside batches and between them.
	var holeOffset int64 = -1
	for p := range int32(partitions) {
		inside, between := 0, 0
		for i, b := range batches[p] {
			if b.records > 0 && b.records < b.lastDelta+1 {
				inside++
			}
			if i > 0 {
				prev := batches[p][i-1]
				if b.base > prev.base+int64(prev.lastDelta)+1 {
					between++
				}
			}
		}
		t.Logf("partition %d: %d batches, %d with holes inside, %d gaps between", p, len(batches[p]), inside, between)
		if inside == 0 || between == 0 {
			t.Fatalf("partition %d: want batches with holes inside and gaps between them after cleaning: %+v", p, batches[p])
		}
	}

	// A group committed on S at an offset the cleaner removed.
	recsP0 := readOffsets(t, src, topic, 0)
	for i := 1; i < len(recsP0) && holeOffset < 0; i++ {
		if recsP0[i] > recsP0[i-1]+1 {
			holeOffset = recsP0[i-1] + 1
		}
	}
	if holeOffset < 0 {
		t.Fatal("partition 0 has no removed offset")
	}
	commit := kadm.Offsets{}
	commit.AddOffset(topic, 0, holeOffset, -1)
	if _, err := adm.CommitOffsets(ctx, "compacted-group", commit); err != nil {
		t.Fatal(err)
	}

	// Copy in small steps, stop mid-copy, resume.
	rn := run(t, src, dst, replicator.Topics(topic), replicator.FetchMaxBytes(1<<10), replicator.GroupSyncInterval(0))
	wait.For(t, time.Minute, "some progress of the copy", func() string {
		for _, ps := range topicStatus(rn, topic).Partitions {
			if ps.DestinationEnd > 0 {
				return ""
			}
		}
		return fmt.Sprintf("%+v", rn.r.Status())
	})
	rn.stop(t)
	t.Logf("stopped at %+v", rn.r.Status()[0].Partitions)
	rn = run(t, src, dst, replicator.Topics(topic), replicator.FetchMaxBytes(64<<10), replicator.GroupSyncInterval(0))
	defer rn.stop(t)
	waitCaughtUp(t, rn, src, topic)
	for _, ps := range rn.r.Status()[0].Partitions {
		if ps.Parity != replicator.ParityMapped || ps.Err != nil {
			t.Errorf("partition status %+v, want mapped without error", ps)
		}
	}
	requireParity(t, src, dst, topic, replicator.ParityMapped, want)

	// The group offset lands on the next surviving record.
	wait.For(t, time.Minute, "a group sync (D's group coordinator may still be loading)", func() string {
		if _, err := rn.r.SyncGroups(ctx); err != nil {
			return err.Error()
		}
		return ""
	})
	dcl, err := kgo.NewClient(kgo.SeedBrokers(dst...))
	if err != nil {
		t.Fatal(err)
	}
	defer dcl.Close()
	got, err := kadm.NewClient(dcl).FetchOffsets(ctx, "compacted-group")
	if err != nil {
		t.Fatal(err)
	}
	o, ok := got.Lookup(topic, 0)
	if !ok {
		t.Fatal("group offset not synced to D")
	}
	maps, err := replicator.LoadOffsetMaps(ctx, dst, replicator.DefaultOffsetMapTopic)
	if err != nil {
		t.Fatal(err)
	}
	nextSrc := int64(-1)
	for _, off := range recsP0 {
		if off >= holeOffset {
			nextSrc = off
			break
		}
	}
	if want := maps[topic].ToDestination(0, nextSrc); o.At != want || maps[topic].ToSource(0, o.At) != nextSrc {
		t.Errorf("group offset at removed source offset %d synced to %d, want %d (source %d)", holeOffset, o.At, want, nextSrc)
	}
}

// readOffsets returns the offsets of topic/p's records, read to the end.
func readOffsets(t *testing.T, seeds []string, topic string, p int32) []int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	cl.Close()
	if err != nil {
		t.Fatal(err)
	}
	e, _ := ends.Lookup(topic, p)
	cl, err = kgo.NewClient(kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []int64
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for len(out) == 0 || out[len(out)-1]+1 < e.Offset {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s/%d: %v", topic, p, err)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r.Offset) })
	}
	return out
}
