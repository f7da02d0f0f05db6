package agent

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// metrics the agent itself keeps; per-request counts come from the metrics
// filter (package filter/metrics).
type metrics struct {
	conns           prometheus.Gauge
	badFrames       prometheus.Counter
	tlsFailures     prometheus.Counter
	held            prometheus.Gauge
	upstreamLatency *prometheus.HistogramVec
	upstreamErrors  *prometheus.CounterVec
	producePartns   *prometheus.CounterVec
	emulated        prometheus.Histogram
	headroom        *prometheus.CounterVec
	txnRefused      *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		conns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "baton_agent_connections", Help: "Open client connections.",
		}),
		badFrames: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_agent_bad_frames_total", Help: "Connections closed for a malformed or oversized frame.",
		}),
		tlsFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_agent_client_tls_failures_total", Help: "Client connections whose TLS handshake failed.",
		}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "baton_agent_held_requests", Help: "Requests held: produce while its topic is MIGRATING or the agent has no lease, other writes to the source while it has no lease.",
		}),
		upstreamLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "baton_agent_upstream_latency_seconds",
			Help:    "Time from writing a request upstream to its answer, by cluster and api.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"cluster", "api"}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_agent_upstream_errors_total", Help: "Upstream requests that failed without an answer.",
		}, []string{"cluster", "api"}),
		producePartns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_agent_produce_partitions_total", Help: "Partition results of produce requests, by error.",
		}, []string{"error"}),
		emulated: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "baton_agent_latency_emulation_added_seconds",
			Help:    "Delay added to produce responses to emulate the destination's latency in PROXY (filter/latency).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		headroom: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_agent_headroom_warnings_total",
			Help: "Windows in which a producer fell short of its rate at the destination's latency (filter/headroom), by topic and client id.",
		}, []string{"topic", "client_id"}),
		txnRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_agent_transactional_refused_total",
			Help: "Transactional writes (Produce, AddPartitionsToTxn) refused because their topic is COMPLETE (filter/txnguard), by topic.",
		}, []string{"topic"}),
	}
	reg.MustRegister(m.conns, m.badFrames, m.tlsFailures, m.held, m.upstreamLatency, m.upstreamErrors, m.producePartns, m.emulated,
		m.headroom, m.txnRefused)
	return m
}

func (a *Agent) observeUpstream(cluster string, key int16, d time.Duration, err error) {
	api := kmsg.NameForKey(key)
	if err != nil {
		a.metrics.upstreamErrors.WithLabelValues(cluster, api).Inc()
		return
	}
	a.metrics.upstreamLatency.WithLabelValues(cluster, api).Observe(d.Seconds())
}

func (a *Agent) countProduce(resp *kmsg.ProduceResponse) {
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			name := "none"
			if p.ErrorCode != 0 {
				if e := kerr.ErrorForCode(p.ErrorCode); e != nil {
					name = e.Error()
				} else {
					name = strconv.Itoa(int(p.ErrorCode))
				}
			}
			a.metrics.producePartns.WithLabelValues(name).Inc()
		}
	}
}
