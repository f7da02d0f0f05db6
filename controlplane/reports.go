package controlplane

import (
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
)

// ReportObserver is told of every agent heartbeat the control plane takes,
// its own and those other replicas recorded (replicas.go), after the
// control plane took it: the per-namespace rollout learns from them which
// namespaces write each topic (package controlplane/rollout's Writers).
// It is called with none of the control plane's locks held, on the
// heartbeat's path: it MUST NOT block.
type ReportObserver interface {
	ObserveReport(req *batonv1.HeartbeatRequest, at time.Time)
}

// ObserveReports sets who is told of the agents' heartbeats (default
// none).
func ObserveReports(o ReportObserver) Opt {
	return optFunc(func(c *config) {
		if o != nil {
			c.reports = o
		}
	})
}

// noReports is the ReportObserver when none is set.
type noReports struct{}

func (noReports) ObserveReport(*batonv1.HeartbeatRequest, time.Time) {}
