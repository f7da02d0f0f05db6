package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/agent/internal/upstream"
	"github.com/baton-kafka/baton/filter"
)

// handlerFunc adapts a function to filter.Handler.
type handlerFunc func(ctx context.Context, x *filter.Exchange) filter.Pending

func (f handlerFunc) Dispatch(ctx context.Context, x *filter.Exchange) filter.Pending {
	return f(ctx, x)
}

// offlineAgent is an agent whose clusters are never asked (nothing here
// reaches a broker), advertising produce v0 to v12 as if both clusters
// had answered ApiVersions.
func offlineAgent(t *testing.T) *Agent {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	a := &Agent{
		cfg:     config{forwardDeadline: time.Second},
		log:     quiet,
		routes:  NewRouteTable(nil),
		metrics: newMetrics(prometheus.NewRegistry()),
	}
	a.src = upstream.New(upstream.Config{Name: "source", Bootstrap: []string{"127.0.0.1:1"}, PoolSize: 1,
		DialTimeout: time.Second, ReadTimeout: time.Second, Log: quiet})
	a.dst = upstream.New(upstream.Config{Name: "destination", Bootstrap: []string{"127.0.0.1:1"}, PoolSize: 1,
		DialTimeout: time.Second, ReadTimeout: time.Second, Log: quiet})
	a.advCache.Store(&advertisedCache{keys: map[int16]versionRange{0: {0, 12}}})
	a.pidmap = a.newPIDMap()
	a.writes = newSourceWrites(false, a.routes)
	return a
}

// The route filter counts a source-bound topic in flight when it routes a
// produce, and the router ends that count in produce(). But the router
// first checks, once more, that the produce's version is advertised, and
// refuses one that no longer is (Done{Err}: the connection closes) before
// produce() runs: the count route took is never ended. What the agent
// advertises changes at run time: the intersection with the destination's
// versions is taken once the destination first answers ApiVersions
// (learnVersions keeps asking in the background when it was down at
// start). A produce between route and dispatch at that moment (a
// microsecond window, or the whole of pidmap's wait for a destination
// producer id in a multi-topic request) leaves its source topic counted in
// flight for good: the topic never drains, and its cutover never
// completes. Before the refactor the router checked the version and then
// counted, in one call.
func TestProduceRefusedAtDispatchEndsItsInflightCount(t *testing.T) {
	t.Parallel()
	for _, acks := range []int16{-1, 1, 0} {
		t.Run(map[int16]string{-1: "acks=all", 1: "acks=1", 0: "acks=0"}[acks], func(t *testing.T) {
			t.Parallel()
			a := offlineAgent(t)
			rt := a.newRouter(1)
			h := handlerFunc(func(ctx context.Context, x *filter.Exchange) filter.Pending {
				// Between the route filter and the router: the
				// destination's ApiVersions land, and it serves
				// produce up to v11 only.
				a.advCache.Store(&advertisedCache{src: a.src.VersionsSeen(), dst: a.dst.VersionsSeen(),
					keys: map[int16]versionRange{0: {0, 11}}})
				return rt.Dispatch(ctx, x)
			})
			const topic = "orders"
			req := kmsg.NewPtrProduceRequest()
			req.Version, req.Acks, req.TimeoutMillis = 12, acks, 30000
			req.Topics = []kmsg.ProduceRequestTopic{{Topic: topic, Partitions: []kmsg.ProduceRequestTopicPartition{{
				Partition: 0, Records: pinTestBatch("v")}}}}
			x := &filter.Exchange{Header: filter.Header{APIKey: 0, APIVersion: 12}, Req: req, Received: time.Now()}
			ctx := context.Background()
			chain := filter.NewChain(filter.ConnInfo{}, a.chain(), h)
			chain.Response(ctx, chain.Request(ctx, x))
			if !errors.Is(x.Err, ErrUnsupportedRequest) {
				t.Fatalf("the produce ended with %v, want the router's ErrUnsupportedRequest (the version is no longer advertised)", x.Err)
			}
			if n := a.inflight.count(topic); n != 0 {
				t.Errorf("%s is still counted %d in flight after its produce was refused unsent: it can never drain", topic, n)
			}
		})
	}
}
