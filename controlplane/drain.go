package controlplane

import batonv1 "github.com/baton-kafka/baton/api/baton/v1"

// drainReports is a heartbeat's per-topic report. A topic reported more
// than once counts as stopped only if every entry says so, with the
// in-flight counts added and the larger acked end per partition kept: the
// cutover must never take a topic for drained on the strength of one entry
// while another says otherwise.
func drainReports(ds []*batonv1.TopicDrain) map[string]TopicDrain {
	out := make(map[string]TopicDrain, len(ds))
	for _, d := range ds {
		td := TopicDrain{InFlight: d.GetInFlight(), StoppedForwarding: d.GetStoppedForwarding()}
		prev, again := out[d.GetTopic()]
		if again {
			td.StoppedForwarding = td.StoppedForwarding && prev.StoppedForwarding
			td.InFlight = prev.InFlight + min(td.InFlight, ^uint32(0)-prev.InFlight) // saturating
			td.AckedEnds = prev.AckedEnds
		}
		for p, end := range d.GetAckedEnds() {
			if td.AckedEnds == nil {
				td.AckedEnds = map[int32]int64{}
			}
			td.AckedEnds[p] = max(td.AckedEnds[p], end)
		}
		out[d.GetTopic()] = td
	}
	return out
}

// ackedAbove returns, per partition of topic, the largest acked end the
// agents reported that lies above ends, and which agent reported it.
func (cp *ControlPlane) ackedAbove(topic string, ends map[int32]int64) map[int32]ackedEnd {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var out map[int32]ackedEnd
	for _, a := range cp.agents {
		for p, end := range a.Topics[topic].AckedEnds {
			if end <= ends[p] || end <= out[p].end {
				continue
			}
			if out == nil {
				out = map[int32]ackedEnd{}
			}
			out[p] = ackedEnd{end, a.Node}
		}
	}
	return out
}

type ackedEnd struct {
	end  int64
	node string
}
