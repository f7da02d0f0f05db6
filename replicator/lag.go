package replicator

import "time"

// lagClock measures one partition's time lag: how long ago the oldest source
// record not yet copied was appended. It keeps the replicator's own timed
// samples of the source end offset, so it is right whatever the records'
// timestamps say. Its resolution is the sampling interval: a record is
// known to exist from the first sample that saw it.
//
// lagClock is not safe for concurrent use; the partition's lock guards it.
type lagClock struct {
	samples []endSample // strictly increasing end offsets, in time order
}

type endSample struct {
	at  time.Time
	end int64
}

// observe records that the source end offset was end at time at.
func (l *lagClock) observe(at time.Time, end int64) {
	if n := len(l.samples); n > 0 && end <= l.samples[n-1].end {
		return // nothing new since the last sample: keep its earlier time
	}
	l.samples = append(l.samples, endSample{at: at, end: end})
}

// lag returns the time lag at now for a partition whose next offset to copy
// is next: now minus the time of the first sample whose end offset exceeded
// next, or 0 when no sample shows anything beyond next.
func (l *lagClock) lag(now time.Time, next int64) time.Duration {
	// Samples with end <= next are fully copied and never matter again.
	i := 0
	for i < len(l.samples) && l.samples[i].end <= next {
		i++
	}
	if i > 0 {
		// Keep the last copied sample's end so observe still drops repeats.
		l.samples = l.samples[i-1:]
		if l.samples[0].end <= next {
			if len(l.samples) == 1 {
				return 0
			}
			return max(0, now.Sub(l.samples[1].at))
		}
	}
	if len(l.samples) == 0 {
		return 0
	}
	return max(0, now.Sub(l.samples[0].at))
}

// end returns the newest sampled end offset, or -1 without samples.
func (l *lagClock) end() int64 {
	if len(l.samples) == 0 {
		return -1
	}
	return l.samples[len(l.samples)-1].end
}

// before returns the time of the newest sample whose end offset was at or
// below offset (the record at offset was not there yet), or the zero time
// without one. It is the first time that sample's end was seen, not the
// last: the samples are of the last stable offset, which an open
// transaction holds below records already appended, so a later sighting
// of the same end says nothing about when they were.
func (l *lagClock) before(offset int64) time.Time {
	var at time.Time
	for _, s := range l.samples {
		if s.end > offset {
			break
		}
		at = s.at
	}
	return at
}

// seen returns the time of the first sample whose end offset was above
// offset (the record at offset was there), or the zero time without one.
func (l *lagClock) seen(offset int64) time.Time {
	for _, s := range l.samples {
		if s.end > offset {
			return s.at
		}
	}
	return time.Time{}
}
