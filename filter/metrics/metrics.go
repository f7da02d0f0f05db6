// Package metrics owns the request metrics filter: requests by api and
// outcome, request and response bytes, and requests in flight, per
// listener. Put it first in a chain so that it sees every request and, on
// the way back, every response.
package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
)

// Factory builds the filter; its collectors are shared by every connection.
type Factory struct {
	requests  *prometheus.CounterVec
	reqBytes  *prometheus.CounterVec
	respBytes *prometheus.CounterVec
	inFlight  *prometheus.GaugeVec
	duration  *prometheus.HistogramVec
}

var (
	_ filter.Factory        = (*Factory)(nil)
	_ filter.RequestFilter  = (*conn)(nil)
	_ filter.ResponseFilter = (*conn)(nil)
)

// New registers the collectors in reg and returns the factory.
func New(reg prometheus.Registerer) (*Factory, error) {
	f := &Factory{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_agent_requests_total", Help: "Requests answered, by api and outcome (ok, error, no_response).",
		}, []string{"api", "outcome"}),
		reqBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_agent_request_bytes_total", Help: "Request body bytes read from clients, by api.",
		}, []string{"api"}),
		respBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_agent_response_bytes_total", Help: "Forwarded response body bytes, by api (agent-built responses are not counted).",
		}, []string{"api"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "baton_agent_requests_in_flight", Help: "Requests read but not yet answered, by api.",
		}, []string{"api"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "baton_agent_request_duration_seconds",
			Help:    "Time from reading a request to its answer being ready, by api.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"api"}),
	}
	for _, c := range []prometheus.Collector{f.requests, f.reqBytes, f.respBytes, f.inFlight, f.duration} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				continue
			}
			return nil, err
		}
	}
	return f, nil
}

// Name implements filter.Factory.
func (*Factory) Name() string { return "metrics" }

// New implements filter.Factory.
func (f *Factory) New(filter.ConnInfo) any { return &conn{f: f} }

type conn struct{ f *Factory }

func (c *conn) OnRequest(_ context.Context, x *filter.Exchange) filter.Status {
	api := kmsg.NameForKey(x.Header.APIKey)
	c.f.reqBytes.WithLabelValues(api).Add(float64(len(x.RawReq)))
	c.f.inFlight.WithLabelValues(api).Inc()
	return filter.Continue
}

func (c *conn) OnResponse(_ context.Context, x *filter.Exchange) filter.Status {
	api := kmsg.NameForKey(x.Header.APIKey)
	c.f.inFlight.WithLabelValues(api).Dec()
	outcome := "ok"
	switch {
	case x.Err != nil:
		outcome = "error"
	case x.NoResponse:
		outcome = "no_response"
	}
	c.f.requests.WithLabelValues(api, outcome).Inc()
	c.f.respBytes.WithLabelValues(api).Add(float64(len(x.RawResp)))
	if !x.Received.IsZero() {
		c.f.duration.WithLabelValues(api).Observe(time.Since(x.Received).Seconds())
	}
	return filter.Continue
}
