package filter_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/internal/wait"
)

// routeTable is a simulated route table: one state, and a channel closed
// at every change, as the agent's route table wakes what it holds.
type routeTable struct {
	mu      sync.Mutex
	state   string
	changed chan struct{}
}

func newRouteTable(state string) *routeTable {
	return &routeTable{state: state, changed: make(chan struct{})}
}

func (r *routeTable) lookup() (string, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state, r.changed
}

func (r *routeTable) set(state string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state = state
	close(r.changed)
	r.changed = make(chan struct{})
}

// events is a log the request side (which may run on the chain's own
// goroutine) and the test read concurrently.
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.log = append(e.log, fmt.Sprintf(format, args...))
}

func (e *events) get() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.log)
}

var errRefused = errors.New("refused by the route")

// gate holds the requests whose correlation id it is told to while the
// route is MIGRATING, and decides by the route once woken: COMPLETE
// continues, REJECT answers, FAIL fails.
type gate struct {
	routes *routeTable
	hold   map[int32]bool
	ev     *events
	// watched, when set, gets a value from a goroutine of the filter's own
	// that returns once the wait it watched ended.
	watched chan int32
}

var (
	_ filter.Factory        = (*gate)(nil)
	_ filter.RequestFilter  = (*gate)(nil)
	_ filter.ResponseFilter = (*gate)(nil)
)

func (g *gate) Name() string            { return "gate" }
func (g *gate) New(filter.ConnInfo) any { return g }

func (g *gate) OnRequest(_ context.Context, x *filter.Exchange) filter.Status {
	id := x.Header.CorrelationID
	if !g.hold[id] {
		g.ev.add("req:gate:%d", id)
		return filter.Continue
	}
	state, changed := g.routes.lookup()
	g.ev.add("req:gate:%d:%s", id, state)
	switch state {
	case "MIGRATING":
		w := x.Hold()
		w.WakeOn(changed)
		if g.watched != nil {
			go func() { <-w.Done(); g.watched <- id }()
		}
		return filter.Hold
	case "REJECT":
		x.Resp = kmsg.NewPtrProduceResponse()
		return filter.StopIteration
	case "FAIL":
		x.Err = errRefused
		return filter.StopIteration
	}
	return filter.Continue
}

func (g *gate) OnResponse(_ context.Context, x *filter.Exchange) filter.Status {
	g.ev.add("resp:gate:%d", x.Header.CorrelationID)
	return filter.Continue
}

// tap logs both directions; it sits around the gate.
type tap struct {
	name string
	ev   *events
}

func (t tap) Name() string            { return t.name }
func (t tap) New(filter.ConnInfo) any { return t }
func (t tap) OnRequest(_ context.Context, x *filter.Exchange) filter.Status {
	t.ev.add("req:%s:%d", t.name, x.Header.CorrelationID)
	return filter.Continue
}
func (t tap) OnResponse(_ context.Context, x *filter.Exchange) filter.Status {
	t.ev.add("resp:%s:%d", t.name, x.Header.CorrelationID)
	return filter.Continue
}

// upstream is the chain's Handler: it logs what it dispatches, in order.
type upstream struct{ ev *events }

func (u upstream) Dispatch(_ context.Context, x *filter.Exchange) filter.Pending {
	u.ev.add("dispatch:%d", x.Header.CorrelationID)
	x.RawResp = []byte{1}
	return filter.Done{}
}

// pipe is a client connection as the agent serves one: requests go
// through Request in order, a writer goroutine runs Response for each in
// the same order and logs what it would write.
type pipe struct {
	chain   *filter.Chain
	queue   chan *filter.Started
	written *events
	done    chan struct{}
	closed  sync.Once
}

func newPipe(ctx context.Context, t *testing.T, fs []filter.Factory, h filter.Handler) *pipe {
	p := &pipe{
		chain:   filter.NewChain(filter.ConnInfo{}, fs, h),
		queue:   make(chan *filter.Started, 16),
		written: &events{},
		done:    make(chan struct{}),
	}
	go func() {
		defer close(p.done)
		for s := range p.queue {
			p.chain.Response(ctx, s)
			if s.X.Err != nil {
				p.written.add("%d:err:%v", s.X.Header.CorrelationID, s.X.Err)
				continue
			}
			p.written.add("%d", s.X.Header.CorrelationID)
		}
	}()
	t.Cleanup(func() { p.close() })
	return p
}

func (p *pipe) send(ctx context.Context, ids ...int32) {
	for _, id := range ids {
		p.queue <- p.chain.Request(ctx, &filter.Exchange{Header: filter.Header{CorrelationID: id}})
	}
}

