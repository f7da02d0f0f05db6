package shadow

import (
	"context"
	"maps"
	"sync"
	"time"
)

// Latency emulation's push (docs/design.md §12): every LatencyRefresh tick
// the job reads the replicator's destination latency of each PROXY topic
// with latency emulation (or the headroom check) on, and has it put in the
// topic's TopicRoute (destination_latency) when it changed materially: p50
// or p99 by more than LatencyChange from what agents have, or what they
// have is older than LatencyMaxAge.
//
// A profile is a measurement, not config: it is pushed at the current
// config version, not a new one, and not stored. A new version would make
// every agent apply it before its next lease renewal (leases are granted
// only at the current version, §5) and would bump the version a cutover
// waits for; at the same version a lease and a cutover never see it. Delta
// xDS sends the changed routes anyway (a resource's version carries a hash
// of its bytes); a state-of-the-world agent, which is sent responses only
// at new versions, gets the profile with the next config change. After a
// restart profiles are measured again within a tick.
//
// Why these thresholds: the replicator's quantiles are read to a bucket of
// 9 %, and a 1-minute window moves by a few percent from one tick to the
// next with no change on the destination; a producer cannot tell 10 %
// apart either. Pushing only beyond that keeps the xDS stream quiet while
// the destination is steady, and a tick of 5 s brings a real change to
// agents within seconds. The max age re-pushes a steady profile once a
// minute, so measured_at tells an operator (and agents) the profile is
// live, at one route update per topic and minute. All changes of a tick go
// out in one update.
const (
	DefaultLatencyRefresh = 5 * time.Second
	// LatencyChange is the relative change of p50 or p99 that is pushed.
	LatencyChange = 0.10
	// LatencyMaxAge is how old a pushed profile gets before it is pushed
	// again unchanged.
	LatencyMaxAge = time.Minute
)

// Profile is a topic's destination latency profile as agents were sent it.
// Its JSON is how replicas share it (no tags: the field names).
type Profile struct {
	P50, P99 time.Duration
	Samples  int
	At       time.Time
}

// latencyState is the profiles pushed, under its own lock.
type latencyState struct {
	mu     sync.Mutex
	pushed map[string]Profile
}

// Profiles returns every topic's profile as last pushed, for the routes.
// The caller may hold its own lock: Profiles calls nothing back.
func (j *Job) Profiles() map[string]Profile {
	j.lat.mu.Lock()
	defer j.lat.mu.Unlock()
	return maps.Clone(j.lat.pushed)
}

// Latency returns topic's profile as last pushed.
func (j *Job) Latency(topic string) (Profile, bool) {
	j.lat.mu.Lock()
	defer j.lat.mu.Unlock()
	p, ok := j.lat.pushed[topic]
	return p, ok
}

// latencyLoop pushes destination latencies until Run's context ends.
func (j *Job) latencyLoop() {
	t := time.NewTicker(j.cfg.latencyRefresh)
	defer t.Stop()
	for {
		select {
		case <-j.ctx.Done():
			return
		case <-t.C:
			j.refreshLatency()
		}
	}
}

// refreshLatency reads the latency of every topic whose route carries it
// and has the ones that changed materially published, at the current
// version.
func (j *Job) refreshLatency() {
	now := j.now()
	topics := j.view.Topics()
	changed := map[string]Profile{}
	managed := make(map[string]bool, len(topics))
	for _, t := range topics {
		managed[t.Name] = true
	}
	j.lat.mu.Lock()
	for name := range j.lat.pushed {
		if !managed[name] {
			delete(j.lat.pushed, name) // removed: nothing renders it
		}
	}
	for _, t := range topics {
		if !t.Latency {
			continue
		}
		m, ok := j.src.DestinationLatency(t.Name)
		if !ok {
			continue // nothing copied lately: the last profile still holds
		}
		last, had := j.lat.pushed[t.Name]
		if had && !materially(last, m.P50, m.P99) && now.Sub(last.At) < LatencyMaxAge {
			continue
		}
		j.lat.pushed[t.Name] = Profile{P50: m.P50, P99: m.P99, Samples: m.Samples, At: now}
		changed[t.Name] = j.lat.pushed[t.Name]
	}
	j.lat.mu.Unlock()
	if len(changed) > 0 {
		ctx, cancel := context.WithTimeout(j.ctx, j.cfg.latencyRefresh)
		defer cancel()
		j.pub.PushLatency(ctx, changed)
	}
}

// materially reports whether p50 or p99 moved by more than LatencyChange
// from what was pushed.
func materially(last Profile, p50, p99 time.Duration) bool {
	moved := func(old, cur time.Duration) bool {
		if old <= 0 {
			return cur > 0
		}
		d := float64(cur-old) / float64(old)
		return d > LatencyChange || d < -LatencyChange
	}
	return moved(last.P50, p50) || moved(last.P99, p99)
}
