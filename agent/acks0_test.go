package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/metrics"
	"github.com/baton-kafka/baton/internal/wait"
)

// acks=0 produce has no response: the agent must forward it and keep
// nothing per request, or a fire-and-forget producer grows it without bound.
func TestAcksZeroKeepsNothing(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	mf, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	f := startFixture(t, nil, agent.Registry(reg), agent.Filters([]filter.Factory{mf}...))
	topic := "fire-and-forget"
	createTopic(t, f.addr, topic, 3)
	cl := newClient(t, f.addr, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	const n = 3000
	for i := range n {
		cl.Produce(context.Background(), &kgo.Record{Value: []byte{byte(i)}}, nil)
	}
	if err := cl.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, fmt.Sprintf("the source to hold all %d acks=0 records", n), func() string {
		if got := endSum(t, f.src.Bootstrap(), topic); got < n {
			return fmt.Sprintf("%d stored", got)
		}
		return ""
	})
	// Every produce passed the response side, with nothing written back.
	wait.For(t, 10*time.Second, "no produce in flight in the agent", func() string {
		if v := metricValue(t, reg, "baton_agent_requests_in_flight", "Produce"); v != 0 {
			return fmt.Sprintf("%v in flight", v)
		}
		return ""
	})
	if metricValue(t, reg, "baton_agent_requests_total", "Produce", "no_response") == 0 {
		t.Error("no produce was counted as no_response")
	}
}

// metricValue returns the value of the gauge or counter name whose labels
// start with labels.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i, want := range labels {
				if i >= len(m.GetLabel()) || m.GetLabel()[i].GetValue() != want {
					continue metrics
				}
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s%v", name, labels)
	return 0
}
