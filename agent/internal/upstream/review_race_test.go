package upstream

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-kafka/baton/internal/saslfake"
)

// TestReviewRotationFailsRequestsInDoubt: requests sent through the pool
// while it rotates a connection for its SASL lifetime must be answered or
// not sent (ErrNotSent, retried on the new connection); none may be written
// on the retiring connection and then failed by its graceful close
// (errSessionEnded: ErrConnClosed, in doubt). A sender that took the old
// connection (conn) just before the rotation enqueues on it after
// retire/answered decided it was idle, and die closes it under the request.
func TestReviewRotationFailsRequestsInDoubt(t *testing.T) {
	b, err := saslfake.New([]string{"x"}, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	u := New(Config{Name: "source", Bootstrap: []string{b.Addr}, PoolSize: 1, DialTimeout: time.Second,
		ReadTimeout: 5 * time.Second, Security: Security{SASL: &saslfake.Mechanism{Steps: []string{"x"}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var inDoubt, ok atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	deadline := time.Now().Add(3 * time.Second)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				cl, err := u.Send(ctx, b.Addr, 0, 18, 0, nil, nil, true)
				if err != nil {
					continue // not sent: fine
				}
				if _, err := cl.Wait(ctx); err != nil {
					if errors.Is(err, errSessionEnded) {
						inDoubt.Add(1)
						firstErr.CompareAndSwap(nil, &err)
					}
					continue
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := inDoubt.Load(); n > 0 {
		t.Fatalf("%d of %d requests were written on a retiring connection and failed in doubt by its graceful close, e.g. %v", n, n+ok.Load(), *firstErr.Load())
	}
	t.Logf("%d answered", ok.Load())
}

// TestReviewExpiringSlotRedialsPerRequest: past retireAt, while the broker
// takes new connections but does not answer them (overloaded, auth backend
// slow), every request on the slot redials under dialMu and waits the whole
// DialTimeout before conn falls back to the old connection: the slot's
// requests are serialized one DialTimeout apart for the last tenth of the
// session.
func TestReviewExpiringSlotRedialsPerRequest(t *testing.T) {
	b, err := saslfake.New([]string{"x"}, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const dialTO = 70 * time.Millisecond
	u := New(Config{Name: "source", Bootstrap: []string{b.Addr}, PoolSize: 1, DialTimeout: dialTO,
		ReadTimeout: 5 * time.Second, Security: Security{SASL: &saslfake.Mechanism{Steps: []string{"x"}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first, err := u.conn(ctx, b.Addr, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.HangNew.Store(true)
	time.Sleep(time.Until(first.retireAt) + 10*time.Millisecond)
	start := time.Now()
	const n = 3
	for range n {
		cl, err := u.Send(ctx, b.Addr, 0, 18, 0, nil, nil, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took > dialTO {
		t.Fatalf("%d requests on a live connection took %v (each waited a failed redial of up to %v)", n, took.Round(time.Millisecond), dialTO)
	}
}
