package metrics_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/metrics"
)

// answer is the chain's Handler: it answers each request as its body says
// ("ok", "error", "none"), with a forwarded body of 7 bytes for "ok".
type answer struct{}

func (answer) Dispatch(_ context.Context, x *filter.Exchange) filter.Pending {
	switch string(x.RawReq) {
	case "error":
		return filter.Done{Err: errors.New("upstream gone")}
	case "none":
		x.NoResponse = true
	default:
		x.RawResp = []byte("1234567")
	}
	return filter.Done{}
}

// TestCounts runs requests of each outcome through a chain with the
// filter and reads the collectors back.
func TestCounts(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	f, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	// A second listener registering into the same registry shares the
	// collectors instead of failing.
	if _, err := metrics.New(reg); err != nil {
		t.Fatalf("second New on the same registry: %v", err)
	}
	c := filter.NewChain(filter.ConnInfo{}, []filter.Factory{f}, answer{})
	ctx := context.Background()
	send := func(key int16, body string) {
		s := c.Request(ctx, &filter.Exchange{Header: filter.Header{APIKey: key}, RawReq: []byte(body), Received: time.Now()})
		c.Response(ctx, s)
	}
	send(0, "ok")
	send(0, "ok")
	send(0, "none")
	send(3, "error")

	produce, md := kmsg.NameForKey(0), kmsg.NameForKey(3)
	cases := []struct {
		name string
		got  float64
		want float64
	}{
		{"produce ok", value(t, reg, "baton_agent_requests_total", produce, "ok"), 2},
		{"produce no_response", value(t, reg, "baton_agent_requests_total", produce, "no_response"), 1},
		{"metadata error", value(t, reg, "baton_agent_requests_total", md, "error"), 1},
		{"produce request bytes", value(t, reg, "baton_agent_request_bytes_total", produce), 2 + 2 + 4},
		{"produce response bytes", value(t, reg, "baton_agent_response_bytes_total", produce), 2 * 7},
		{"produce in flight after its answers", value(t, reg, "baton_agent_requests_in_flight", produce), 0},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if n := series(t, reg, "baton_agent_request_duration_seconds"); n != 2 {
		t.Errorf("duration series = %d, want 2 (produce, metadata)", n)
	}
}

// value is the value of name's series with the label values given (a
// counter's or a gauge's), read from reg.
func value(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	for _, m := range gather(t, reg, name) {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		match := true
		for i, l := range m.GetLabel() {
			match = match && l.GetValue() == labels[i]
		}
		if match {
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	t.Fatalf("%s has no series %v", name, labels)
	return 0
}

// series counts name's series in reg.
func series(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	return len(gather(t, reg, name))
}

func gather(t *testing.T, reg *prometheus.Registry, name string) []*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}
