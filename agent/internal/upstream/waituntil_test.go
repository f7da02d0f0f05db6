package upstream

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

// waitUntilChild names the GODEBUG timer-channel mode a child run of
// TestWaitUntilReusedTimerMode tests (see TestWaitUntilReusedTimer).
const waitUntilChild = "BATON_TEST_WAITUNTIL_MODE"

// TestWaitUntilReusedTimer runs TestWaitUntilReusedTimerMode in a child
// process per timer-channel mode: a binary whose main module says a Go
// older than 1.23 (or GODEBUG asynctimerchan=1) has asynchronous timer
// channels, whose Stop leaves a fire already sent in t.C.
func TestWaitUntilReusedTimer(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"asynctimerchan=0", "asynctimerchan=1"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestWaitUntilReusedTimerMode$", "-test.count=1", "-test.timeout=1m")
			cmd.Env = append(os.Environ(), "GODEBUG="+mode, waitUntilChild+"="+mode)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// TestWaitUntilReusedTimerMode is TestWaitUntilReusedTimer's child: a
// wait on a timer left fired by an earlier call (answered as its deadline
// passed) must time this call alone, neither giving up at once nor never.
func TestWaitUntilReusedTimerMode(t *testing.T) {
	mode := os.Getenv(waitUntilChild)
	if mode == "" {
		t.Skip("run by TestWaitUntilReusedTimer, in a child process of a GODEBUG")
	}
	for _, tc := range []struct {
		name   string
		wait   time.Duration // the call's deadline, from the start of the wait
		cancel bool          // ctx ends once the wait took the stale fire
		want   error
	}{
		{"an hour's wait, the connection gone", time.Hour, true, context.Canceled},
		{"a short wait, not answered", 20 * time.Millisecond, false, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tm := time.NewTimer(time.Hour)
			staleFire(tm, mode == "asynctimerchan=1")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				go func() {
					for len(tm.C) != 0 { // the wait took the stale fire
						runtime.Gosched()
					}
					cancel()
				}()
			}
			cl := &Call{done: make(chan struct{})}
			deadline := time.Now().Add(tc.wait)
			_, err := cl.WaitUntil(ctx, deadline, tm)
			if !errors.Is(err, tc.want) {
				t.Fatalf("WaitUntil: %v, want %v", err, tc.want)
			}
			if errors.Is(err, context.DeadlineExceeded) && time.Now().Before(deadline) {
				t.Fatal("WaitUntil gave up before its deadline: an earlier call's fire")
			}
		})
	}
}

// staleFire leaves tm as a wait whose answer won over its deadline leaves
// it: fired and stopped, the fire unread (in tm.C when async; a
// synchronous channel holds none).
func staleFire(tm *time.Timer, async bool) {
	tm.Reset(0)
	for async && len(tm.C) == 0 {
		runtime.Gosched()
	}
	tm.Stop()
}
