package replicator

import (
	"testing"
	"time"
)

// The latency window reads p50 and p99 as the upper bound of the bucket
// holding that rank (never below the true value, at most one bucket, 9 %,
// above), counts its samples, and forgets samples older than the window.
func TestLatencyWindow(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	ms := time.Millisecond
	type batch struct {
		at time.Duration // after t0
		d  time.Duration
		n  int
	}
	cases := []struct {
		name     string
		samples  []batch
		readAt   time.Duration
		ok       bool
		p50, p99 time.Duration // true values: the reading is in [v, v*1.091]
		samplesN int
	}{
		{name: "empty", readAt: 0, ok: false},
		{name: "one value", samples: []batch{{0, 250 * ms, 10}}, readAt: time.Second, ok: true,
			p50: 250 * ms, p99: 250 * ms, samplesN: 10},
		{name: "1 in 100 slow", samples: []batch{{0, 10 * ms, 98}, {0, 400 * ms, 2}}, readAt: time.Second, ok: true,
			p50: 10 * ms, p99: 400 * ms, samplesN: 100},
		{name: "1 in 1000 slow is not the p99", samples: []batch{{0, 10 * ms, 999}, {0, 900 * ms, 1}}, readAt: time.Second,
			ok: true, p50: 10 * ms, p99: 10 * ms, samplesN: 1000},
		{name: "both halves count", samples: []batch{{0, 20 * ms, 50}, {40 * time.Second, 60 * ms, 50}},
			readAt: 45 * time.Second, ok: true, p50: 20 * ms, p99: 60 * ms, samplesN: 100},
		{name: "older than the window is gone", samples: []batch{{0, 500 * ms, 50}, {40 * time.Second, 60 * ms, 50}},
			readAt: 75 * time.Second, ok: true, p50: 60 * ms, p99: 60 * ms, samplesN: 50},
		{name: "all older than the window", samples: []batch{{0, 500 * ms, 50}}, readAt: 2 * LatencyWindow, ok: false},
		{name: "below the first bucket", samples: []batch{{0, time.Microsecond, 3}}, readAt: 0, ok: true,
			p50: latencyBase, p99: latencyBase, samplesN: 3},
		{name: "beyond the last bucket", samples: []batch{{0, time.Hour, 3}}, readAt: 0, ok: true,
			p50: bucketUpper(latencyBuckets - 1), p99: bucketUpper(latencyBuckets - 1), samplesN: 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var w latencyWindow
			for _, b := range tc.samples {
				for range b.n {
					w.record(t0.Add(b.at), b.d)
				}
			}
			l, ok := w.quantiles(t0.Add(tc.readAt))
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v (%+v)", ok, tc.ok, l)
			}
			if !ok {
				return
			}
			within := func(what string, got, want time.Duration) {
				if got < want || float64(got) > float64(want)*1.091 {
					t.Errorf("%s = %v, want %v to 9 %% above", what, got, want)
				}
			}
			within("p50", l.P50, tc.p50)
			within("p99", l.P99, tc.p99)
			if l.Samples != tc.samplesN {
				t.Errorf("samples = %d, want %d", l.Samples, tc.samplesN)
			}
		})
	}
}

// Every duration falls in the first bucket whose upper bound holds it.
func TestLatencyBuckets(t *testing.T) {
	t.Parallel()
	for d := 50 * time.Microsecond; d < 200*time.Second; d = d*21/20 + 1 {
		i := bucketOf(d)
		if i < latencyBuckets-1 && bucketUpper(i) < d {
			t.Fatalf("%v in bucket %d, whose upper bound is %v", d, i, bucketUpper(i))
		}
		if i > 0 && bucketUpper(i-1) >= d {
			t.Fatalf("%v in bucket %d, but bucket %d (up to %v) holds it", d, i, i-1, bucketUpper(i-1))
		}
	}
}
