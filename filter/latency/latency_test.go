package latency_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/latency"
)

// topics is a route table the test changes: a topic in on is emulated
// with its profile, and every change fires the channel Changed handed out.
type topics struct {
	mu      sync.Mutex
	on      map[string]latency.Profile
	changed chan struct{}
	asked   atomic.Int64
}

var _ latency.Topics = (*topics)(nil)

func newTopics(on map[string]latency.Profile) *topics {
	return &topics{on: on, changed: make(chan struct{})}
}

func (r *topics) Emulate(topic string) (latency.Profile, bool) {
	r.asked.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.on[topic]
	return p, ok
}

func (r *topics) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// off stops emulating topic, as its route leaving PROXY does.
func (r *topics) off(topic string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.on, topic)
	close(r.changed)
	r.changed = make(chan struct{})
}

// source is the chain's Handler: it sends every part to the source (the
// route filter's plan, here) unless told where, and answers at once.
type source struct{ to filter.Cluster }

func (s source) Dispatch(_ context.Context, x *filter.Exchange) filter.Pending {
	to := s.to
	if to == filter.Nowhere {
		to = filter.Source
	}
	for i := range x.Parts() {
		x.Parts()[i].To = to
	}
	if req, ok := x.Req.(*kmsg.ProduceRequest); ok && req.Acks == 0 {
		x.NoResponse = true
		return filter.Done{}
	}
	x.RawResp = []byte{byte(x.Header.CorrelationID)}
	return filter.Done{}
}

func produce(id int32, acks int16, topics ...string) *filter.Exchange {
	req := kmsg.NewPtrProduceRequest()
	req.Acks = acks
	for _, t := range topics {
		req.Topics = append(req.Topics, kmsg.ProduceRequestTopic{Topic: t,
			Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0}, {Partition: 1}}})
	}
	return &filter.Exchange{Header: filter.Header{APIKey: 0, APIVersion: 9, CorrelationID: id}, Req: req, Received: time.Now()}
}

type observed struct {
	mu sync.Mutex
	v  []float64
}

func (o *observed) Observe(v float64) { o.mu.Lock(); o.v = append(o.v, v); o.mu.Unlock() }
func (o *observed) all() []float64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]float64(nil), o.v...)
}

// never is a latency no test waits for: a response held to it fails the
// test by not coming back within settle.
const (
	never  = time.Hour
	settle = 10 * time.Second
)

// respond runs the response side of s, as the agent's writer does, and
// reports whether it finished within settle.
func respond(c *filter.Chain, s *filter.Started) bool {
	done := make(chan struct{})
	go func() { defer close(done); c.Response(context.Background(), s) }()
	select {
	case <-done:
		return true
	case <-time.After(settle):
		return false
	}
}

// TestDelay: a produce answered by the source is held until its topic's
// target has passed since it arrived, only when the topic is emulated
// (in the agent: PROXY, emulation on, a profile), never when the source
// took longer itself, not for acks=0, and with the largest target of its
// topics.
func TestDelay(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	tests := []struct {
		name  string
		on    map[string]latency.Profile
		draw  float64
		max   time.Duration
		x     func() *filter.Exchange
		to    filter.Cluster
		atLea time.Duration // the response is held at least this long since arrival; 0: not held
	}{
		{name: "an emulated topic is held to its p50", on: map[string]latency.Profile{"orders": {P50: 200 * ms, P99: never}},
			x: func() *filter.Exchange { return produce(1, -1, "orders") }, atLea: 200 * ms},
		{name: "one in a hundred is held to its p99", on: map[string]latency.Profile{"orders": {P50: 10 * ms, P99: 300 * ms}},
			draw: 0.995, x: func() *filter.Exchange { return produce(1, -1, "orders") }, atLea: 300 * ms},
		{name: "a topic not emulated is not held", on: map[string]latency.Profile{"other": {P50: never, P99: never}},
			x: func() *filter.Exchange { return produce(1, -1, "orders") }},
		{name: "the largest target of the request's topics", draw: 0.2,
			on: map[string]latency.Profile{"a": {P50: 10 * ms, P99: 20 * ms}, "b": {P50: 250 * ms, P99: never}},
			x:  func() *filter.Exchange { return produce(1, 1, "a", "b") }, atLea: 250 * ms},
		{name: "the source took longer than the target: nothing added", on: map[string]latency.Profile{"orders": {P50: never, P99: never}},
			x: func() *filter.Exchange {
				x := produce(1, -1, "orders")
				x.Received = x.Received.Add(-2 * never) // the source answered two hours after it arrived
				return x
			}},
		{name: "acks=0 has no response to hold", on: map[string]latency.Profile{"orders": {P50: never, P99: never}},
			x: func() *filter.Exchange { return produce(1, 0, "orders") }},
		{name: "a produce sent to the destination is not held", on: map[string]latency.Profile{"orders": {P50: never, P99: never}},
			to: filter.Destination, x: func() *filter.Exchange { return produce(1, -1, "orders") }},
		{name: "a request other than produce is not held", on: map[string]latency.Profile{"orders": {P50: never, P99: never}},
			x: func() *filter.Exchange {
				return &filter.Exchange{Header: filter.Header{APIKey: 3, APIVersion: 12, CorrelationID: 1},
					Req: kmsg.NewPtrMetadataRequest(), Received: time.Now()}
			}},
		{name: "Max caps the target", on: map[string]latency.Profile{"orders": {P50: never, P99: never}}, max: 150 * ms,
			x: func() *filter.Exchange { return produce(1, -1, "orders") }, atLea: 150 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			added := &observed{}
			f, err := latency.New(latency.Config{Topics: newTopics(tt.on), Max: tt.max, Added: added,
				Draw: func() float64 { return tt.draw }})
			if err != nil {
				t.Fatal(err)
			}
			c := filter.NewChain(filter.ConnInfo{}, []filter.Factory{f}, source{to: tt.to})
			x := tt.x()
			if !respond(c, c.Request(context.Background(), x)) {
				t.Fatalf("the response was held for more than %v", settle)
			}
			took := time.Since(x.Received)
			if took < tt.atLea {
				t.Errorf("the response came %v after the request arrived, want at least %v", took, tt.atLea)
			}
			if x.Err != nil || (x.RawResp == nil && !x.NoResponse) {
				t.Errorf("the response is %v (err %v), want the source's answer", x.RawResp, x.Err)
			}
			if n := len(added.all()); (n == 1) != (tt.atLea > 0) || n > 1 {
				t.Errorf("%d delays observed, want one only when held", n)
			}
		})
	}
}

