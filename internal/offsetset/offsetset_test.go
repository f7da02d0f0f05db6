package offsetset

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func set(rs ...Range) *Set {
	s := &Set{}
	for _, r := range rs {
		s.Add(r.Start, r.End)
	}
	return s
}

func TestAddMerges(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		add  []Range
		want []Range
	}{
		{"empty range ignored", []Range{{5, 5}, {7, 3}}, nil},
		{"append in order", []Range{{0, 3}, {5, 8}}, []Range{{0, 3}, {5, 8}}},
		{"adjacent merge", []Range{{0, 3}, {3, 8}}, []Range{{0, 8}}},
		{"overlap extends last", []Range{{0, 5}, {2, 9}}, []Range{{0, 9}}},
		{"inside last", []Range{{0, 10}, {2, 4}}, []Range{{0, 10}}},
		{"insert before", []Range{{10, 12}, {0, 2}}, []Range{{0, 2}, {10, 12}}},
		{"insert between", []Range{{0, 2}, {10, 12}, {5, 6}}, []Range{{0, 2}, {5, 6}, {10, 12}}},
		{"fill a hole", []Range{{0, 2}, {5, 6}, {2, 5}}, []Range{{0, 6}}},
		{"span several", []Range{{0, 2}, {4, 6}, {8, 10}, {12, 14}, {1, 13}}, []Range{{0, 14}}},
		{"touch both sides", []Range{{0, 2}, {4, 6}, {2, 4}}, []Range{{0, 6}}},
		{"out of order, merged", []Range{{20, 30}, {0, 10}, {10, 20}}, []Range{{0, 30}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := set(tc.add...).Ranges(); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCoverAndMissing(t *testing.T) {
	t.Parallel()
	s := set(Range{0, 10}, Range{20, 30})
	for _, tc := range []struct {
		q       Range
		covers  bool
		missing int64
	}{
		{Range{0, 10}, true, 0},
		{Range{3, 5}, true, 0},
		{Range{5, 5}, true, 0},
		{Range{9, 11}, false, 1},
		{Range{10, 20}, false, 10},
		{Range{5, 25}, false, 10},
		{Range{25, 40}, false, 10},
		{Range{-5, 0}, false, 5},
		{Range{0, 30}, false, 10},
	} {
		if got := s.Covers(tc.q.Start, tc.q.End); got != tc.covers {
			t.Errorf("Covers%v = %v, want %v", tc.q, got, tc.covers)
		}
		if got := s.Missing(tc.q.Start, tc.q.End); got != tc.missing {
			t.Errorf("Missing%v = %d, want %d", tc.q, got, tc.missing)
		}
	}
}

func TestRemove(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rm   Range
		want []Range
	}{
		{"whole", Range{0, 10}, []Range{{20, 30}}},
		{"middle splits", Range{3, 5}, []Range{{0, 3}, {5, 10}, {20, 30}}},
		{"across two", Range{5, 25}, []Range{{0, 5}, {25, 30}}},
		{"nothing held", Range{10, 20}, []Range{{0, 10}, {20, 30}}},
		{"everything", Range{-1, 100}, nil},
		{"empty", Range{4, 4}, []Range{{0, 10}, {20, 30}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := set(Range{0, 10}, Range{20, 30})
			s.Remove(tc.rm.Start, tc.rm.End)
			if got := s.Ranges(); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBounds(t *testing.T) {
	t.Parallel()
	s := set(Range{0, 2}, Range{4, 6}, Range{8, 10}, Range{12, 14})
	if end := s.DropLowest(2); end != 6 {
		t.Errorf("DropLowest(2) = %d, want 6 (the end of the last range dropped)", end)
	}
	if got, want := s.Ranges(), []Range{{8, 10}, {12, 14}}; !slices.Equal(got, want) {
		t.Errorf("after DropLowest: %v, want %v", got, want)
	}
	if end := s.DropLowest(5); end != 0 {
		t.Errorf("DropLowest above the size = %d, want 0", end)
	}
	s.DropBelow(9)
	if got, want := s.Ranges(), []Range{{9, 10}, {12, 14}}; !slices.Equal(got, want) {
		t.Errorf("after DropBelow(9): %v, want %v", got, want)
	}
	s.DropBelow(100)
	if s.Len() != 0 {
		t.Errorf("after DropBelow(100): %v, want empty", s.Ranges())
	}
}

// TestAgainstABitmap checks random adds and removes against a plain bitmap.
func TestAgainstABitmap(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	const size = 200
	for round := range 200 {
		var s Set
		var bits [size]bool
		for range 30 {
			a, b := int64(r.IntN(size)), int64(r.IntN(size))
			a, b = min(a, b), max(a, b)
			if r.IntN(3) == 0 {
				s.Remove(a, b)
				for i := a; i < b; i++ {
					bits[i] = false
				}
			} else {
				s.Add(a, b)
				for i := a; i < b; i++ {
					bits[i] = true
				}
			}
		}
		rs := s.Ranges()
		for i := 1; i < len(rs); i++ {
			if rs[i].Start <= rs[i-1].End || rs[i].Start >= rs[i].End {
				t.Fatalf("round %d: ranges not sorted, disjoint and merged: %v", round, rs)
			}
		}
		for i := range int64(size) {
			if s.Covers(i, i+1) != bits[i] {
				t.Fatalf("round %d: offset %d: set says %v, bitmap %v (%v)", round, i, !bits[i], bits[i], rs)
			}
		}
	}
}
