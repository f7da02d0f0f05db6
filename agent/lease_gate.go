package agent

import (
	"context"
	"time"

	"github.com/baton-kafka/baton/migration"
)

// leaseWaitPoll is how often a produce waiting for a lease looks again.
const leaseWaitPoll = 10 * time.Millisecond

// routeWrite decides where a produce for topic goes, just before it is
// sent: the source, the destination, or nowhere (nil: answer with the
// retriable error). It waits while the topic is held (MIGRATING in hold
// mode) and while a source-bound write has no lease, up to the route's
// HoldMax counted from arrived. The route is looked up again after every
// wait, so a request never goes where a route seen before the wait said:
// a request that waited for a lease while the topic moved to COMPLETE
// goes to the destination.
//
// A source-bound answer comes counted in flight (see inflight): the count
// is taken before a confirming lookup, so a heartbeat that reports the
// topic stopped also counts this request until it is answered; writes to
// the destination never touch the count. The caller MUST
// end that count (sourceUnsent or inflight.done).
func (r *router) routeWrite(ctx context.Context, topic string, arrived time.Time) *upstream {
	if arrived.IsZero() {
		arrived = time.Now()
	}
	holdMax := r.a.routes.Lookup(topic).HoldMax
	if holdMax <= 0 {
		holdMax = migration.DefaultHoldMax
	}
	deadline := time.NewTimer(time.Until(arrived.Add(holdMax)))
	defer deadline.Stop()
	waiting := false
	defer func() {
		if waiting {
			r.a.metrics.held.Dec()
		}
	}()
	wait := func(changed <-chan struct{}, poll bool) bool {
		if !waiting {
			waiting = true
			r.a.metrics.held.Inc()
		}
		var tick <-chan time.Time
		if poll {
			t := time.NewTimer(leaseWaitPoll)
			defer t.Stop()
			tick = t.C
		}
		select {
		case <-changed:
		case <-tick:
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
		return true
	}
	last := false // the deadline passed: decide once more, then give up
	for {
		changed := r.a.routes.Changed()
		route := r.a.routes.Lookup(topic)
		target := route.Target()
		if target == ToSource && r.a.leaseValid() {
			// Count, then confirm the route: a route change the count
			// missed is one this lookup sees.
			r.a.inflight.add1(topic, 1)
			if route = r.a.routes.Lookup(topic); route.Target() == ToSource {
				return r.a.src // counted
			}
			r.a.inflight.add1(topic, -1)
			target = route.Target()
		}
		switch {
		case target == ToDestination:
			return r.a.dst
		case last:
			return nil
		case target == ToNowhere && route.Mode != migration.Hold:
			return nil
		}
		// Held (MIGRATING) or waiting for a lease: wake on a route change,
		// and poll the lease.
		if !wait(changed, target == ToSource) {
			last = true
		}
	}
}

// dropSource takes the shards bound for src out of shards, and answers
// their partitions with the retriable error: nothing of them was sent.
func dropSource(shards []*shard, src *upstream, codes []int16) []*shard {
	kept := shards[:0]
	for _, s := range shards {
		if s.up != src {
			kept = append(kept, s)
			continue
		}
		for _, i := range s.idx {
			codes[i] = retriable
		}
	}
	return kept
}

// leaseValid says whether the agent may write to the source now: with
// static routes always; with a control plane while it holds a lease.
// Writes other than produce wait for it in the chain (filter/leasegate,
// see chain.go); produce waits in routeWrite.
func (a *Agent) leaseValid() bool {
	return a.cp == nil || a.cp.keeper.Valid()
}

// forwardDeadline is F for a produce to topics: the smallest of their
// routes' deadlines, as the control plane pushed them, else the control
// plane's own F from the last lease answer, else the agent's option (static
// routes). The control plane's silent-agent wait counts with the same F, so
// an agent never keeps a request uncertain longer than the control plane
// waits for it.
func (a *Agent) forwardDeadline(topics []string) time.Duration {
	f := time.Duration(0)
	for _, t := range topics {
		if d := a.routes.Lookup(t).ForwardDeadline; d > 0 && (f == 0 || d < f) {
			f = d
		}
	}
	if f > 0 {
		return f
	}
	if a.cp != nil {
		if last := a.cp.keeper.Last(); last != nil {
			if d := last.GetForwardDeadline().AsDuration(); d > 0 {
				return d
			}
		}
	}
	return a.cfg.forwardDeadline
}