// close ends the connection's reading side and waits for its writer.
func (p *pipe) close() {
	p.closed.Do(func() { close(p.queue) })
	<-p.done
}

// only returns the entries of log that start with prefix.
func only(log []string, prefix string) []string {
	var out []string
	for _, e := range log {
		if strings.HasPrefix(e, prefix) {
			out = append(out, e)
		}
	}
	return out
}

// waitLog waits until got() equals want.
func waitLog(t *testing.T, what string, got func() []string, want []string) {
	t.Helper()
	wait.For(t, 10*time.Second, what, func() string {
		if g := got(); !reflect.DeepEqual(g, want) {
			return fmt.Sprintf("got %q, want %q", g, want)
		}
		return ""
	})
}

func TestHeldRequestIsDecidedWhenWoken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		route   string // what the route changes to
		want    []string
		written string
	}{
		{
			name:  "resumed: the next filter and the handler run",
			route: "COMPLETE",
			want: []string{"req:a:1", "req:gate:1:MIGRATING", "req:gate:1:COMPLETE", "req:b:1", "dispatch:1",
				"resp:b:1", "resp:gate:1", "resp:a:1"},
			written: "1",
		},
		{
			name:    "answered: unwinds from the holding filter",
			route:   "REJECT",
			want:    []string{"req:a:1", "req:gate:1:MIGRATING", "req:gate:1:REJECT", "resp:gate:1", "resp:a:1"},
			written: "1",
		},
		{
			name:    "failed: the error reaches the response side",
			route:   "FAIL",
			want:    []string{"req:a:1", "req:gate:1:MIGRATING", "req:gate:1:FAIL", "resp:gate:1", "resp:a:1"},
			written: "1:err:" + errRefused.Error(),
		},
		{
			name:  "held again: still MIGRATING after a change, then resumed",
			route: "MIGRATING",
			want: []string{"req:a:1", "req:gate:1:MIGRATING", "req:gate:1:MIGRATING", "req:gate:1:COMPLETE", "req:b:1", "dispatch:1",
				"resp:b:1", "resp:gate:1", "resp:a:1"},
			written: "1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ev := &events{}
			routes := newRouteTable("MIGRATING")
			g := &gate{routes: routes, hold: map[int32]bool{1: true}, ev: ev}
			p := newPipe(ctx, t, []filter.Factory{tap{"a", ev}, g, tap{"b", ev}}, upstream{ev})
			p.send(ctx, 1)
			if got, want := ev.get(), []string{"req:a:1", "req:gate:1:MIGRATING"}; !reflect.DeepEqual(got, want) {
				t.Fatalf("before the route changed: %q, want %q", got, want)
			}
			routes.set(tt.route)
			if tt.route == "MIGRATING" {
				waitLog(t, "the gate looks again", ev.get, tt.want[:3])
				routes.set("COMPLETE")
			}
			waitLog(t, "the response written", p.written.get, []string{tt.written})
			p.close()
			if got := ev.get(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("calls %q, want %q", got, tt.want)
			}
			wait.For(t, 10*time.Second, "the chain's goroutines return", func() string {
				if n := filter.Live(p.chain); n != 0 {
					return fmt.Sprintf("%d live", n)
				}
				return ""
			})
		})
	}
}

func TestHeldRequestKeepsOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		held []int32 // of requests 1..4, pipelined
	}{
		{name: "first held", held: []int32{1}},
		{name: "first and third held", held: []int32{1, 3}},
		{name: "second held", held: []int32{2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ev := &events{}
			routes := newRouteTable("MIGRATING")
			g := &gate{routes: routes, hold: map[int32]bool{}, ev: &events{}}
			for _, id := range tt.held {
				g.hold[id] = true
			}
			dispatched := &events{}
			p := newPipe(ctx, t, []filter.Factory{tap{"a", ev}, g}, upstream{dispatched})
			p.send(ctx, 1, 2, 3, 4)

			// Nothing from the first held request on has entered the chain,
			// been dispatched or been answered: it all waits behind it.
			first := tt.held[0]
			var before, entered []string
			for id := int32(1); id < first; id++ {
				before = append(before, fmt.Sprint(id))
				entered = append(entered, fmt.Sprintf("req:a:%d", id))
			}
			entered = append(entered, fmt.Sprintf("req:a:%d", first))
			waitLog(t, "the requests before the held one answered", p.written.get, before)
			if got := only(ev.get(), "req:"); !reflect.DeepEqual(got, entered) {
				t.Errorf("entered the chain while held: %q, want %q", got, entered)
			}
			var want []string
			for id := int32(1); id < first; id++ {
				want = append(want, fmt.Sprintf("dispatch:%d", id))
			}
			if got := dispatched.get(); !reflect.DeepEqual(got, want) {
				t.Errorf("dispatched while held: %q, want %q", got, want)
			}

			routes.set("COMPLETE")
			waitLog(t, "every response, in request order", p.written.get, []string{"1", "2", "3", "4"})
			if got, want := dispatched.get(), []string{"dispatch:1", "dispatch:2", "dispatch:3", "dispatch:4"}; !reflect.DeepEqual(got, want) {
				t.Errorf("dispatched %q, want %q", got, want)
			}
			if got, want := only(ev.get(), "req:"), []string{"req:a:1", "req:a:2", "req:a:3", "req:a:4"}; !reflect.DeepEqual(got, want) {
				t.Errorf("request filter calls %q, want %q", got, want)
			}
			if got, want := only(ev.get(), "resp:"), []string{"resp:a:1", "resp:a:2", "resp:a:3", "resp:a:4"}; !reflect.DeepEqual(got, want) {
				t.Errorf("response filter calls %q, want %q", got, want)
			}
		})
	}
}

