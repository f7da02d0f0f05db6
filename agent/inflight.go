package agent

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/baton-kafka/baton/agent/internal/upstream"
	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/route"
)

var _ route.Counter = (*inflight)(nil)

// What the agent forwarded to the source and the source may still write,
// per topic, for the drain the control plane waits on before a cutover
// (docs/design.md §6): produce requests counted from the route filter
// (filter/route) until settled, and the offsets the source acked through
// this agent.

// ackedEnds keeps, per topic and partition, the offset after the last
// record the source acked through this agent. A leader answers an acks=1
// write before its followers have it, above the high watermark that the
// control plane reads at the cutover; the control plane waits for these.
type ackedEnds struct {
	mu sync.Mutex
	m  map[string]map[int32]int64
}

// note records that the source acked offsets up to end (exclusive).
func (e *ackedEnds) note(topic string, partition int32, end int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[string]map[int32]int64{}
	}
	ps := e.m[topic]
	if ps == nil {
		ps = map[int32]int64{}
		e.m[topic] = ps
	}
	ps[partition] = max(ps[partition], end)
}

// of returns a copy of topic's acked ends; nil if none.
func (e *ackedEnds) of(topic string) map[int32]int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.m[topic]) == 0 {
		return nil
	}
	return maps.Clone(e.m[topic])
}

// inflight counts forwarded produce requests per topic that the source
// may still write. A request stops counting when the source answers it,
// even late (one answered retriable at the forward deadline counts on until
// its answer comes); when its connection dies, one forward deadline after
// the death; an acks=0 request, one forward deadline after it was sent. The
// broker may still be working on it until then, and the control plane must
// not count the topic drained before.
type inflight struct {
	mu sync.Mutex
	n  map[string]int
	// settled, if set, is called (without mu) each time a topic's count
	// ends at zero: the agent reports a drain at once (Agent.settled).
	settled func(topic string)
}

func (f *inflight) add(topics []string, d int) {
	var zero []string
	f.mu.Lock()
	if f.n == nil {
		f.n = map[string]int{}
	}
	for _, t := range topics {
		f.n[t] += d
		if f.n[t] <= 0 {
			delete(f.n, t)
			if d < 0 {
				zero = append(zero, t)
			}
		}
	}
	f.mu.Unlock()
	if f.settled != nil {
		for _, t := range zero {
			f.settled(t)
		}
	}
}

// Add is add for one topic, without a slice (route.Counter).
func (f *inflight) Add(topic string, d int) {
	f.mu.Lock()
	if f.n == nil {
		f.n = map[string]int{}
	}
	f.n[topic] += d
	zero := f.n[topic] <= 0
	if zero {
		delete(f.n, topic)
	}
	f.mu.Unlock()
	if zero && d < 0 && f.settled != nil {
		f.settled(topic)
	}
}

func (f *inflight) count(topic string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[topic]
}

// done ends the count for topics: now if answered, else at sent + deadline.
func (f *inflight) done(topics []string, answered bool, sent time.Time, deadline time.Duration) {
	if len(topics) == 0 {
		return
	}
	if wait := time.Until(sent.Add(deadline)); !answered && wait > 0 {
		time.AfterFunc(wait, func() { f.add(topics, -1) })
		return
	}
	f.add(topics, -1)
}

// sourceUnsent ends the in-flight count of the topics the route filter
// counted that sent does not hold: nothing of theirs reached the source.
func (a *Agent) sourceUnsent(counted, sent []string) {
	for _, t := range counted {
		if !slices.Contains(sent, t) {
			a.inflight.Add(t, -1)
		}
	}
}

// forwardedTopics returns the distinct topics of the shards that went to
// the source, for the in-flight counts.
func forwardedTopics(ss []sent, parts []filter.Part) []string {
	var out []string
	for _, sh := range ss {
		if sh.err != nil || parts[sh.s.idx[0]].To != filter.Source {
			continue
		}
		for _, i := range sh.s.idx {
			if !slices.Contains(out, parts[i].Topic) {
				out = append(out, parts[i].Topic)
			}
		}
	}
	return out
}

// settleInflight ends one produce's in-flight count for topics (see
// inflight) once the source can no longer write it: when the source
// answered each of its calls in ss, or, for a call whose connection died
// first, a forward deadline after the death (the broker may still be
// working on what it read). A call answered retriable at the forward
// deadline is still on its connection and its answer may come: it counts
// until then. ss are the request's shards as sent; those that failed to
// send were never written and topics does not count them.
//
// settled, if not nil, is called for each call to src once it settled,
// with ss's index and when (its answer read, or its connection dead).
func (a *Agent) settleInflight(topics []string, ss []sent, src *upstream.Cluster, settled func(i int, at time.Time)) {
	if len(topics) == 0 {
		return
	}
	var calls []*upstream.Call
	pending := false
	for _, s := range ss {
		if s.err != nil || s.cl == nil || s.s.up != src {
			continue
		}
		calls = append(calls, s.cl)
		select {
		case <-s.cl.Done():
		default:
			pending = true
		}
	}
	finish := func() {
		now := time.Now()
		var died time.Time
		for i, s := range ss {
			if s.err != nil || s.cl == nil || s.s.up != src {
				continue
			}
			answered, at := s.cl.Settled()
			if !answered && at.After(died) {
				died = at
			}
			if settled != nil {
				if answered || at.After(now) {
					at = now // answered by now
				}
				settled(i, at)
			}
		}
		a.inflight.done(topics, died.IsZero(), died, a.forwardDeadline(topics))
	}
	if !pending {
		finish()
		return
	}
	// Bounded: a connection dies once its oldest call waited the stall
	// timeout, failing every call on it.
	go func() {
		for _, cl := range calls {
			<-cl.Done()
		}
		finish()
	}()
}
