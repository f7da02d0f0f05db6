package hold_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/hold"
)

// routes is a route table the test changes: a topic in waiting must wait,
// and every change fires the channel Changed handed out.
type routes struct {
	mu      sync.Mutex
	waiting map[string]time.Duration // topic -> its hold max
	changed chan struct{}
	asked   atomic.Int64 // Wait calls
}

var _ hold.Topics = (*routes)(nil)

func newRoutes(waiting map[string]time.Duration) *routes {
	return &routes{waiting: waiting, changed: make(chan struct{})}
}

func (r *routes) Wait(topic string) (bool, time.Duration) {
	r.asked.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.waiting[topic]
	return ok, m
}

func (r *routes) Changed() []<-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return []<-chan struct{}{r.changed, nil}
}

// release lets topic's produce on, as a route change out of MIGRATING does.
func (r *routes) release(topic string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.waiting, topic)
	close(r.changed)
	r.changed = make(chan struct{})
}

type gauge struct{ n atomic.Int64 }

func (g *gauge) Inc() { g.n.Add(1) }
func (g *gauge) Dec() { g.n.Add(-1) }

// broker is the chain's Handler: it records the order requests reached
// it, by correlation id, and answers each.
type broker struct {
	mu  sync.Mutex
	got []int32
}

func (b *broker) Dispatch(_ context.Context, x *filter.Exchange) filter.Pending {
	b.mu.Lock()
	b.got = append(b.got, x.Header.CorrelationID)
	b.mu.Unlock()
	x.RawResp = []byte{byte(x.Header.CorrelationID)}
	return filter.Done{}
}

func (b *broker) dispatched() []int32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int32(nil), b.got...)
}

func produce(id int32, topics ...string) *filter.Exchange {
	req := kmsg.NewPtrProduceRequest()
	for _, t := range topics {
		req.Topics = append(req.Topics, kmsg.ProduceRequestTopic{Topic: t})
	}
	return &filter.Exchange{Header: filter.Header{APIKey: 0, APIVersion: 9, CorrelationID: id}, Req: req, Received: time.Now()}
}

func metadata(id int32) *filter.Exchange {
	return &filter.Exchange{Header: filter.Header{APIKey: 3, APIVersion: 12, CorrelationID: id}, Req: kmsg.NewPtrMetadataRequest(), Received: time.Now()}
}

