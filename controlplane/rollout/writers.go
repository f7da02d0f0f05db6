package rollout

import (
	"sync"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
)

// Writers is, per topic, the agents that reported writing its source and
// when they last did, learnt from the heartbeats the control plane takes
// (its own, and those other replicas recorded). The zero value is empty
// and ready. Its lock is its own: the control plane calls it with none of
// its locks held.
type Writers struct {
	mu sync.Mutex
	// writes: topic -> node -> its last write (the control plane's clock).
	writes map[string]map[string]time.Time
}

var _ controlplane.ReportObserver = (*Writers)(nil)

// ObserveReport implements controlplane.ReportObserver: it records which
// topics req reports source writes for (acked offset ranges, or writes
// whose offsets the agent never learned).
func (w *Writers) ObserveReport(req *batonv1.HeartbeatRequest, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range req.GetTopics() {
		wrote := false
		for _, pw := range d.GetWrites() {
			wrote = wrote || len(pw.GetAcked()) > 0 || pw.GetUnknownFrom() != nil
		}
		if !wrote {
			continue
		}
		if w.writes == nil {
			w.writes = map[string]map[string]time.Time{}
		}
		if w.writes[d.GetTopic()] == nil {
			w.writes[d.GetTopic()] = map[string]time.Time{}
		}
		w.writes[d.GetTopic()][req.GetNodeId()] = at
	}
}

// current returns, per topic, the nodes that count as its writers at now:
// those of agents still known that hold their lease (expires says until
// when) or wrote it within memory.
func (w *Writers) current(now time.Time, memory time.Duration, expires map[string]time.Time) map[string][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string][]string{}
	for topic, nodes := range w.writes {
		for node, at := range nodes {
			exp, ok := expires[node]
			if !ok || (!now.Before(exp) && now.Sub(at) > memory) {
				continue
			}
			out[topic] = append(out[topic], node)
		}
	}
	return out
}
