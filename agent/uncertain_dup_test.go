package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
)

// Invariant 7: an idempotent batch the source wrote but whose answer the
// agent lost (answered retriable), retried by the client after COMPLETE,
// is not written to the destination again: it is answered with its offset
// in the source (the replicator's copy sits at the same offset on the
// destination), and the producer's destination stream starts with the
// batch after it.
func TestRetryOfUncertainWriteAfterCompleteIsNotDuplicated(t *testing.T) {
	t.Parallel()
	const topic = "uncertain"
	routes := NewRouteTable([]Route{{Topic: topic, State: migration.Proxy}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := newIdempotentFixture(t, ctx, topic, Routes(routes), ForwardDeadline(300*time.Millisecond))
	a, src, pid, epoch := f.a, f.src, f.pid, f.epoch
	end := func(cluster string) int64 { return f.end(t, ctx, cluster, topic) }

	conn := DialRaw(t, a.Addr())
	produce := func(seq int32) (int16, int64) {
		return conn.Produce(topic, pinTestSeqBatch(fmt.Sprint("seq ", seq), pid, epoch, seq))
	}

	if code, off := produce(0); code != 0 || off != 0 {
		t.Fatalf("seq 0 in PROXY: %v at %d", kerr.ErrorForCode(code), off)
	}
	// Seq 1 reaches the source, which answers only after the forward
	// deadline: the agent answers retriable, the source writes it.
	kc := src.Kfake()
	release := make(chan struct{})
	kc.ControlKey(0, func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.SleepControl(func() { <-release })
		return nil, nil, false
	})
	if code, _ := produce(1); code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("seq 1 stuck at the source: %v, want NOT_LEADER_OR_FOLLOWER", kerr.ErrorForCode(code))
	}
	close(release)
	wait.For(t, 10*time.Second, "the source writes seq 1", func() string {
		if e := end("source"); e != 2 {
			return fmt.Sprintf("source end offset %d", e)
		}
		return ""
	})
	// The cutover (the replicator's copy of offsets 0 and 1 is left out:
	// the destination stays empty, so any write of the agent shows).
	routes.Replace([]Route{{Topic: topic, State: migration.Complete}})

	if code, off := produce(1); code != 0 || off != 1 {
		t.Fatalf("retry of seq 1 after COMPLETE: %v at offset %d, want success at its source offset 1", kerr.ErrorForCode(code), off)
	}
	if e := end("destination"); e != 0 {
		t.Fatalf("the retry of a batch the source holds was written to the destination (end offset %d)", e)
	}
	if code, off := produce(2); code != 0 || off != 0 {
		t.Fatalf("seq 2 after COMPLETE: %v at %d, want success at the destination's offset 0", kerr.ErrorForCode(code), off)
	}
	if e := end("destination"); e != 1 {
		t.Fatalf("destination end offset %d after seq 2, want 1", e)
	}
}