// TestHold: a produce to a waiting topic is held until its route changes
// (or its hold max passes, or the connection closes); the requests
// pipelined behind it wait behind it, and every response comes back in
// request order.
func TestHold(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		waiting map[string]time.Duration // at arrival
		gated   func(x *filter.Exchange) bool
		first   *filter.Exchange
		then    string // while held: "release", "close", or "" (the hold max passes)
		// want is the order requests reached the Handler; ErrClosed when
		// none did.
		want []int32
	}{
		{name: "a produce to a topic that need not wait goes on", waiting: map[string]time.Duration{"other": time.Hour},
			first: produce(1, "orders"), want: []int32{1, 2, 3}},
		{name: "a request other than produce goes on", waiting: map[string]time.Duration{"orders": time.Hour},
			first: metadata(1), want: []int32{1, 2, 3}},
		{name: "held until the route changes, then on in order", waiting: map[string]time.Duration{"orders": time.Hour},
			first: produce(1, "orders"), then: "release", want: []int32{1, 2, 3}},
		{name: "one waiting topic of two holds the request", waiting: map[string]time.Duration{"orders": time.Hour},
			first: produce(1, "clicks", "orders"), then: "release", want: []int32{1, 2, 3}},
		{name: "held until the hold max passes, then on for the Handler to answer", waiting: map[string]time.Duration{"orders": 20 * time.Millisecond},
			first: produce(1, "orders"), want: []int32{1, 2, 3}},
		{name: "the shortest hold max of the waiting topics counts", waiting: map[string]time.Duration{"orders": time.Hour, "clicks": 20 * time.Millisecond},
			first: produce(1, "orders", "clicks"), want: []int32{1, 2, 3}},
		{name: "a produce Gated leaves out goes on", waiting: map[string]time.Duration{"orders": time.Hour},
			gated: func(x *filter.Exchange) bool { return x.Header.CorrelationID != 1 },
			first: produce(1, "orders"), want: []int32{1, 2, 3}},
		{name: "a produce Gated keeps is held", waiting: map[string]time.Duration{"orders": time.Hour},
			gated: func(x *filter.Exchange) bool { return x.Header.CorrelationID == 1 },
			first: produce(1, "orders"), then: "release", want: []int32{1, 2, 3}},
		{name: "a closed connection ends the hold", waiting: map[string]time.Duration{"orders": time.Hour},
			first: produce(1, "orders"), then: "close"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rt := newRoutes(tt.waiting)
			held := &gauge{}
			f, err := hold.New(hold.Config{Topics: rt, Held: held, Gated: tt.gated})
			if err != nil {
				t.Fatal(err)
			}
			b := &broker{}
			c := filter.NewChain(filter.ConnInfo{}, []filter.Factory{f}, b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()

			// Pipelined: a produce to a topic that need not wait and a
			// metadata request, sent behind the first.
			xs := []*filter.Exchange{tt.first, produce(2, "clicks-2"), metadata(3)}
			var started []*filter.Started
			for _, x := range xs {
				started = append(started, c.Request(ctx, x))
			}
			if tt.then != "" {
				// Held: nothing reached the Handler, not even the requests
				// behind it, and the wait is on the route, not a clock.
				if got := b.dispatched(); len(got) != 0 {
					t.Fatalf("dispatched %v while the first was held", got)
				}
				if n := held.n.Load(); n != 1 {
					t.Fatalf("held gauge %d while held, want 1", n)
				}
			}
			switch tt.then {
			case "release":
				for topic := range tt.waiting {
					rt.release(topic)
				}
			case "close":
				cancel()
			}
			for i, s := range started {
				c.Response(ctx, s)
				x := s.X
				if tt.then == "close" {
					if !errors.Is(x.Err, filter.ErrClosed) {
						t.Errorf("request %d after the close: err %v, want ErrClosed", i+1, x.Err)
					}
					continue
				}
				if x.Err != nil || len(x.RawResp) != 1 || int32(x.RawResp[0]) != x.Header.CorrelationID {
					t.Errorf("response %d: %v (err %v), want the answer to correlation id %d", i+1, x.RawResp, x.Err, x.Header.CorrelationID)
				}
			}
			if got := b.dispatched(); !slices.Equal(got, tt.want) {
				t.Errorf("dispatched %v, want %v", got, tt.want)
			}
			if n := held.n.Load(); n != 0 {
				t.Errorf("held gauge %d after the requests ended, want 0", n)
			}
		})
	}
}

// TestHotPathAsksOnce: a produce that need not wait costs one Wait per
// topic and takes no channel.
func TestHotPathAsksOnce(t *testing.T) {
	t.Parallel()
	rt := newRoutes(nil)
	f, err := hold.New(hold.Config{Topics: rt})
	if err != nil {
		t.Fatal(err)
	}
	c := filter.NewChain(filter.ConnInfo{}, []filter.Factory{f}, &broker{})
	ctx := context.Background()
	c.Response(ctx, c.Request(ctx, produce(1, "a", "b")))
	if n := rt.asked.Load(); n != 2 {
		t.Errorf("Wait asked %d times for a two-topic produce, want 2", n)
	}
}

func TestNewNeedsTopics(t *testing.T) {
	t.Parallel()
	if _, err := hold.New(hold.Config{}); !errors.Is(err, hold.ErrBadConfig) {
		t.Fatalf("New without Topics: %v, want ErrBadConfig", err)
	}
}
