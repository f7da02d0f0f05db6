// Package wait is how tests wait: poll a condition until it holds or a
// deadline passes, and fail naming what was awaited and the last state
// seen. Tests never sleep for a fixed time to let something happen.
package wait

import (
	"testing"
	"time"
)

// Poll is the interval between two checks of a condition.
const Poll = 20 * time.Millisecond

// For calls cond every Poll until it returns "" or timeout passes; then it
// fails t with what and cond's last answer (the state that did not hold).
func For(t testing.TB, timeout time.Duration, what string, cond func() (notYet string)) {
	t.Helper()
	if err := Until(timeout, cond); err != "" {
		t.Fatalf("waiting %v for %s: %s", timeout, what, err)
	}
}

// Until calls cond every Poll until it returns "" (Until returns "") or
// timeout passes (Until returns cond's last answer). For goroutines that
// must not call t.Fatal.
func Until(timeout time.Duration, cond func() (notYet string)) string {
	deadline := time.Now().Add(timeout)
	for {
		last := cond()
		if last == "" {
			return ""
		}
		if time.Now().After(deadline) {
			return last
		}
		time.Sleep(Poll)
	}
}