func TestHeldRequestEndsWhenConnectionCloses(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ev := &events{}
	g := &gate{routes: newRouteTable("MIGRATING"), hold: map[int32]bool{1: true}, ev: ev, watched: make(chan int32, 1)}
	dispatched := &events{}
	p := newPipe(ctx, t, []filter.Factory{tap{"a", ev}, g}, upstream{dispatched})
	p.send(ctx, 1, 2, 3)

	cancel() // the client went away
	closed := fmt.Sprintf("err:%v: %v", filter.ErrClosed, context.Canceled)
	waitLog(t, "every request ended", p.written.get, []string{"1:" + closed, "2:" + closed, "3:" + closed})
	p.close()
	if got := <-g.watched; got != 1 {
		t.Errorf("the filter's goroutine watched request %d, want 1", got)
	}
	// Request 1 unwinds from the gate; 2 and 3 never reached a filter.
	want := []string{"req:a:1", "req:gate:1:MIGRATING", "resp:gate:1", "resp:a:1"}
	if got := ev.get(); !reflect.DeepEqual(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
	if got := dispatched.get(); len(got) != 0 {
		t.Errorf("dispatched after the connection closed: %q", got)
	}
	wait.For(t, 10*time.Second, "the chain's goroutines return", func() string {
		if n := filter.Live(p.chain); n != 0 {
			return fmt.Sprintf("%d live", n)
		}
		return ""
	})
}

// misuse takes a Waker or not, and returns what it is told to.
type misuse struct {
	take   bool
	status filter.Status
	waker  chan *filter.Waker
	ended  atomic.Bool // set by the waker's OnDone
}

func (m *misuse) Name() string            { return "misuse" }
func (m *misuse) New(filter.ConnInfo) any { return m }
func (m *misuse) OnRequest(_ context.Context, x *filter.Exchange) filter.Status {
	if m.take {
		w := x.Hold()
		w.WakeAt(time.Now().Add(time.Hour))
		w.OnDone(func() { m.ended.Store(true) })
		m.waker <- w
	}
	x.RawResp = []byte{1}
	return m.status
}

func TestHoldMisuse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		take    bool
		status  filter.Status
		wantErr error
	}{
		{name: "hold without a waker fails", status: filter.Hold, wantErr: filter.ErrNoWaker},
		{name: "a waker taken then continued ends", take: true, status: filter.Continue},
		{name: "a waker taken then answered ends", take: true, status: filter.StopIteration},
		{name: "an unknown status fails", status: filter.Status(42), wantErr: filter.ErrBadStatus},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := &misuse{take: tt.take, status: tt.status, waker: make(chan *filter.Waker, 1)}
			var log []string
			c := filter.NewChain(filter.ConnInfo{}, []filter.Factory{m}, handler{log: &log})
			x := &filter.Exchange{}
			c.Response(context.Background(), c.Request(context.Background(), x))
			if !errors.Is(x.Err, tt.wantErr) || (tt.wantErr == nil && x.Err != nil) {
				t.Errorf("exchange error %v, want %v", x.Err, tt.wantErr)
			}
			if tt.take {
				select {
				case <-(<-m.waker).Done():
				default:
					t.Error("the waker of a request not held did not end")
				}
				if !m.ended.Load() {
					t.Error("the waker's OnDone did not run")
				}
			}
		})
	}
}