// TestPipelinedOrder: on one connection, responses are written in request
// order, a response not held itself waits behind a held one, and pipelined
// requests wait out their delays side by side: the third, sent with the
// first, is written a target after it arrived, not two.
func TestPipelinedOrder(t *testing.T) {
	t.Parallel()
	const target = time.Second
	added := &observed{}
	rt := newTopics(map[string]latency.Profile{"orders": {P50: target, P99: target}})
	f, err := latency.New(latency.Config{Topics: rt, Added: added})
	if err != nil {
		t.Fatal(err)
	}
	c := filter.NewChain(filter.ConnInfo{}, []filter.Factory{f}, source{})
	ctx := context.Background()
	xs := []*filter.Exchange{produce(1, -1, "orders"), produce(2, -1, "clicks"), produce(3, -1, "orders")}
	var started []*filter.Started
	for _, x := range xs {
		started = append(started, c.Request(ctx, x))
	}
	// The agent's writer: one goroutine, responses in order.
	var written []int32
	var at []time.Time
	for _, s := range started {
		if !respond(c, s) {
			t.Fatalf("response %d held for more than %v", s.X.Header.CorrelationID, settle)
		}
		written = append(written, s.X.Header.CorrelationID)
		at = append(at, time.Now())
	}
	if written[0] != 1 || written[1] != 2 || written[2] != 3 {
		t.Fatalf("written in the order %v, want 1 2 3", written)
	}
	for i := range xs {
		if min := xs[0].Received.Add(target); at[i].Before(min) {
			t.Errorf("response %d written %v after the first arrived, before the first's target %v", i+1,
				at[i].Sub(xs[0].Received), target)
		}
	}
	if own := xs[2].Received.Add(target); at[2].Before(own) {
		t.Errorf("response 3 written before its own target had passed since it arrived")
	}
	// Request 3 is held only for what is left of its own target once
	// request 1's ended (little or nothing: it arrived with request 1), so
	// the two delays together stay below two targets, which holding each
	// for its target in turn would reach.
	var sum float64
	for _, d := range added.all() {
		sum += d
	}
	if total := time.Duration(sum * float64(time.Second)); total >= 2*target {
		t.Errorf("delays added %v in all, want below two targets (%v): pipelined requests wait side by side", total, 2*target)
	}
}

// TestRouteChangeEndsDelay: a delay under way ends when its topic stops
// being emulated (its route left PROXY: a cutover must not wait for it).
func TestRouteChangeEndsDelay(t *testing.T) {
	t.Parallel()
	rt := newTopics(map[string]latency.Profile{"orders": {P50: never, P99: never}})
	f, err := latency.New(latency.Config{Topics: rt, Max: never})
	if err != nil {
		t.Fatal(err)
	}
	c := filter.NewChain(filter.ConnInfo{}, []filter.Factory{f}, source{})
	s := c.Request(context.Background(), produce(1, -1, "orders"))
	done := make(chan struct{})
	go func() { defer close(done); c.Response(context.Background(), s) }()
	deadline := time.Now().Add(settle)
	for rt.asked.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-done:
		t.Fatal("the response was not held")
	default:
	}
	rt.off("orders")
	select {
	case <-done:
	case <-time.After(settle):
		t.Fatalf("the response was still held %v after its topic stopped being emulated", settle)
	}
}

// Target follows p50 below the median, p99 from the 99th percentile, and
// rises between them without a jump; a p99 below p50 counts as p50.
func TestTarget(t *testing.T) {
	t.Parallel()
	p := latency.Profile{P50: 100 * time.Millisecond, P99: 500 * time.Millisecond}
	for _, tc := range []struct {
		u    float64
		want time.Duration
	}{{0, p.P50}, {0.3, p.P50}, {0.5, p.P50}, {0.99, p.P99}, {0.999, p.P99}} {
		if got := latency.Target(p, tc.u); got != tc.want {
			t.Errorf("Target at %v = %v, want %v", tc.u, got, tc.want)
		}
	}
	prev := p.P50
	for u := 0.5; u < 0.99; u += 0.001 {
		got := latency.Target(p, u)
		if got < prev || got > p.P99 {
			t.Fatalf("Target at %v = %v: not between %v and p99 %v", u, got, prev, p.P99)
		}
		prev = got
	}
	if near := latency.Target(p, math.Nextafter(0.99, 0)); p.P99-near > time.Millisecond {
		t.Errorf("Target just below 0.99 = %v, jumps to p99 %v", near, p.P99)
	}
	if got := latency.Target(latency.Profile{P50: time.Second, P99: time.Millisecond}, 0.995); got != time.Second {
		t.Errorf("Target with p99 below p50 = %v, want p50", got)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []latency.Config{{}, {Topics: newTopics(nil), Max: -1}} {
		if _, err := latency.New(cfg); !errors.Is(err, latency.ErrBadConfig) {
			t.Errorf("New(%+v): %v, want ErrBadConfig", cfg, err)
		}
	}
}
