package replicator

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	lag, topicLag, mapped     *prometheus.GaugeVec
	records, bytes, batches   *prometheus.CounterVec
	skipped, errors, lost     *prometheus.CounterVec
	produceLatency            *prometheus.HistogramVec
	groupSynced, groupClamped *prometheus.CounterVec
	groupSkippedActive        prometheus.Counter
	configChanges             *prometheus.CounterVec
	reencoded                 *prometheus.CounterVec
	partitionError            *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "baton_replicator_lag_seconds",
			Help: "How long ago the oldest source record not yet copied was appended, per partition; 0 when caught up."}, []string{"topic", "partition"}),
		topicLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "baton_replicator_topic_lag_seconds",
			Help: "The largest partition lag of a topic."}, []string{"topic"}),
		mapped: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "baton_replicator_parity_mapped",
			Help: "1 when the partition's offsets are translated through an offset map, 0 for exact parity."}, []string{"topic", "partition"}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "baton_replicator_records_total",
			Help: "Records copied to the destination."}, []string{"topic"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "baton_replicator_bytes_total",
			Help: "Record batch bytes copied to the destination."}, []string{"topic"}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "baton_replicator_batches_total",
			Help: "Record batches copied to the destination."}, []string{"topic"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "baton_replicator_skipped_batches_total",
			Help: "Source batches not copied: transaction markers (control) and aborted transactional data."}, []string{"topic", "reason"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "baton_replicator_errors_total",
			Help: "Failed copy steps and topic setups, by kind."}, []string{"topic", "kind"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "baton_replicator_source_lost_records_total",
			Help: "Source records deleted (retention) before they were copied."}, []string{"topic"}),
		produceLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "baton_replicator_produce_seconds",
			Help:    "Destination acknowledgement latency of one copied batch (acks=all).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"topic"}),
		groupSynced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "baton_replicator_group_offsets_synced_total",
			Help: "Consumer-group partition offsets committed on the destination."}, []string{"topic"}),
		groupClamped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "baton_replicator_group_offsets_clamped_total",
			Help: "Synced group offsets that were beyond the copied progress and clamped to the destination's copied end."}, []string{"topic"}),
		groupSkippedActive: prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_replicator_group_sync_skipped_active_total",
			Help: "Groups left alone in a sync pass because they have active members on the destination."}),
		configChanges: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "baton_replicator_topic_config_changes_total",
			Help: "Topic config changes on the source mirrored to the destination, by op (set or delete)."}, []string{"topic", "op"}),
		reencoded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "baton_replicator_reencoded_batches_total",
			Help: "Source batches re-encoded with contiguous offsets before copying: compaction removed records inside them, or the copy resumed inside them."}, []string{"topic"}),
		partitionError: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "baton_replicator_partition_error",
			Help: "1 while a partition's last copy step failed, labelled with the error kind (a Kafka error name such as MESSAGE_TOO_LARGE or TOPIC_AUTHORIZATION_FAILED); the partition does not advance until a step succeeds."}, []string{"topic", "partition", "kind"}),
	}
	for _, c := range []prometheus.Collector{m.lag, m.topicLag, m.mapped, m.records, m.bytes, m.batches, m.skipped, m.errors, m.lost, m.produceLatency,
		m.groupSynced, m.groupClamped, m.groupSkippedActive, m.configChanges, m.reencoded, m.partitionError} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// forget drops a stopped topic's per-partition gauges.
func (m *metrics) forget(topic string, parts map[int32]*partState) {
	for p := range parts {
		m.lag.DeleteLabelValues(topic, itoa(p))
		m.mapped.DeleteLabelValues(topic, itoa(p))
		m.partitionError.DeletePartialMatch(prometheus.Labels{"topic": topic, "partition": itoa(p)})
	}
	m.topicLag.DeleteLabelValues(topic)
}
