package replicator_test

import (
	"cmp"
	"context"
	"encoding/binary"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/recordbatch"
	"github.com/baton-kafka/baton/replicator"
)

// Stop hands over, per partition and idempotent source producer session,
// the last five batches copied, with the offset each has on the
// destination; batches of producers without idempotence are not among
// them. The expected set is read from the source's own batch headers.
// A restarted replicator reads them back from the source, so the hand-over
// is the same whether or not it copied them itself.
func TestStopHandsOverRecentIdempotentBatches(t *testing.T) {
	t.Parallel()
	for _, restart := range []bool{false, true} {
		t.Run(map[bool]string{false: "one run", true: "after a restart"}[restart], func(t *testing.T) {
			t.Parallel()
			testRecentHandOver(t, restart)
		})
	}
}

func testRecentHandOver(t *testing.T, restart bool) {
	src, dst := startPair(t)
	const topic = "recent"
	produceMatrix(t, src, topic, 2000)
	rn := run(t, src, dst, replicator.Topics(topic))
	waitCaughtUp(t, rn, src, topic)
	if restart {
		rn.stop(t)
		rn = run(t, src, dst, replicator.Topics(topic))
		waitCaughtUp(t, rn, src, topic)
	}
	defer rn.stop(t)
	stopped, err := rn.r.Stop(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	v := kversion.Stable()
	v.SetMaxKeyVersion(1, 12) // Fetch by topic name
	cl, err := kgo.NewClient(kgo.SeedBrokers(src...), kgo.MaxVersions(v))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	type session struct {
		part  int32
		id    int64
		epoch int16
	}
	want := map[session][]replicator.SourceBatch{}
	for p := range int32(embedded.DefaultPartitions) {
		for _, raw := range sourceBatches(t, cl, topic, p) {
			prod, ok := recordbatch.ReadProducer(raw)
			if !ok || prod.ID < 0 {
				continue
			}
			k := session{p, prod.ID, prod.Epoch}
			want[k] = append(want[k], replicator.SourceBatch{Partition: p, ProducerID: prod.ID, Epoch: prod.Epoch,
				BaseSeq: prod.BaseSeq, Records: int32(binary.BigEndian.Uint32(raw[recordbatch.OffNumRecords:])),
				Offset: int64(binary.BigEndian.Uint64(raw[recordbatch.OffBaseOffset:]))})
		}
	}
	if len(want) == 0 {
		t.Fatal("the source holds no idempotent batches: the test proves nothing")
	}
	var wantAll []replicator.SourceBatch
	for _, bs := range want {
		wantAll = append(wantAll, bs[max(len(bs)-5, 0):]...)
	}
	byPlace := func(a, b replicator.SourceBatch) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	}
	slices.SortFunc(wantAll, byPlace)
	got := stopped.Recent
	if len(got) != len(wantAll) {
		t.Fatalf("Stop handed over %d recent batches, the source's headers give %d (%d idempotent sessions)", len(got), len(wantAll), len(want))
	}
	for i := range got {
		g := got[i]
		g.Copied = wantAll[i].Copied
		if g != wantAll[i] {
			t.Fatalf("recent batch %d: %+v, want %+v", i, got[i], wantAll[i])
		}
		if got[i].Copied.IsZero() {
			t.Fatalf("recent batch %d has no copy time", i)
		}
	}
}

// sourceBatches returns the raw batches of topic/p in the source.
func sourceBatches(t *testing.T, cl *kgo.Client, topic string, p int32) [][]byte {
	t.Helper()
	md, err := kadm.NewClient(cl).Metadata(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	leader := md.Topics[topic].Partitions[p].Leader
	var out [][]byte
	for from := int64(0); ; {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxBytes, req.SessionEpoch = -1, 16<<20, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = p, from, 16<<20, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		kresp, err := cl.Broker(int(leader)).Request(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		resp := kresp.(*kmsg.FetchResponse)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("fetch %s/%d answered %d topics", topic, p, len(resp.Topics))
		}
		fp := resp.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(fp.ErrorCode); err != nil {
			t.Fatalf("fetch %s/%d at %d: %v", topic, p, from, err)
		}
		b, next := fp.RecordBatches, from
		for len(b) >= recordbatch.HeaderLen {
			n, err := recordbatch.BatchLen(b)
			if err != nil {
				break
			}
			base := int64(binary.BigEndian.Uint64(b[recordbatch.OffBaseOffset:]))
			next = base + int64(binary.BigEndian.Uint32(b[recordbatch.OffLastDelta:])) + 1
			out = append(out, b[:n])
			b = b[n:]
		}
		if next == from || next >= fp.HighWatermark {
			return out
		}
		from = next
	}
}
