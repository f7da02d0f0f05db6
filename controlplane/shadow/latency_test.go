package shadow

import (
	"testing"
	"time"

	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
)

// TestLatencyRefresh: a topic's destination latency is pushed when its
// route carries it, again only when p50 or p99 moved by more than 10 % or
// the pushed one is a minute old, and never for a topic whose route does
// not carry it; a removed topic's profile is forgotten.
func TestLatencyRefresh(t *testing.T) {
	t.Parallel()
	f := &fakes{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f.topics = []Topic{{Name: "t", State: migration.Proxy, Latency: true}, {Name: "off", State: migration.Proxy}}
	j := newTestJob(t, f, 0)
	set := func(topic string, p50, p99 time.Duration) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.latency[topic] = replicator.Latency{P50: p50, P99: p99, Samples: 100}
	}
	set("off", 200*time.Millisecond, 400*time.Millisecond)
	step := func(what string, p50, p99 time.Duration, wantP50 time.Duration, wantAt time.Time, wantPush bool) {
		t.Helper()
		set("t", p50, p99)
		f.mu.Lock()
		before := len(f.pushes)
		f.mu.Unlock()
		j.refreshLatency()
		p, ok := j.Latency("t")
		if !ok || p.P50 != wantP50 || !p.At.Equal(wantAt) {
			t.Fatalf("%s: profile %+v (%v), want p50 %v measured at %v", what, p, ok, wantP50, wantAt)
		}
		f.mu.Lock()
		pushes := f.pushes[before:]
		f.mu.Unlock()
		switch {
		case wantPush && (len(pushes) != 1 || len(pushes[0]) != 1 || pushes[0]["t"] != p):
			t.Fatalf("%s: pushed %+v, want t's new profile alone", what, pushes)
		case !wantPush && len(pushes) != 0:
			t.Fatalf("%s: pushed %+v, want nothing", what, pushes)
		}
	}
	t0 := f.clock()
	step("first measurement", 200*time.Millisecond, 400*time.Millisecond, 200*time.Millisecond, t0, true)
	f.advance(5 * time.Second)
	step("5 % change", 210*time.Millisecond, 380*time.Millisecond, 200*time.Millisecond, t0, false)
	f.advance(5 * time.Second)
	step("p99 up 20 %", 210*time.Millisecond, 480*time.Millisecond, 210*time.Millisecond, f.clock(), true)
	t1 := f.clock()
	f.advance(LatencyMaxAge - time.Second)
	step("unchanged, younger than the max age", 210*time.Millisecond, 480*time.Millisecond, 210*time.Millisecond, t1, false)
	f.advance(time.Second)
	step("unchanged, max age reached", 210*time.Millisecond, 480*time.Millisecond, 210*time.Millisecond, f.clock(), true)
	if p, ok := j.Latency("off"); ok {
		t.Errorf("off, whose route carries no latency, has a profile: %+v", p)
	}
	f.mu.Lock()
	f.topics = nil
	f.mu.Unlock()
	j.refreshLatency()
	if ps := j.Profiles(); len(ps) != 0 {
		t.Errorf("profiles of removed topics are kept: %+v", ps)
	}
}
