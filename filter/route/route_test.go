package route_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/route"
	"github.com/baton-kafka/baton/internal/recordbatch"
)

// table is a route table: per topic, the cluster its lookups answer, in
// turn (the last one repeats).
type table struct {
	mu      sync.Mutex
	answers map[string][]filter.Cluster
}

func (t *table) Target(topic string) filter.Cluster {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.answers[topic]
	if len(a) == 0 {
		return filter.Source
	}
	c := a[0]
	if len(a) > 1 {
		t.answers[topic] = a[1:]
	}
	return c
}

type lease bool

func (l lease) MayWrite(string) bool { return bool(l) }

// counter counts in flight per topic.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) Add(topic string, d int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[topic] += d
}

func (c *counter) get(topic string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[topic]
}

// batch is the header of an idempotent batch of producer 7 at seq.
func batch(seq int32) []byte {
	b := make([]byte, recordbatch.HeaderLen)
	b[recordbatch.OffMagic] = 2
	recordbatch.SetProducer(b, recordbatch.Producer{ID: 7, Epoch: 0, BaseSeq: seq})
	return b
}

func produce(topics map[string][]int32) *filter.Exchange {
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	for _, t := range []string{"a", "b", "c"} {
		ps, ok := topics[t]
		if !ok {
			continue
		}
		rt := kmsg.ProduceRequestTopic{Topic: t}
		for _, p := range ps {
			rt.Partitions = append(rt.Partitions, kmsg.ProduceRequestTopicPartition{Partition: p, Records: batch(0)})
		}
		req.Topics = append(req.Topics, rt)
	}
	return &filter.Exchange{Req: req}
}

// TestWhere routes each topic by its table entry and the lease, counting
// source-bound topics once per request, after a confirming lookup.
func TestWhere(t *testing.T) {
	t.Parallel()
	S, D, N := filter.Source, filter.Destination, filter.Nowhere
	cases := []struct {
		name    string
		answers map[string][]filter.Cluster
		lease   bool
		want    map[string]filter.Cluster // per topic
		counted map[string]int
	}{
		{"proxy under a lease", map[string][]filter.Cluster{"a": {S}}, true, map[string]filter.Cluster{"a": S}, map[string]int{"a": 1}},
		{"complete", map[string][]filter.Cluster{"a": {D}}, true, map[string]filter.Cluster{"a": D}, nil},
		{"migrating", map[string][]filter.Cluster{"a": {N}}, true, map[string]filter.Cluster{"a": N}, nil},
		{"source without a lease", map[string][]filter.Cluster{"a": {S}}, false, map[string]filter.Cluster{"a": N}, nil},
		{"complete without a lease", map[string][]filter.Cluster{"a": {D}}, false, map[string]filter.Cluster{"a": D}, nil},
		{"moved to MIGRATING between count and confirm", map[string][]filter.Cluster{"a": {S, N}}, true, map[string]filter.Cluster{"a": N}, nil},
		{"moved to COMPLETE between count and confirm", map[string][]filter.Cluster{"a": {S, D}}, true, map[string]filter.Cluster{"a": D}, nil},
		{"two topics, two clusters", map[string][]filter.Cluster{"a": {S}, "b": {D}}, true,
			map[string]filter.Cluster{"a": S, "b": D}, map[string]int{"a": 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var n counter
			f, err := route.New(route.Config{Table: &table{answers: c.answers}, Lease: lease(c.lease), InFlight: &n})
			if err != nil {
				t.Fatal(err)
			}
			topics := map[string][]int32{}
			for tp := range c.want {
				topics[tp] = []int32{0, 1}
			}
			x := produce(topics)
			if st := f.New(filter.ConnInfo{}).(filter.RequestFilter).OnRequest(context.Background(), x); st != filter.Continue {
				t.Fatalf("status %v, want Continue", st)
			}
			for _, p := range x.Parts() {
				if p.To != c.want[p.Topic] {
					t.Errorf("%s/%d goes to %v, want %v", p.Topic, p.Partition, p.To, c.want[p.Topic])
				}
				if refused := p.Answered && p.Code == route.Retriable; refused != (c.want[p.Topic] == N) {
					t.Errorf("%s/%d: answered %v code %d", p.Topic, p.Partition, p.Answered, p.Code)
				}
			}
			for tp := range c.want {
				if got := n.get(tp); got != c.counted[tp] {
					t.Errorf("topic %s counted %d in flight, want %d", tp, got, c.counted[tp])
				}
			}
		})
	}
}

