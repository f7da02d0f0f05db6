package e2e

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/baton-kafka/baton/agent"
	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
	"github.com/baton-kafka/baton/xds"
)

// TestLatencyEmulation is latency emulation's acceptance test
// (docs/design.md §12): the destination answers every produce only after
// destDelay (a fault on its produce path), the replicator copying S.T to
// D.T measures that, the control plane pushes it to the agent, and a
// franz-go producer writing through the agent in PROXY sees at least the
// destination's latency with emulation on (the p50 of its produce
// latencies is at least destDelay), and the source's with emulation off
// (its p50 below destDelay, which the source never approaches).
func TestLatencyEmulation(t *testing.T) {
	t.Parallel()
	const destDelay = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := startSlowDestination(t, ctx, "pod-latency", destDelay)
	const topic = "latency-emulated"
	if _, err := kadm.NewClient(e.direct).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cp.AddTopic(ctx, controlplane.TopicSpec{Name: topic, State: migration.Proxy,
		Shadow: controlplane.Shadow{LatencyEmulation: true}}, "e2e"); err != nil {
		t.Fatal(err)
	}
	e.feedUntilProfiled(t, ctx, topic, destDelay)

	producer := newClient(t, e.agent.Addr(), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0))
	p50 := func() time.Duration {
		t.Helper()
		var took []time.Duration
		for i := range 21 {
			start := time.Now()
			if err := producer.ProduceSync(ctx, &kgo.Record{Value: []byte{byte(i)}}).FirstErr(); err != nil {
				t.Fatalf("producing through the agent: %v", err)
			}
			took = append(took, time.Since(start))
		}
		slices.Sort(took)
		return took[len(took)/2]
	}
	got := p50()
	t.Logf("emulation on: producer p50 %v (destination delay %v, pushed %s)", got, destDelay, describeRoute(e.agent.Routes().Lookup(topic)))
	if got < destDelay {
		t.Errorf("emulation on: the producer's p50 is %v, want at least the destination's %v", got, destDelay)
	}

	off := false
	if _, err := e.cp.SetShadow(ctx, topic, controlplane.ShadowChange{LatencyEmulation: &off}, "e2e"); err != nil {
		t.Fatal(err)
	}
	wait.For(t, time.Minute, "the agent applied emulation off", func() string {
		if rt := e.agent.Routes().Lookup(topic); rt.LatencyEmulation {
			return "the agent's route: " + describeRoute(rt)
		}
		return ""
	})
	got = p50()
	t.Logf("emulation off: producer p50 %v", got)
	if got >= destDelay {
		t.Errorf("emulation off: the producer's p50 is %v, want the source's, below the destination's %v", got, destDelay)
	}
}

// slowDestination is a source, a destination whose every produce waits
// destDelay (a fault on its produce path) and is then answered as usual,
// the replicator copying between them and measuring that, the control
// plane in process (MemStore) pushing the measurements every 100 ms, and an
// agent under it: what the PROXY-phase features (docs/design.md §12) are
// tested on.
type slowDestination struct {
	direct *kgo.Client // writes the source directly
	cp     *controlplane.ControlPlane
	agent  *agent.Agent
}

func startSlowDestination(t *testing.T, ctx context.Context, node string, destDelay time.Duration, opts ...agent.Opt) *slowDestination {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	src, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	dst, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dst.Close)
	// A slow destination: every produce waits destDelay, then is answered
	// as usual. Only the replicator produces to it.
	kc := dst.Kfake()
	kc.ControlKey(0, func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		kc.SleepControl(func() { time.Sleep(destDelay) })
		return nil, nil, false
	})

	r, err := replicator.New(replicator.Source(src.Addrs()...), replicator.Destination(dst.Addrs()...),
		replicator.SampleInterval(50*time.Millisecond), replicator.MaxBackoff(200*time.Millisecond), replicator.Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	rdone := make(chan struct{})
	go func() { defer close(rdone); _ = r.Run(rctx) }()
	t.Cleanup(func() { rcancel(); <-rdone })

	direct := newClient(t, src.Bootstrap())
	cp, err := controlplane.New(ctx, controlplane.WithStore(controlplane.NewMemStore()),
		controlplane.WithReplication(&replication.ReplicatorAdapter{R: r, Source: kadm.NewClient(direct)}),
		controlplane.LatencyRefresh(100*time.Millisecond), controlplane.Logger(quiet),
		controlplane.Clusters(&batonv1.Cluster{Name: "source", Bootstrap: src.Addrs()},
			&batonv1.Cluster{Name: "destination", Bootstrap: dst.Addrs()}))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	cp.Register(g)
	go func() { _ = g.Serve(ln) }()
	cpctx, cpcancel := context.WithCancel(ctx)
	cpdone := make(chan struct{})
	go func() { defer close(cpdone); _ = cp.Run(cpctx) }()
	t.Cleanup(func() { g.Stop(); cpcancel(); <-cpdone })

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	a, err := agent.New(append([]agent.Opt{agent.Listen("127.0.0.1:0"), agent.Source(src.Addrs()...), agent.Destination(dst.Addrs()...),
		agent.ControlPlane(conn, xds.NodeMeta(node, "team-a", "app")), agent.Logger(agentLogger(node))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithCancel(ctx)
	adone := make(chan struct{})
	go func() { defer close(adone); _ = a.Run(actx) }()
	t.Cleanup(func() { acancel(); <-adone })
	select {
	case <-a.Ready():
	case <-ctx.Done():
		t.Fatal("the agent never served")
	}

	return &slowDestination{direct: direct, cp: cp, agent: a}
}

// feedUntilProfiled writes topic's source directly until the agent holds a
// latency profile of at least destDelay for it: the replicator measures the
// destination from what it copies.
func (e *slowDestination) feedUntilProfiled(t *testing.T, ctx context.Context, topic string, destDelay time.Duration) {
	t.Helper()
	wait.For(t, 2*time.Minute, "the agent holds the destination's latency profile", func() string {
		if err := e.direct.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("feed")}).FirstErr(); err != nil {
			return "feeding the source: " + err.Error()
		}
		rt := e.agent.Routes().Lookup(topic)
		if rt.State != migration.Proxy || rt.Latency == nil || rt.Latency.P50 < destDelay {
			return "the agent's route: " + describeRoute(rt)
		}
		return ""
	})
}

func describeRoute(r agent.Route) string {
	s := r.State.String()
	if r.LatencyEmulation {
		s += ", emulation on"
	}
	if r.Latency != nil {
		s += ", p50 " + r.Latency.P50.String() + " p99 " + r.Latency.P99.String()
	}
	return s
}
