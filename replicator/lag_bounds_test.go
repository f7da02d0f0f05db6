package replicator

import (
	"testing"
	"time"
)

// TestLagClockAppendBounds: a batch at an offset was appended after the
// newest sample that did not show it (an idle end seen again counts at its
// newest sighting) and before the first that did.
func TestLagClockAppendBounds(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	var l lagClock
	l.observe(t0, 10)
	l.observe(t0.Add(time.Second), 15)
	l.observe(t0.Add(1500*time.Millisecond), 15) // idle: still 15
	l.observe(t0.Add(2*time.Second), 20)
	for _, tc := range []struct {
		offset       int64
		before, seen time.Time
	}{
		{5, time.Time{}, t0},
		{10, t0, t0.Add(time.Second)},
		{14, t0, t0.Add(time.Second)},
		{15, t0.Add(1500 * time.Millisecond), t0.Add(2 * time.Second)},
		{20, t0.Add(2 * time.Second), time.Time{}},
	} {
		if got := l.before(tc.offset); !got.Equal(tc.before) {
			t.Errorf("before(%d) = %v, want %v", tc.offset, got, tc.before)
		}
		if got := l.seen(tc.offset); !got.Equal(tc.seen) {
			t.Errorf("seen(%d) = %v, want %v", tc.offset, got, tc.seen)
		}
	}
}
