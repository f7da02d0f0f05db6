// Package offsetset owns the set of Kafka offsets kept as sorted, merged
// half-open ranges [Start, End): what an agent acked from a source
// partition, and what the control plane heard agents acked, for bypass
// detection (docs/design.md §12). Writes through one agent to one
// partition are mostly consecutive, so the common insert extends the last
// range in place and costs no allocation.
package offsetset

import "sort"

// Range is the offsets [Start, End).
type Range struct{ Start, End int64 }

// Len is the number of offsets in r.
func (r Range) Len() int64 { return max(0, r.End-r.Start) }

// Set is a set of offsets as sorted, disjoint, non-adjacent ranges. The
// zero value is empty. Not safe for concurrent use.
type Set struct {
	rs []Range
}

// Ranges returns the set's ranges, ascending; the slice is the set's own
// until the next change.
func (s *Set) Ranges() []Range { return s.rs }

// Len is the number of ranges (not offsets) held.
func (s *Set) Len() int { return len(s.rs) }

// Add adds [start, end), merging with the ranges it touches or overlaps.
// An empty range is ignored.
func (s *Set) Add(start, end int64) {
	if end <= start {
		return
	}
	n := len(s.rs)
	// The common case: at or after the last range.
	if n == 0 || start > s.rs[n-1].End {
		s.rs = append(s.rs, Range{start, end})
		return
	}
	if start >= s.rs[n-1].Start {
		s.rs[n-1].End = max(s.rs[n-1].End, end)
		return
	}
	// i: the first range whose end reaches start (it touches or follows).
	i := sort.Search(n, func(k int) bool { return s.rs[k].End >= start })
	// j: the first range starting after end (untouched).
	j := sort.Search(n, func(k int) bool { return s.rs[k].Start > end })
	if i == j {
		s.rs = append(s.rs, Range{})
		copy(s.rs[i+1:], s.rs[i:])
		s.rs[i] = Range{start, end}
		return
	}
	merged := Range{min(start, s.rs[i].Start), max(end, s.rs[j-1].End)}
	s.rs[i] = merged
	s.rs = append(s.rs[:i+1], s.rs[j:]...)
}

// Remove takes [start, end) out of the set.
func (s *Set) Remove(start, end int64) {
	if end <= start || len(s.rs) == 0 {
		return
	}
	i := sort.Search(len(s.rs), func(k int) bool { return s.rs[k].End > start })
	j := sort.Search(len(s.rs), func(k int) bool { return s.rs[k].Start >= end })
	if i >= j {
		return
	}
	var keep []Range
	if s.rs[i].Start < start {
		keep = append(keep, Range{s.rs[i].Start, start})
	}
	if s.rs[j-1].End > end {
		keep = append(keep, Range{end, s.rs[j-1].End})
	}
	tail := append(keep, s.rs[j:]...)
	s.rs = append(s.rs[:i], tail...)
}

// Covers reports whether every offset of [start, end) is in the set.
func (s *Set) Covers(start, end int64) bool {
	if end <= start {
		return true
	}
	i := sort.Search(len(s.rs), func(k int) bool { return s.rs[k].End > start })
	return i < len(s.rs) && s.rs[i].Start <= start && s.rs[i].End >= end
}

// Missing returns how many offsets of [start, end) are not in the set.
func (s *Set) Missing(start, end int64) int64 {
	if end <= start {
		return 0
	}
	missing := end - start
	i := sort.Search(len(s.rs), func(k int) bool { return s.rs[k].End > start })
	for ; i < len(s.rs) && s.rs[i].Start < end; i++ {
		missing -= min(end, s.rs[i].End) - max(start, s.rs[i].Start)
	}
	return missing
}

// DropBelow forgets every offset below off.
func (s *Set) DropBelow(off int64) {
	i := sort.Search(len(s.rs), func(k int) bool { return s.rs[k].End > off })
	s.rs = s.rs[i:]
	if len(s.rs) > 0 && s.rs[0].Start < off {
		s.rs[0].Start = off
	}
}

// DropLowest forgets the lowest ranges until at most n remain, and returns
// the end of the last one dropped (0 if none was): the bound that keeps a
// set's memory fixed whatever the writes' pattern.
func (s *Set) DropLowest(n int) int64 {
	if len(s.rs) <= n {
		return 0
	}
	k := len(s.rs) - max(n, 0)
	end := s.rs[k-1].End
	s.rs = append(s.rs[:0], s.rs[k:]...)
	return end
}