// Finding 10 (docs/reliability.md): an agent killed with a client's
// batches outstanding never learns they were written, and the agent that
// replaces it knows nothing of them. After COMPLETE the client's retry of
// such a batch is answered from the replicator's record of the source
// batches it copied (in the route), not written to the destination again;
// the producer's destination stream starts with its next batch.
func TestRetryOfCopiedBatchOnANewAgentIsNotDuplicated(t *testing.T) {
	t.Parallel()
	const topic = "copied"
	routes := NewRouteTable([]Route{{Topic: topic, State: migration.Proxy}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := newIdempotentFixture(t, ctx, topic, Routes(routes))
	a, pid, epoch := f.a, f.pid, f.epoch
	conn := DialRaw(t, a.Addr())
	produce := func(epoch int16, seq int32) (int16, int64) {
		return conn.Produce(topic, pinTestSeqBatch(fmt.Sprint("seq ", seq), pid, epoch, seq))
	}
	// Seqs 0 and 1 are written to the source in PROXY. This agent saw
	// their answers; the one whose client retries them below did not.
	for seq := range int32(2) {
		if code, off := produce(epoch, seq); code != 0 || off != int64(seq) {
			t.Fatalf("seq %d in PROXY: %v at %d", seq, kerr.ErrorForCode(code), off)
		}
	}
	copied, err := copiedBatches(topic, []*batonv1.SourceBatch{
		{Partition: 0, ProducerId: pid, ProducerEpoch: int32(epoch), BaseSequence: 0, Records: 1, Offset: 0},
		{Partition: 0, ProducerId: pid, ProducerEpoch: int32(epoch), BaseSequence: 1, Records: 1, Offset: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	// COMPLETE, the copies of offsets 0 and 1 left out of the destination
	// so that any write of the agent shows.
	routes.Replace([]Route{{Topic: topic, State: migration.Complete, copied: copied}})
	dstEnd := func() int64 { return f.end(t, ctx, "destination", topic) }
	if code, off := produce(epoch, 1); code != 0 || off != 1 {
		t.Fatalf("retry of seq 1 after COMPLETE: %v at offset %d, want success at its copy's offset 1", kerr.ErrorForCode(code), off)
	}
	if e := dstEnd(); e != 0 {
		t.Fatalf("the retry of a copied batch was written to the destination (end offset %d)", e)
	}
	if code, off := produce(epoch, 2); code != 0 || off != 0 {
		t.Fatalf("seq 2 after COMPLETE: %v at %d, want success at the destination's offset 0", kerr.ErrorForCode(code), off)
	}
	if e := dstEnd(); e != 1 {
		t.Fatalf("destination end offset %d after seq 2, want 1", e)
	}
}

// A route's source batches out of range NACK the route, naming the entry.
func TestCopiedBatchesRefuseOutOfRange(t *testing.T) {
	t.Parallel()
	for _, b := range []*batonv1.SourceBatch{
		{Partition: -1, Records: 1},
		{ProducerId: -1, Records: 1},
		{Records: 0},
		{Records: 1, Offset: -1},
		{Records: 1, ProducerEpoch: 1 << 16},
		{Records: 1, BaseSequence: -2},
	} {
		if _, err := copiedBatches("t", []*batonv1.SourceBatch{{Records: 1}, b}); err == nil || !strings.Contains(err.Error(), "source_batches[1]") {
			t.Errorf("%v: %v, want an error naming source_batches[1]", b, err)
		}
	}
}

// idempotentFixture is an agent in front of two kfake clusters, a
// one-partition topic on both, and a producer id from the source.
type idempotentFixture struct {
	a        *Agent
	src, dst *embedded.Cluster
	clients  map[string]*kgo.Client // "source", "destination"
	pid      int64
	epoch    int16
}

func newIdempotentFixture(t *testing.T, ctx context.Context, topic string, opts ...Opt) *idempotentFixture {
	t.Helper()
	f := &idempotentFixture{clients: map[string]*kgo.Client{}}
	f.a, f.src, f.dst = startInternalAgent(t, 1, opts...)
	for name, c := range map[string]*embedded.Cluster{"source": f.src, "destination": f.dst} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		f.clients[name] = cl
		if resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil || resp.Err != nil {
			t.Fatalf("creating %s on the %s: %v %v", topic, name, err, resp.Err)
		}
	}
	ipid, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(ctx, f.clients["source"])
	if err == nil {
		err = kerr.ErrorForCode(ipid.ErrorCode)
	}
	if err != nil {
		t.Fatalf("InitProducerID: %v", err)
	}
	f.pid, f.epoch = ipid.ProducerID, ipid.ProducerEpoch
	return f
}

// end returns the end offset of topic's partition 0 on cluster.
func (f *idempotentFixture) end(t *testing.T, ctx context.Context, cluster, topic string) int64 {
	t.Helper()
	ends, err := kadm.NewClient(f.clients[cluster]).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := ends.Lookup(topic, 0)
	return o.Offset
}
