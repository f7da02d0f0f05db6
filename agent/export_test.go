package agent

// InflightForTest is the agent's count of produce requests to topic the
// source may still write (what heartbeats report).
func (a *Agent) InflightForTest(topic string) int { return a.inflight.count(topic) }

// HeldForTest is how many produce requests the agent holds now, as its
// baton_agent_held_requests gauge says.
func (a *Agent) HeldForTest() int {
	mfs, err := a.cfg.registry.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "baton_agent_held_requests" {
			return int(mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	return 0
}
