package agent

import (
	"time"

	"github.com/baton-kafka/baton/agent/internal/upstream"
)

// settleInflight ends one produce's in-flight count for topics (see
// inflight) once the source can no longer write it: when the source
// answered each of its calls in ss, or, for a call whose connection died
// first, a forward deadline after the death (the broker may still be
// working on what it read). A call answered retriable at the forward
// deadline is still on its connection and its answer may come: it counts
// until then. ss are the request's shards as sent; those that failed to
// send were never written and topics does not count them.
func (a *Agent) settleInflight(topics []string, ss []sent) {
	if len(topics) == 0 {
		return
	}
	var calls []*upstream.Call
	pending := false
	for _, s := range ss {
		if s.err != nil || s.cl == nil || s.s.up != a.src {
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
		var died time.Time
		for _, cl := range calls {
			if answered, at := cl.Settled(); !answered && at.After(died) {
				died = at
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
