package e2e

import (
	"testing"
	"time"
)

// The cutover log line names how long COMPLETE came after MIGRATING; a
// case whose producer ended before COMPLETE has no COMPLETE time, and
// subtracting the zero time printed -2562047h.
func TestDescribeLater(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		name        string
		first, then time.Time
		want        string
	}{
		{"both", at, at.Add(1500 * time.Millisecond), "1.5s later"},
		{"no COMPLETE", at, time.Time{}, "never"},
		{"no MIGRATING", time.Time{}, at, "without MIGRATING"},
		{"neither", time.Time{}, time.Time{}, "never"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := describeLater(c.first, c.then); got != c.want {
				t.Errorf("describeLater(%v, %v) = %q, want %q", c.first, c.then, got, c.want)
			}
		})
	}
}
