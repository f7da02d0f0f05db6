package pidmap_test

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/pidmap"
	"github.com/baton-kafka/baton/internal/bufpool"
	"github.com/baton-kafka/baton/internal/recordbatch"
)

// batch is an idempotent record batch header of producer pid, epoch 0, at
// base sequence seq, holding one record; transactional if txn.
func batch(pid int64, seq int32, txn bool) []byte {
	b := make([]byte, recordbatch.HeaderLen)
	b[recordbatch.OffMagic] = 2
	binary.BigEndian.PutUint32(b[recordbatch.OffLength:], uint32(len(b)-recordbatch.LogOverhead))
	binary.BigEndian.PutUint32(b[recordbatch.OffNumRecords:], 1)
	if txn {
		b[recordbatch.OffAttributes+1] |= 0x10
	}
	recordbatch.SetProducer(b, recordbatch.Producer{ID: pid, BaseSeq: seq})
	return b
}

// alloc hands out destination ids 500, 501, ..., or fails while fail is set.
type alloc struct {
	next  atomic.Int64
	fail  atomic.Bool
	calls atomic.Int64
}

func (a *alloc) Allocate(context.Context) (int64, int16, error) {
	a.calls.Add(1)
	if a.fail.Load() {
		return 0, 0, errors.New("destination down")
	}
	return 500 + a.next.Add(1) - 1, 0, nil
}

// source holds batches at offsets, and counts the searches.
type source struct {
	mu       sync.Mutex
	at       map[pidmap.Batch]int64
	searches int
}

func (s *source) Find(_ context.Context, b pidmap.Batch) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.searches++
	if off, ok := s.at[b]; ok {
		return off, nil
	}
	return 0, pidmap.ErrNotFound
}

// exchange is a produce of one partition of topic t per batch, each part
// routed to to.
func exchange(to filter.Cluster, txn bool, batches ...[]byte) *filter.Exchange {
	req := kmsg.NewPtrProduceRequest()
	if txn {
		id := "txn"
		req.TransactionID = &id
	}
	rt := kmsg.ProduceRequestTopic{Topic: "t"}
	for i, b := range batches {
		rt.Partitions = append(rt.Partitions, kmsg.ProduceRequestTopicPartition{Partition: int32(i), Records: b})
	}
	req.Topics = []kmsg.ProduceRequestTopic{rt}
	x := &filter.Exchange{Req: req}
	for i := range x.Parts() {
		x.Parts()[i].To = to
	}
	return x
}

// sent returns the producer fields a part goes upstream with.
func sent(t *testing.T, p filter.Part) recordbatch.Producer {
	t.Helper()
	b := p.Records
	if p.Send != nil {
		b = p.Send
	}
	pr, ok := recordbatch.ReadProducer(b)
	if !ok {
		t.Fatalf("part %d: no producer in its bytes", p.Partition)
	}
	return pr
}

func TestMapsDestinationBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var a alloc
	f, err := pidmap.New(pidmap.Config{Allocator: &a})
	if err != nil {
		t.Fatal(err)
	}
	c := f.New(filter.ConnInfo{}).(filter.RequestFilter)

	// Two partitions of producer 7, first batches at sequences 40 and 9:
	// each starts its destination stream at 0, under one destination id.
	x := exchange(filter.Destination, false, batch(7, 40, false), batch(7, 9, false))
	c.OnRequest(ctx, x)
	for i, want := range []recordbatch.Producer{{ID: 500, BaseSeq: 0}, {ID: 500, BaseSeq: 0}} {
		if got := sent(t, x.Parts()[i]); got != want || x.Parts()[i].Answered {
			t.Errorf("first batch of partition %d goes as %+v (answered %v), want %+v", i, got, x.Parts()[i].Answered, want)
		}
	}
	if pr, _ := recordbatch.ReadProducer(x.Parts()[0].Records); pr.ID != 7 {
		t.Errorf("the client's bytes were changed: producer %d", pr.ID)
	}
	// Later batches count from there; a retry maps to the same sequence.
	x = exchange(filter.Destination, false, batch(7, 45, false), batch(7, 9, false))
	c.OnRequest(ctx, x)
	for i, want := range []recordbatch.Producer{{ID: 500, BaseSeq: 5}, {ID: 500, BaseSeq: 0}} {
		if got := sent(t, x.Parts()[i]); got != want {
			t.Errorf("partition %d: %+v, want %+v", i, got, want)
		}
	}
	if n := f.Producers(); n != 1 {
		t.Errorf("%d producers mapped, want 1", n)
	}

	// Left alone: parts bound for the source, transactional batches, and
	// batches without a producer id.
	for name, x := range map[string]*filter.Exchange{
		"source":        exchange(filter.Source, false, batch(7, 50, false)),
		"transactional": exchange(filter.Destination, true, batch(8, 0, true)),
		"no producer":   exchange(filter.Destination, false, batch(-1, -1, false)),
	} {
		c.OnRequest(ctx, x)
		if p := x.Parts()[0]; p.Send != nil || p.Answered {
			t.Errorf("%s: mapped (answered %v, code %d)", name, p.Answered, p.Code)
		}
	}
	if n := a.calls.Load(); n != 1 {
		t.Errorf("%d allocations, want 1", n)
	}
}