func TestNewRefusesNoTable(t *testing.T) {
	t.Parallel()
	if _, err := route.New(route.Config{}); !errors.Is(err, route.ErrBadConfig) {
		t.Fatalf("New without a Table: %v, want ErrBadConfig", err)
	}
}

// via is a test Handler's upstream connection.
type via struct {
	id   int
	dead *atomic.Bool
}

func (v via) Cluster() filter.Cluster { return filter.Source }
func (v via) Dead() bool              { return v.dead.Load() }

// handler sends each unanswered part on a new connection unless the plan
// names one, records what it saw, and answers each request when told.
type handler struct {
	mu      sync.Mutex
	next    int
	seen    map[int32]filter.Via // by sequence of the batch, as dispatched
	refused map[int32]bool
	answers map[int32]chan int16
}

func newHandler() *handler {
	return &handler{seen: map[int32]filter.Via{}, refused: map[int32]bool{}, answers: map[int32]chan int16{}}
}

func (h *handler) answer(seq int32) chan int16 {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.answers[seq]
	if ch == nil {
		ch = make(chan int16, 1)
		h.answers[seq] = ch
	}
	return ch
}

func (h *handler) Dispatch(_ context.Context, x *filter.Exchange) filter.Pending {
	parts := x.Parts()
	p := &parts[0]
	pr, _ := recordbatch.ReadProducer(p.Records)
	seq := pr.BaseSeq
	h.mu.Lock()
	if p.Answered {
		h.refused[seq] = true
	} else {
		if p.Via == nil {
			h.next++
			p.Via = via{id: h.next, dead: new(atomic.Bool)}
		}
		h.seen[seq] = p.Via
	}
	h.mu.Unlock()
	ch := h.answer(seq)
	return pendingFunc(func(context.Context) error {
		code := p.Code
		if !p.Answered {
			code = <-ch
		}
		resp := kmsg.NewPtrProduceResponse()
		rp := kmsg.NewProduceResponseTopicPartition()
		rp.ErrorCode = code
		resp.Topics = []kmsg.ProduceResponseTopic{{Topic: "a", Partitions: []kmsg.ProduceResponseTopicPartition{rp}}}
		x.Resp = resp
		return nil
	})
}

type pendingFunc func(context.Context) error

func (f pendingFunc) Wait(ctx context.Context) error { return f(ctx) }

func one(seq int32) *filter.Exchange {
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.Topics = []kmsg.ProduceRequestTopic{{Topic: "a", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: batch(seq)}}}}
	return &filter.Exchange{Req: req}
}

// TestPipelinedOrder follows one connection's pipelined batches of one
// partition: a batch sent while an earlier one is outstanding goes the
// same way; once the earlier one is answered retriable, the batches after
// it are refused until its resend, which goes a new way. Answers come on
// the response side, as the connection's writer runs it.
func TestPipelinedOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, err := route.New(route.Config{Table: &table{}})
	if err != nil {
		t.Fatal(err)
	}
	h := newHandler()
	c := filter.NewChain(filter.ConnInfo{}, []filter.Factory{f}, h)

	s0 := c.Request(ctx, one(0))
	s1 := c.Request(ctx, one(1)) // pipelined behind 0: follows it
	if h.seen[1] != h.seen[0] {
		t.Fatalf("batch 1 went %v while batch 0, outstanding, went %v", h.seen[1], h.seen[0])
	}
	h.answer(0) <- kerr.NotLeaderForPartition.Code
	c.Response(ctx, s0)
	s2 := c.Request(ctx, one(2)) // after the gap at 0: refused unsent
	if !h.refused[2] {
		t.Fatalf("batch 2, after batch 0 failed, was dispatched via %v", h.seen[2])
	}
	h.answer(1) <- kerr.NotLeaderForPartition.Code
	c.Response(ctx, s1)
	c.Response(ctx, s2)
	s0b := c.Request(ctx, one(0)) // the resend: nothing outstanding, a new way
	if h.refused[0] || h.seen[0] == nil {
		t.Fatal("the resend of batch 0 was refused")
	}
	if old := h.seen[1]; h.seen[0] == old {
		t.Fatalf("the resend went the old way %v, with nothing outstanding there", old)
	}
	h.answer(0) <- 0
	c.Response(ctx, s0b)
}

