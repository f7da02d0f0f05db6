package agent

import (
	"time"

	"github.com/baton-kafka/baton/agent/internal/upstream"
	"github.com/baton-kafka/baton/filter/hold"
	"github.com/baton-kafka/baton/migration"
)

// routeWrite decides where a produce for topic goes, as it is sent: the
// source, the destination, or nowhere (nil: answer with the retriable
// error). It never waits: the produce hold (filter/hold, see chain.go)
// held the request while the topic was MIGRATING in hold mode or bound for
// the source without a lease, and this lookup comes after that wait, so a
// request never goes where a route seen before the wait said: one that
// waited for a lease while the topic moved to COMPLETE goes to the
// destination. A topic still MIGRATING, or bound for the source without a
// lease, here (the hold max passed, or the route changed after the hold
// let the request on) is answered retriable.
//
// A source-bound answer comes counted in flight (see inflight): the count
// is taken before a confirming lookup, so a heartbeat that reports the
// topic stopped also counts this request until it is answered; writes to
// the destination never touch the count. The caller MUST
// end that count (sourceUnsent or inflight.done).
func (r *router) routeWrite(topic string) *upstream.Cluster {
	switch r.a.routes.Lookup(topic).Target() {
	case ToDestination:
		return r.a.dst
	case ToSource:
		if !r.a.leaseValid() {
			return nil
		}
		// Count, then confirm the route: a route change the count
		// missed is one this lookup sees.
		r.a.inflight.add1(topic, 1)
		target := r.a.routes.Lookup(topic).Target()
		if target == ToSource {
			return r.a.src // counted
		}
		r.a.inflight.add1(topic, -1)
		if target == ToDestination {
			return r.a.dst
		}
	}
	return nil
}

// holdTopics is what the produce hold asks the agent: a produce to a
// topic waits while the topic is MIGRATING in hold mode, and while it is
// bound for the source and the agent holds no lease.
type holdTopics struct{ a *Agent }

var _ hold.Topics = holdTopics{}

// Wait implements hold.Topics.
func (h holdTopics) Wait(topic string) (bool, time.Duration) {
	route := h.a.routes.Lookup(topic)
	switch route.Target() {
	case ToNowhere:
		return route.Mode == migration.Hold, route.HoldMax
	case ToSource:
		return !h.a.leaseValid(), route.HoldMax
	}
	return false, 0
}

// Changed implements hold.Topics: a route change, and a lease renewal.
func (h holdTopics) Changed() []<-chan struct{} {
	if h.a.cp == nil {
		return []<-chan struct{}{h.a.routes.Changed()}
	}
	return []<-chan struct{}{h.a.routes.Changed(), h.a.cp.keeper.Renewed()}
}

// dropSource takes the shards bound for src out of shards, and answers
// their partitions with the retriable error: nothing of them was sent.
func dropSource(shards []*shard, src *upstream.Cluster, codes []int16) []*shard {
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
// Requests wait for it in the chain (see chain.go): produce in the
// produce hold, other writes in leasegate.
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