func TestAllocationFailureAnswersRetriable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var a alloc
	a.fail.Store(true)
	f, err := pidmap.New(pidmap.Config{Allocator: &a})
	if err != nil {
		t.Fatal(err)
	}
	c := f.New(filter.ConnInfo{}).(filter.RequestFilter)
	x := exchange(filter.Destination, false, batch(7, 3, false))
	c.OnRequest(ctx, x)
	if p := x.Parts()[0]; !p.Answered || p.Code != kerr.NotLeaderForPartition.Code || p.Send != nil {
		t.Fatalf("with the destination down: answered %v code %d, want NOT_LEADER_OR_FOLLOWER unsent", p.Answered, p.Code)
	}
	a.fail.Store(false)
	x = exchange(filter.Destination, false, batch(7, 3, false))
	c.OnRequest(ctx, x)
	if got := sent(t, x.Parts()[0]); x.Parts()[0].Answered || got.ID != 500 || got.BaseSeq != 0 {
		t.Fatalf("once it is back: %+v, answered %v", got, x.Parts()[0].Answered)
	}
}

// TestBatchesTheSourceHolds: a retry of a batch the replicator copied, or
// of one the source answered uncertainly (noted on the response side) and
// holds, is answered with its offset there, not written again; the stream
// toward the destination starts after it.
func TestBatchesTheSourceHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	copied := pidmap.NewCopied(map[pidmap.Batch]int64{
		{Topic: "t", Partition: 0, ProducerID: 7, Seq: 0, Records: 1}: 30,
	})
	src := &source{at: map[pidmap.Batch]int64{
		{Topic: "t", Partition: 0, ProducerID: 8, Seq: 4, Records: 1}: 61,
	}}
	var a alloc
	f, err := pidmap.New(pidmap.Config{Allocator: &a, Source: src,
		Copied: func(topic string) *pidmap.Copied {
			if topic == "t" {
				return copied
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	c := f.New(filter.ConnInfo{})
	req, resp := c.(filter.RequestFilter), c.(filter.ResponseFilter)

	x := exchange(filter.Destination, false, batch(7, 0, false))
	req.OnRequest(ctx, x)
	if p := x.Parts()[0]; !p.Answered || p.Code != 0 || p.Offset != 30 {
		t.Fatalf("retry of a copied batch: answered %v code %d offset %d, want success at 30", p.Answered, p.Code, p.Offset)
	}

	// Producer 8's batch 4 went to the source in PROXY and its outcome is
	// unknown: the response side remembers it.
	x = exchange(filter.Source, false, batch(8, 4, false))
	req.OnRequest(ctx, x)
	x.Parts()[0].Uncertain = true
	resp.OnResponse(ctx, x)
	// After COMPLETE, its retry is found in the source.
	x = exchange(filter.Destination, false, batch(8, 4, false))
	req.OnRequest(ctx, x)
	if p := x.Parts()[0]; !p.Answered || p.Code != 0 || p.Offset != 61 {
		t.Fatalf("retry of an uncertain batch the source holds: answered %v code %d offset %d, want success at 61", p.Answered, p.Code, p.Offset)
	}
	// The next batch starts the destination stream, and a batch never
	// uncertain is not searched for.
	x = exchange(filter.Destination, false, batch(8, 5, false))
	req.OnRequest(ctx, x)
	if got := sent(t, x.Parts()[0]); x.Parts()[0].Answered || got.BaseSeq != 0 {
		t.Fatalf("the batch after it: %+v, answered %v; want the destination's sequence 0", got, x.Parts()[0].Answered)
	}
	if src.searches != 1 {
		t.Errorf("%d searches of the source, want 1 (the uncertain batch only)", src.searches)
	}
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]pidmap.Config{
		"no allocator":  {},
		"negative max":  {Allocator: &alloc{}, MaxProducers: -1},
		"negative idle": {Allocator: &alloc{}, Idle: -1},
	} {
		if _, err := pidmap.New(cfg); !errors.Is(err, pidmap.ErrBadConfig) {
			t.Errorf("%s: %v, want ErrBadConfig", name, err)
		}
	}
}

// flakySource fails its searches while down, else finds what it holds.
type flakySource struct {
	source
	down atomic.Bool
}

func (s *flakySource) Find(ctx context.Context, b pidmap.Batch) (int64, error) {
	if s.down.Load() {
		s.mu.Lock()
		s.searches++
		s.mu.Unlock()
		return 0, errors.New("source unreachable")
	}
	return s.source.Find(ctx, b)
}

// refuser is the chain's Handler as the router is for a part bound for a
// destination partition with no leader known: it answers the part
// retriable, unsent, while noLeader is set.
type refuser struct{ noLeader atomic.Bool }

func (h *refuser) Dispatch(_ context.Context, x *filter.Exchange) filter.Pending {
	for i := range x.Parts() {
		p := &x.Parts()[i]
		if p.Answered || !h.noLeader.Load() {
			continue
		}
		p.Answer(kerr.NotLeaderForPartition.Code)
		if p.Send != nil { // the router puts the copy back, unsent
			bufpool.Put(p.Send)
			p.Send = nil
		}
	}
	x.Resp = kmsg.NewPtrProduceResponse()
	return filter.Done{}
}

// TestUncertainRetryRefusedUnsentIsSearchedAgain: pidmap runs before the
// router's leader lookup, so a retry of an uncertain source batch can be
// searched for (and forgotten as uncertain), mapped (its destination
// stream started), and then refused unsent by the router (no destination
// leader known). Nothing reached the destination, yet the next retry is
// neither searched for nor recognised: started() says the stream began, so
// it goes to the destination, a duplicate of the copy the replicator made
// of the source's. Before the refactor the mapping came after the leader
// lookup, and a part refused there left the uncertain batch for its retry.
// Here the source is unreachable at the first retry (its search fails,
// which alone would only warn), and back at the second.
func TestUncertainRetryRefusedUnsentIsSearchedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := &flakySource{source: source{at: map[pidmap.Batch]int64{
		{Topic: "t", Partition: 0, ProducerID: 8, Seq: 4, Records: 1}: 61,
	}}}
	var a alloc
	f, err := pidmap.New(pidmap.Config{Allocator: &a, Source: src})
	if err != nil {
		t.Fatal(err)
	}
	h := &refuser{}
	c := filter.NewChain(filter.ConnInfo{}, []filter.Factory{f}, h)
	run := func(x *filter.Exchange) {
		c.Response(ctx, c.Request(ctx, x))
	}

	// In PROXY, producer 8's batch 4 went to the source; its outcome is
	// unknown.
	x := exchange(filter.Source, false, batch(8, 4, false))
	s := c.Request(ctx, x)
	x.Parts()[0].Uncertain = true // as the router's answer sets it
	c.Response(ctx, s)

	// COMPLETE. The first retry meets an unreachable source and a
	// destination partition without a known leader: refused unsent.
	src.down.Store(true)
	h.noLeader.Store(true)
	x = exchange(filter.Destination, false, batch(8, 4, false))
	run(x)
	if p := x.Parts()[0]; !p.Answered || p.Code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("first retry: answered %v code %d, want NOT_LEADER_OR_FOLLOWER unsent", p.Answered, p.Code)
	}

	// Both are back. The retry is the same uncertain batch, which the
	// source holds at 61: it must be answered from there, not written to
	// the destination a second time.
	src.down.Store(false)
	h.noLeader.Store(false)
	x = exchange(filter.Destination, false, batch(8, 4, false))
	run(x)
	if p := x.Parts()[0]; !p.Answered || p.Code != 0 || p.Offset != 61 {
		t.Errorf("second retry of the uncertain batch: answered %v code %d offset %d, sent to the destination %v; want success at 61 from the source (searches: %d)",
			p.Answered, p.Code, p.Offset, p.Send != nil, src.searches)
	}
}
