package controlplane

import batonv1 "github.com/baton-kafka/baton/api/baton/v1"

// drainReports is a heartbeat's per-topic report. A topic reported more
// than once counts as stopped only if every entry says so, with the
// in-flight counts added: the cutover must never take a topic for drained
// on the strength of one entry while another says otherwise.
func drainReports(ds []*batonv1.TopicDrain) map[string]TopicDrain {
	out := make(map[string]TopicDrain, len(ds))
	for _, d := range ds {
		td := TopicDrain{InFlight: d.GetInFlight(), StoppedForwarding: d.GetStoppedForwarding()}
		if prev, ok := out[d.GetTopic()]; ok {
			td.StoppedForwarding = td.StoppedForwarding && prev.StoppedForwarding
			td.InFlight = prev.InFlight + min(td.InFlight, ^uint32(0)-prev.InFlight) // saturating
		}
		out[d.GetTopic()] = td
	}
	return out
}
