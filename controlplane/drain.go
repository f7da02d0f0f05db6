package controlplane

import (
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane/cutover"
)

// noteIncarnation takes the process id (incarnation) a report of a came
// with. A different one than the last means the agent was restarted: the
// earlier process's last grant is kept (EarlierGrantedAt), since produce it
// sent to the source before it died may still land there, up to F after it
// was sent, and the new process's drain reports know nothing of it. An
// agent known without an incarnation (stored before they were recorded)
// counts as an earlier process. Zero (no incarnation sent) changes
// nothing.
func noteIncarnation(a *Agent, inc uint64) {
	if inc == 0 || inc == a.Incarnation {
		return
	}
	if !a.GrantedAt.IsZero() {
		a.EarlierGrantedAt = maxTime(a.EarlierGrantedAt, a.GrantedAt)
	}
	a.Incarnation = inc
}

// DrainReports is a heartbeat's per-topic report, as the leader and the
// followers read it. A topic reported more than once counts as stopped
// only if every entry says so, with the in-flight counts added and the
// larger acked end per partition kept: the cutover must never take a topic
// for drained on the strength of one entry while another says otherwise.
func DrainReports(ds []*batonv1.TopicDrain) map[string]TopicDrain {
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
func (cp *ControlPlane) ackedAbove(topic string, ends map[int32]int64) map[int32]cutover.AckedEnd {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var out map[int32]cutover.AckedEnd
	for _, a := range cp.agents {
		for p, end := range a.Topics[topic].AckedEnds {
			if end <= ends[p] || end <= out[p].End {
				continue
			}
			if out == nil {
				out = map[int32]cutover.AckedEnd{}
			}
			out[p] = cutover.AckedEnd{End: end, Node: a.Node}
		}
	}
	return out
}

// maxTime is the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
