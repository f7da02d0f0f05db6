package replicas

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/internal/kafkaenv"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/xds"
)

// The harness of package controlplane's cutover tests, as far as the
// replicas' tests need it: kfake clusters with a replicator, a leader on
// etcd, and agent stand-ins. Short leases keep the tests quick; every
// check waits on a condition.
const (
	tLease   = 1200 * time.Millisecond
	tForward = 300 * time.Millisecond
	tTimeout = 10 * time.Second
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// kafkaEnv is a source and destination on kfake with a running replicator
// (package kafkaenv).
type kafkaEnv struct {
	src, dst *embedded.Cluster
	repl     *replication.ReplicatorAdapter
	prod     *kgo.Client
}

func startKafka(t *testing.T, ctx context.Context) *kafkaEnv {
	t.Helper()
	e := kafkaenv.Start(t, ctx)
	return &kafkaEnv{src: e.Src, dst: e.Dst, repl: e.Repl, prod: e.Prod}
}

func (k *kafkaEnv) produce(t *testing.T, ctx context.Context, topic string, n int) {
	t.Helper()
	kafkaenv.Produce(t, ctx, k.prod, topic, n)
}

// leaderOpts are a leader's options on s, watching its records with recs;
// extra come last.
func leaderOpts(k *kafkaEnv, s *controlplane.EtcdStore, recs *Records, extra ...controlplane.Opt) []controlplane.Opt {
	return append([]controlplane.Opt{controlplane.WithStore(s), controlplane.WithReplication(k.repl), controlplane.WithRecords(recs),
		controlplane.LeaseDuration(tLease), controlplane.ForwardDeadline(tForward), controlplane.CutoverTimeout(tTimeout),
		controlplane.Logger(quiet), controlplane.Clusters(&batonv1.Cluster{Name: "source", Bootstrap: k.src.Addrs()},
			&batonv1.Cluster{Name: "destination", Bootstrap: k.dst.Addrs()})},
		extra...)
}

// plane is a leader with its etcd, record watch and gRPC server.
type plane struct {
	cp      *controlplane.ControlPlane
	records *Records
	addr    string
	stop    func()
}

// startPlaneStore starts a leader on st (which it closes) until the test
// ends.
func startPlaneStore(t *testing.T, ctx context.Context, st *controlplane.EtcdStore, k *kafkaEnv, opts ...controlplane.Opt) *plane {
	t.Helper()
	recs := NewRecords(st, quiet)
	cp, err := controlplane.New(ctx, leaderOpts(k, st, recs, opts...)...)
	if err != nil {
		_ = st.Close()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	cp.Register(g)
	go func() { _ = g.Serve(ln) }()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = cp.Run(rctx) }()
	p := &plane{cp: cp, records: recs, addr: ln.Addr().String()}
	var once sync.Once
	p.stop = func() { once.Do(func() { g.Stop(); cancel(); <-done; _ = st.Close() }) }
	t.Cleanup(p.stop)
	return p
}

// standIn is an agent stand-in: the xds client library and the Lease
// service, with no data path. It reports each topic stopped (and drained)
// once it applied MIGRATING or COMPLETE for it.
type standIn struct {
	keeper *xds.LeaseKeeper

	mu      sync.Mutex
	stuck   bool // reports one request in flight on every topic, forever
	version uint64
	routes  map[string]*batonv1.TopicRoute
}

func startAgent(t *testing.T, ctx context.Context, addr, id string) *standIn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	a := &standIn{routes: map[string]*batonv1.TopicRoute{}}
	node := xds.NodeMeta(id, "team-a", "app")
	client, err := xds.NewClient(conn, node, xds.ClientLogger(quiet), xds.Backoff(20*time.Millisecond, 200*time.Millisecond),
		xds.OnRoutes(func(v uint64, rs []*batonv1.TopicRoute) error {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.version = v
			clear(a.routes)
			for _, r := range rs {
				a.routes[r.GetTopic()] = r
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	a.keeper, err = xds.NewLeaseKeeper(conn, node, a.report, xds.ClientLogger(quiet), xds.Backoff(20*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = client.Run(actx) }()
	go func() { defer wg.Done(); _ = a.keeper.Run(actx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return a
}

func (a *standIn) report() (uint64, []*batonv1.TopicDrain) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*batonv1.TopicDrain
	for _, r := range a.routes {
		stopped := r.GetState() == batonv1.State_STATE_MIGRATING || r.GetState() == batonv1.State_STATE_COMPLETE
		d := &batonv1.TopicDrain{Topic: r.GetTopic(), StoppedForwarding: stopped, Drained: stopped}
		if a.stuck {
			d.InFlight, d.Drained = 1, false
		}
		out = append(out, d)
	}
	return a.version, out
}

func (a *standIn) state(topic string) batonv1.State {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.routes[topic].GetState()
}

func eventually(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting until %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// migrateWhenGateOpens starts a cutover of topic, retrying while the gate
// refuses it (replication of a new topic is not measurable at once).
func migrateWhenGateOpens(t *testing.T, ctx context.Context, p *plane, topic string) {
	t.Helper()
	var last error
	for {
		_, err := p.cp.Migrate(ctx, topic, "test")
		if err == nil {
			return
		}
		if !errors.Is(err, controlplane.ErrGateRefused) {
			t.Fatal(err)
		}
		last = err
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting until the gate lets %s migrate; last refusal: %v", topic, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func waitLeases(t *testing.T, ctx context.Context, p *plane, agents ...*standIn) {
	t.Helper()
	v := p.cp.Version()
	eventually(t, ctx, "agents hold leases at the current version", func() bool {
		for _, a := range agents {
			if l := a.keeper.Last(); l == nil || !l.GetGranted() || l.GetRequiredVersion() < v || !a.keeper.Valid() {
				return false
			}
		}
		return true
	})
}

func waitState(t *testing.T, ctx context.Context, p *plane, topic string, want migration.State) {
	t.Helper()
	eventually(t, ctx, fmt.Sprintf("%s is %s", topic, want), func() bool {
		got, _ := p.cp.Topic(topic)
		if got.Cutover == nil && got.State != want && want == migration.Complete && got.Attempts > 0 {
			// Settled the other way: say why at once rather than wait.
			t.Fatalf("the cutover of %s ended in %s, not %s; events: %v", topic, got.State, want, eventLines(t, ctx, p, topic))
		}
		return got.State == want && got.Cutover == nil
	})
}

// eventLines is the topic's event log, one line an event, for failures.
func eventLines(t *testing.T, ctx context.Context, p *plane, topic string) []string {
	t.Helper()
	evs, err := p.cp.Events(ctx, topic, 0)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprintf("%s %s %s->%s %s: %s", e.Time.Format("15:04:05.000"), e.Kind, e.From, e.To, e.Agent, e.Reason))
	}
	return out
}

func kinds(t *testing.T, ctx context.Context, p *plane, topic string) []string {
	t.Helper()
	evs, err := p.cp.Events(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		out = append(out, e.Kind)
	}
	return out
}
