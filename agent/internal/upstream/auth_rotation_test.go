package upstream

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRotationFailsNoRequestInDoubt: requests sent through the pool while
// it replaces connections for their SASL lifetime are answered or not sent
// (ErrNotSent, and the pool sends them on the new connection); none is
// written on the retiring connection and then failed by its graceful close
// (in doubt). A sender that took the old connection just before the swap is
// refused by it.
func TestRotationFailsNoRequestInDoubt(t *testing.T) {
	t.Parallel()
	b, u := saslPool(t, 100*time.Millisecond, time.Second)
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

// TestExpiringSlotRedialsOncePerBackoff: past retireAt, while the broker
// takes new connections but never answers them, the requests on the slot
// go on the old connection (its session has not ended) and do not each
// wait out a redial: one failed redial holds the next off for a backoff.
func TestExpiringSlotRedialsOncePerBackoff(t *testing.T) {
	t.Parallel()
	b, u := saslPool(t, 3*time.Second, 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first, err := u.conn(ctx, b.Addr, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.HangNew.Store(true)
	waitPast(first.retireAt)
	before := b.Accepted.Load()
	const n = 5
	for range n {
		cl, err := u.Send(ctx, b.Addr, 0, 18, 0, nil, nil, true)
		if err != nil {
			t.Fatal(err)
		}
		if cl.Conn() != first {
			t.Fatal("a request went on a connection that never authenticated")
		}
		if _, err := cl.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if dials := b.Accepted.Load() - before; dials >= n {
		t.Fatalf("%d requests on the live connection dialed %d replacements: one per request", n, dials)
	}
}
