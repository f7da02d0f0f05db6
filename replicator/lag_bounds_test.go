package replicator

import (
	"testing"
	"time"
)

// TestLagClockAppendBounds: a batch at an offset was appended after the
// newest sample that did not show it and before the first that did.
func TestLagClockAppendBounds(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	var l lagClock
	l.observe(t0, 10)
	l.observe(t0.Add(time.Second), 15)
	l.observe(t0.Add(2*time.Second), 20)
	for _, tc := range []struct {
		offset       int64
		before, seen time.Time
	}{
		{5, time.Time{}, t0},
		{10, t0, t0.Add(time.Second)},
		{14, t0, t0.Add(time.Second)},
		{15, t0.Add(time.Second), t0.Add(2 * time.Second)},
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

// TestLagClockBeforeHeldEnd: the samples are last stable offsets, which an
// open transaction holds below records already appended: before() is the
// first sighting of the held end, never a later one.
func TestLagClockBeforeHeldEnd(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(10_000, 0)
	var l lagClock
	l.observe(t0, 90)               // a transaction opened at 90
	appended := t0.Add(time.Second) // record 100, another producer's
	l.observe(t0.Add(2*time.Second), 90)
	l.observe(t0.Add(4900*time.Millisecond), 90)
	l.observe(t0.Add(5*time.Second), 150) // committed
	if got := l.before(100); got.After(appended) {
		t.Errorf("before(100) = t0+%v, after record 100 was appended at t0+%v", got.Sub(t0), appended.Sub(t0))
	}
}
