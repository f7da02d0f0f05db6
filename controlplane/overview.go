package controlplane

import (
	"time"

	"github.com/baton-kafka/baton/migration"
)

// Overview is what the web console polls besides topics and agents (GET
// /v1/overview, package httpapi): the config version agents should have
// acked, and each topic's time lag and copy progress.
type Overview struct {
	// Version is the current config version (TopicRoutes); an agent whose
	// acked version is lower has not applied the latest change yet.
	Version uint64 `json:"version"`
	// At is when the numbers were read, on the control plane's clock: the
	// console divides the change in Copied between two reads by the
	// change in At for a copy rate.
	At     time.Time       `json:"at"`
	Topics []TopicProgress `json:"topics"`
}

// TopicProgress is one topic's replication as the control plane knows it.
type TopicProgress struct {
	Topic string          `json:"topic"`
	State migration.State `json:"state"`
	// Lag is the time lag (nanoseconds), LagError why it is not known.
	// Neither is set for a COMPLETE topic: nothing copies it any more.
	Lag      time.Duration `json:"lag,omitempty"`
	LagError string        `json:"lagError,omitempty"`
	// Copied is the sum over the topic's partitions of the first source
	// offset not copied yet; absent until every partition has resumed
	// copying, and for a COMPLETE topic.
	Copied *int64 `json:"copied,omitempty"`
}

// Overview returns the config version and every topic's replication.
func (cp *ControlPlane) Overview() Overview {
	topics := cp.Topics()
	o := Overview{Version: cp.Version(), At: cp.now(), Topics: make([]TopicProgress, 0, len(topics))}
	for _, t := range topics {
		p := TopicProgress{Topic: t.Name, State: t.State}
		if t.State != migration.Complete {
			var err error
			if p.Lag, err = cp.cfg.repl.Lag(t.Name); err != nil {
				p.LagError = err.Error()
			}
			if parts, err := cp.cfg.repl.Progress(t.Name); err == nil && len(parts) > 0 {
				var sum int64
				known := true
				for _, next := range parts {
					known = known && next >= 0
					sum += next
				}
				if known {
					p.Copied = &sum
				}
			}
		}
		o.Topics = append(o.Topics, p)
	}
	return o
}
