package controlplane

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-kafka/baton/migration"
)

// cutoverBuckets span a cutover's life: a drain and a final copy take
// seconds; DefaultCutoverTimeout (10 s) rolls back, and a longer
// --cutover-timeout allows minutes.
var cutoverBuckets = []float64{0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600}

// Outcomes of a cutover, the outcome label of
// baton_controlplane_cutover_duration_seconds.
const (
	outcomeCompleted  = "completed"
	outcomeRolledBack = "rolled_back"
)

// stepBuckets span one step of a cutover: an event-driven drain or final
// copy takes milliseconds; a drain that waits for a lease, seconds.
var stepBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// cutoverMetrics are the cutovers' histograms.
type cutoverMetrics struct {
	// durations is baton_controlplane_cutover_duration_seconds{outcome}.
	durations *prometheus.HistogramVec
	// steps is baton_controlplane_cutover_step_duration_seconds{step}.
	steps *prometheus.HistogramVec
}

// newCutoverMetrics registers the cutovers' histograms.
func newCutoverMetrics(reg prometheus.Registerer) (cutoverMetrics, error) {
	m := cutoverMetrics{
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "baton_controlplane_cutover_duration_seconds",
			Help:    "Cutovers from MIGRATING pushed to COMPLETE stored (outcome completed) or PROXY stored again (rolled_back).",
			Buckets: cutoverBuckets,
		}, []string{"outcome"}),
		steps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "baton_controlplane_cutover_step_duration_seconds",
			Help: "Steps of the cutovers, by the event that ends each: drained, source_fenced, end_offsets, lag_zero, " +
				"replication_stopped, guard_lifted, completed (each since the one before, the first since MIGRATING was pushed).",
			Buckets: stepBuckets,
		}, []string{"step"}),
	}
	for _, c := range []prometheus.Collector{m.durations, m.steps} {
		if err := reg.Register(c); err != nil {
			return cutoverMetrics{}, fmt.Errorf("%w: metrics: %w", ErrBadConfig, err)
		}
	}
	return m, nil
}

// observeCutover records a step's duration from the event that ends it,
// and a decided cutover's duration from the event that says it was decided: every path that stores COMPLETE or rolls back
// (cutover, resume, rollback) appends one of these two, once, with the
// attempt's start.
func (cp *ControlPlane) observeCutover(e Event) {
	if e.StartedAt.IsZero() {
		return
	}
	if e.Took > 0 {
		cp.cutoverMetrics.steps.WithLabelValues(e.Kind).Observe(e.Took.Seconds())
	}
	var outcome string
	switch e.Kind {
	case EventCompleted:
		outcome = outcomeCompleted
	case EventRolledBack:
		outcome = outcomeRolledBack
	default:
		return
	}
	cp.cutoverMetrics.durations.WithLabelValues(outcome).Observe(e.Time.Sub(e.StartedAt).Seconds())
}

var (
	// topicStateDesc is one series per managed topic and state, 1 for the
	// state the topic is in: a dashboard's state timeline and an alert on
	// MIGRATING read it.
	topicStateDesc = prometheus.NewDesc("baton_controlplane_topic_state",
		"1 for the migration state a managed topic is in, 0 for the others.", []string{"topic", "state"}, nil)
	// agentsDesc counts the agents `baton agents` lists, by namespace and
	// whether their lease is valid now. The control plane keeps every
	// agent it has seen, so expired counts agents gone for good too.
	agentsDesc = prometheus.NewDesc("baton_controlplane_agents",
		"Agents known to the control plane, by namespace and lease (valid or expired).", []string{"namespace", "lease"}, nil)
)

// managedStates are the states a managed topic can be in.
var managedStates = []migration.State{migration.Reject, migration.Proxy, migration.Migrating, migration.Complete}

// stateCollector exports the topics' states and the agents' leases at
// each scrape, from the control plane's own view.
type stateCollector struct{ cp *ControlPlane }

var _ prometheus.Collector = stateCollector{}

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- topicStateDesc; ch <- agentsDesc }

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range c.cp.Topics() {
		for _, s := range managedStates {
			v := 0.0
			if t.State == s {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(topicStateDesc, prometheus.GaugeValue, v, t.Name, s.String())
		}
	}
	n := map[[2]string]int{}
	now := c.cp.now()
	c.cp.mu.Lock()
	for _, a := range c.cp.agents {
		lease := "expired"
		if now.Before(a.ExpiresAt) {
			lease = "valid"
		}
		n[[2]string{a.Namespace, lease}]++
	}
	c.cp.mu.Unlock()
	for k, v := range n {
		ch <- prometheus.MustNewConstMetric(agentsDesc, prometheus.GaugeValue, float64(v), k[0], k[1])
	}
}
