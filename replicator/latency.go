package replicator

import (
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Destination ack latency, measured for PROXY-phase latency emulation
// (docs/design.md §12): every produce to D the copy makes that D answers
// without error is one sample of how long D takes to acknowledge a write
// (acks=all), per topic.
//
// The window: samples are counted in log-spaced buckets, in two halves of
// LatencyWindow/2 each; quantiles are read over both halves, so over the
// last LatencyWindow/2 to LatencyWindow. A minute follows a change of D
// (load, a broker moving) within a minute, while holding enough samples for
// a p99 from any partition that copies a batch a second or more; and it is
// several times the control plane's refresh tick, so a tick never sees an
// empty window between two busy ones. Buckets instead of the samples keep
// memory fixed (about 1.3 KiB per topic, whatever the rate) and recording
// O(1). A bucket is 2^(1/8) wide (9 %): a quantile is reported as its
// bucket's upper bound, so it is never below the true value and at most 9 %
// above, which errs on the side of a slower emulated destination.
const (
	// LatencyWindow is how far back DestinationLatency looks.
	LatencyWindow = time.Minute

	latencyBase    = 100 * time.Microsecond // upper bound of the first bucket
	latencyPerTwo  = 8                      // buckets per doubling
	latencyBuckets = 8*20 + 1               // 100 µs .. ~105 s, then one for more
)

// Latency is a destination's produce ack latency over the recent window.
type Latency struct {
	P50, P99 time.Duration
	// Samples is how many acks the quantiles are read from.
	Samples int
	// At is when the quantiles were read.
	At time.Time
}

// latencyWindow holds one topic's samples.
type latencyWindow struct {
	mu       sync.Mutex
	cur      [latencyBuckets]uint32
	prev     [latencyBuckets]uint32
	curN     int
	prevN    int
	curStart time.Time
}

// bucketOf returns the bucket index of d: the first whose upper bound is at
// least d.
func bucketOf(d time.Duration) int {
	if d <= latencyBase {
		return 0
	}
	i := int(math.Ceil(math.Log2(float64(d)/float64(latencyBase)) * latencyPerTwo))
	return min(i, latencyBuckets-1)
}

// bucketUpper is bucket i's upper bound.
func bucketUpper(i int) time.Duration {
	return time.Duration(float64(latencyBase) * math.Exp2(float64(i)/latencyPerTwo))
}

// rotate moves the halves on so that cur started at most half a window
// before now. w.mu is held.
func (w *latencyWindow) rotate(now time.Time) {
	half := LatencyWindow / 2
	switch {
	case now.Sub(w.curStart) < half:
		return
	case now.Sub(w.curStart) < 2*half:
		w.prev, w.prevN = w.cur, w.curN
	default: // both halves are older than the window
		w.prev, w.prevN = [latencyBuckets]uint32{}, 0
	}
	w.cur, w.curN = [latencyBuckets]uint32{}, 0
	w.curStart = now
}

func (w *latencyWindow) record(now time.Time, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rotate(now)
	if w.cur[bucketOf(d)] < math.MaxUint32 {
		w.cur[bucketOf(d)]++
		w.curN++
	}
}

// quantiles reads p50 and p99 over the window; ok is false with no sample.
func (w *latencyWindow) quantiles(now time.Time) (Latency, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rotate(now)
	n := w.curN + w.prevN
	if n == 0 {
		return Latency{}, false
	}
	// The k-th smallest sample (1-based) for quantile q is ceil(q*n).
	rank := func(q float64) int { return max(1, int(math.Ceil(q*float64(n)))) }
	at := func(k int) time.Duration {
		seen := 0
		for i := range latencyBuckets {
			seen += int(w.cur[i]) + int(w.prev[i])
			if seen >= k {
				return bucketUpper(i)
			}
		}
		return bucketUpper(latencyBuckets - 1)
	}
	return Latency{P50: at(rank(0.5)), P99: at(rank(0.99)), Samples: n, At: now}, true
}

// observeLatency records one produce ack latency of topic.
func (r *Replicator) observeLatency(topic string, d time.Duration) {
	r.latMu.Lock()
	w := r.latency[topic]
	if w == nil {
		if r.latency == nil {
			r.latency = map[string]*latencyWindow{}
		}
		w = &latencyWindow{}
		r.latency[topic] = w
	}
	r.latMu.Unlock()
	w.record(time.Now(), d)
}

// DestinationLatency is topic's destination produce ack latency over the
// last LatencyWindow (see Latency); false when no copy of topic was
// acknowledged in it.
func (r *Replicator) DestinationLatency(topic string) (Latency, bool) {
	r.latMu.Lock()
	w := r.latency[topic]
	r.latMu.Unlock()
	if w == nil {
		return Latency{}, false
	}
	return w.quantiles(time.Now())
}

// forgetLatency drops a stopped topic's window.
func (r *Replicator) forgetLatency(topic string) {
	r.latMu.Lock()
	delete(r.latency, topic)
	r.latMu.Unlock()
}

// latencyCollector exports every topic's window as gauges:
// baton_replicator_destination_latency_seconds{topic,quantile} and
// baton_replicator_destination_latency_samples{topic}. (The histogram
// baton_replicator_produce_seconds counts every copied batch since start,
// retries included.)
type latencyCollector struct {
	r                *Replicator
	quantile, sample *prometheus.Desc
}

var _ prometheus.Collector = (*latencyCollector)(nil)

func newLatencyCollector(r *Replicator) *latencyCollector {
	return &latencyCollector{r: r,
		quantile: prometheus.NewDesc("baton_replicator_destination_latency_seconds",
			"Destination produce ack latency over the last minute, by quantile (0.5, 0.99): what agents emulate in PROXY.",
			[]string{"topic", "quantile"}, nil),
		sample: prometheus.NewDesc("baton_replicator_destination_latency_samples",
			"Destination produce acks the latency quantiles are read from.", []string{"topic"}, nil),
	}
}

func (c *latencyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.quantile; ch <- c.sample }

func (c *latencyCollector) Collect(ch chan<- prometheus.Metric) {
	c.r.latMu.Lock()
	topics := make([]string, 0, len(c.r.latency))
	for t := range c.r.latency {
		topics = append(topics, t)
	}
	c.r.latMu.Unlock()
	for _, t := range topics {
		l, ok := c.r.DestinationLatency(t)
		if !ok {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.quantile, prometheus.GaugeValue, l.P50.Seconds(), t, "0.5")
		ch <- prometheus.MustNewConstMetric(c.quantile, prometheus.GaugeValue, l.P99.Seconds(), t, "0.99")
		ch <- prometheus.MustNewConstMetric(c.sample, prometheus.GaugeValue, float64(l.Samples), t)
	}
}
