package wait

import (
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	t.Parallel()
	n := 0
	if got := Until(time.Minute, func() string {
		if n++; n < 3 {
			return "not yet"
		}
		return ""
	}); got != "" || n != 3 {
		t.Fatalf("Until = %q after %d checks, want \"\" after 3", got, n)
	}
	if got := Until(0, func() string { return "never" }); got != "never" {
		t.Fatalf("Until past its deadline = %q, want the last answer", got)
	}
}
