package leasegate_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/leasegate"
)

// lease is a lease the test grants: Valid turns true and Renewed fires.
type lease struct {
	mu      sync.Mutex
	valid   bool
	renewed chan struct{}
}

var _ leasegate.Lease = (*lease)(nil)

func newLease(valid bool) *lease { return &lease{valid: valid, renewed: make(chan struct{})} }

func (l *lease) Valid() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.valid
}

func (l *lease) Renewed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewed
}

func (l *lease) grant() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.valid = true
	close(l.renewed)
	l.renewed = make(chan struct{})
}

// gauge is a filter.Gauge.
type gauge struct{ n atomic.Int64 }

func (g *gauge) Inc() { g.n.Add(1) }
func (g *gauge) Dec() { g.n.Add(-1) }

// source is the chain's Handler: it counts what reached it.
type source struct{ got atomic.Int64 }

func (s *source) Dispatch(_ context.Context, x *filter.Exchange) filter.Pending {
	s.got.Add(1)
	x.RawResp = []byte{1}
	return filter.Done{}
}

func exchange(req kmsg.Request) *filter.Exchange {
	return &filter.Exchange{Header: filter.Header{APIKey: req.Key(), APIVersion: req.GetVersion()}, Req: req, Received: time.Now()}
}

func txnInit() kmsg.Request {
	r := kmsg.NewPtrInitProducerIDRequest()
	r.TransactionalID = kmsg.StringPtr("t")
	return r
}

func TestGate(t *testing.T) {
	t.Parallel()
	errRefused := kmsg.NewPtrOffsetCommitResponse()
	tests := []struct {
		name   string
		req    kmsg.Request
		valid  bool   // the lease at arrival
		then   string // "grant", "expire" (HoldMax passes) or "close" (the connection), while held
		refuse bool   // a Refuse that answers instead of failing
		// want: "dispatched", "answered", ErrNoLease or ErrClosed.
		want string
	}{
		{name: "a write under a lease goes on", req: kmsg.NewPtrOffsetCommitRequest(), valid: true, want: "dispatched"},
		{name: "a read needs no lease", req: kmsg.NewPtrMetadataRequest(), want: "dispatched"},
		{name: "produce is the router's to gate", req: kmsg.NewPtrProduceRequest(), want: "dispatched"},
		{name: "an idempotent InitProducerId needs no lease", req: kmsg.NewPtrInitProducerIDRequest(), want: "dispatched"},
		{name: "a write is held, then let on when the lease comes", req: kmsg.NewPtrOffsetCommitRequest(), then: "grant", want: "dispatched"},
		{name: "a transactional InitProducerId is held too", req: txnInit(), then: "grant", want: "dispatched"},
		{name: "no lease within HoldMax fails the write", req: kmsg.NewPtrCreateTopicsRequest(), then: "expire", want: "ErrNoLease"},
		{name: "no lease within HoldMax, answered by Refuse", req: kmsg.NewPtrOffsetCommitRequest(), then: "expire", refuse: true, want: "answered"},
		{name: "a closed connection ends the hold", req: kmsg.NewPtrEndTxnRequest(), then: "close", want: "ErrClosed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := newLease(tt.valid)
			held := &gauge{}
			cfg := leasegate.Config{Lease: l, Held: held, HoldMax: time.Hour}
			if tt.then == "expire" {
				cfg.HoldMax = 20 * time.Millisecond
			}
			if tt.refuse {
				cfg.Refuse = func(x *filter.Exchange, err error) {
					if !errors.Is(err, leasegate.ErrNoLease) {
						t.Errorf("Refuse got %v, want ErrNoLease", err)
					}
					x.Resp = errRefused
				}
			}
			f, err := leasegate.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			src := &source{}
			c := filter.NewChain(filter.ConnInfo{}, []filter.Factory{f}, src)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			x := exchange(tt.req)
			s := c.Request(ctx, x)

			if tt.then == "grant" || tt.then == "close" {
				// Held: nothing reached the source yet, and it waits for
				// the lease rather than a clock.
				if n := src.got.Load(); n != 0 {
					t.Fatalf("dispatched %d before the lease", n)
				}
				if n := held.n.Load(); n != 1 {
					t.Fatalf("held gauge %d while held, want 1", n)
				}
			}
			switch tt.then {
			case "grant":
				l.grant()
			case "close":
				cancel()
			}
			c.Response(ctx, s)

			var got string
			switch {
			case errors.Is(x.Err, leasegate.ErrNoLease):
				got = "ErrNoLease"
			case errors.Is(x.Err, filter.ErrClosed):
				got = "ErrClosed"
			case x.Err != nil:
				got = x.Err.Error()
			case x.Resp == errRefused:
				got = "answered"
			case src.got.Load() == 1:
				got = "dispatched"
			}
			if got != tt.want {
				t.Errorf("got %s (err %v), want %s", got, x.Err, tt.want)
			}
			// The wait ended (and with it the goroutine watching the lease).
			if n := held.n.Load(); n != 0 {
				t.Errorf("held gauge %d after the request ended, want 0", n)
			}
		})
	}
}

func TestNewNeedsALease(t *testing.T) {
	t.Parallel()
	if _, err := leasegate.New(leasegate.Config{}); !errors.Is(err, leasegate.ErrBadConfig) {
		t.Fatalf("New without a lease: %v, want ErrBadConfig", err)
	}
}