// TestDeadConnectionRefusesFollowers: a batch whose partition's
// outstanding requests went on a connection that died is refused unsent:
// on a new connection it would overtake their resend.
func TestDeadConnectionRefusesFollowers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, err := route.New(route.Config{Table: &table{}})
	if err != nil {
		t.Fatal(err)
	}
	h := newHandler()
	c := filter.NewChain(filter.ConnInfo{}, []filter.Factory{f}, h)
	s0 := c.Request(ctx, one(0))
	h.seen[0].(via).dead.Store(true)
	s1 := c.Request(ctx, one(1))
	if !h.refused[1] {
		t.Fatalf("batch 1 was dispatched via %v, behind batch 0 in doubt on a dead connection", h.seen[1])
	}
	h.answer(0) <- kerr.NotLeaderForPartition.Code
	c.Response(ctx, s0)
	c.Response(ctx, s1)
}

// TestOutstandingOrGapNeverNeither races a request's answer against the
// connection's next request, many times: the next batch is either sent
// the way of the outstanding one, or refused for its gap; never sent a new
// way while the earlier one's fate is open.
func TestOutstandingOrGapNeverNeither(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for i := range 500 {
		f, err := route.New(route.Config{Table: &table{}})
		if err != nil {
			t.Fatal(err)
		}
		h := newHandler()
		c := filter.NewChain(filter.ConnInfo{}, []filter.Factory{f}, h)
		s0 := c.Request(ctx, one(0))
		h.answer(0) <- kerr.NotLeaderForPartition.Code
		done := make(chan struct{})
		go func() { defer close(done); c.Response(ctx, s0) }()
		s1 := c.Request(ctx, one(1))
		<-done
		h.mu.Lock()
		followed, refused := h.seen[1] != nil && h.seen[1] == h.seen[0], h.refused[1]
		h.mu.Unlock()
		if !followed && !refused {
			t.Fatalf("round %d: batch 1 went %v, batch 0 went %v and failed: neither followed nor refused", i, h.seen[1], h.seen[0])
		}
		if !refused {
			h.answer(1) <- kerr.NotLeaderForPartition.Code
		}
		c.Response(ctx, s1)
	}
}

// TestPrePlannedPartsAreRouted: a filter before route (the listener's
// filters come first in the agent's chain, and Part.To is a plan field any
// filter may write) that set a part's To must not let the part skip
// route's decision. route only looks up parts still at Nowhere, so a part
// pre-planned to the source goes there uncounted, without a lease, or
// while its topic is MIGRATING or COMPLETE, and one pre-planned to the
// destination goes there in PROXY. The uncounted case also breaks the
// count the Handler ends: the router ends one count for every topic with a
// part bound for the source, so it ends one route never took, and the
// topic's drain can be reported while another request to it is still
// outstanding at the source.
func TestPrePlannedPartsAreRouted(t *testing.T) {
	t.Parallel()
	S, D, N := filter.Source, filter.Destination, filter.Nowhere
	cases := []struct {
		name    string
		planned filter.Cluster // To as an earlier filter left it
		table   filter.Cluster
		lease   bool
		want    filter.Cluster
		counted int
	}{
		{"source, counted", S, S, true, S, 1},
		{"source without a lease", S, S, false, N, 0},
		{"source while MIGRATING", S, N, true, N, 0},
		{"source once COMPLETE", S, D, true, D, 0},
		{"destination in PROXY", D, S, true, S, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var n counter
			f, err := route.New(route.Config{Table: &table{answers: map[string][]filter.Cluster{"a": {c.table}}},
				Lease: lease(c.lease), InFlight: &n})
			if err != nil {
				t.Fatal(err)
			}
			x := produce(map[string][]int32{"a": {0}})
			x.Parts()[0].To = c.planned
			f.New(filter.ConnInfo{}).(filter.RequestFilter).OnRequest(context.Background(), x)
			p := x.Parts()[0]
			if p.To != c.want || (c.want == N) != (p.Answered && p.Code == route.Retriable) {
				t.Errorf("part planned %v, table %v, lease %v: goes to %v (answered %v), want %v", c.planned, c.table, c.lease, p.To, p.Answered, c.want)
			}
			if got := n.get("a"); got != c.counted {
				t.Errorf("counted %d in flight, want %d", got, c.counted)
			}
		})
	}
}
