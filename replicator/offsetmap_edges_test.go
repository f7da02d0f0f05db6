package replicator

import "testing"

// TestToDestinationBeforeTheFirstSegment: a source offset below the first
// segment's source offset either lies in the exact region before it (delta
// 0) or was never copied (a log start above it, which retention moved past
// a group's committed offset): then it translates to the next copied
// record, the first segment's destination offset, never to itself.
func TestToDestinationBeforeTheFirstSegment(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		first    Segment
		src, dst int64
	}{
		{"copy started at log start 100", Segment{Dst: 0, Src: 100}, 50, 0},
		{"exact up to D 100, then S skips to 150", Segment{Dst: 100, Src: 150}, 50, 50},
		{"inside the skipped range", Segment{Dst: 100, Src: 150}, 120, 100},
		{"at the first segment", Segment{Dst: 100, Src: 150}, 150, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := OffsetMap{}
			tc.first.Topic = "t"
			m.add(tc.first)
			if got := m.ToDestination(0, tc.src); got != tc.dst {
				t.Fatalf("ToDestination(%d) = %d, want %d", tc.src, got, tc.dst)
			}
			d, _ := translateOffset(m, 0, tc.src, partProgress{hold: 1000, progress: 1100})
			if d != tc.dst {
				t.Fatalf("translateOffset(%d) = %d, want %d", tc.src, d, tc.dst)
			}
		})
	}
}
