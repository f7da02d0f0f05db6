package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane/internal/kafkaenv"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/xds"
)

// Short leases keep the tests quick; every check waits on a condition. The
// cutover timeout is the default: under a loaded CI machine (-race, JVM
// brokers of other packages) a shorter one rolled cutovers back.
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

// plane is a control plane with its store (etcd, or a MemStore: mem) and
// gRPC server.
type plane struct {
	cp    *ControlPlane
	store *EtcdStore
	mem   *MemStore
	addr  string
	stop  func()
}

func startPlane(t *testing.T, ctx context.Context, dir, addr string, k *kafkaEnv, opts ...Opt) *plane {
	t.Helper()
	st, err := OpenEmbedded(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	return startPlaneStore(t, ctx, st, addr, k, opts...)
}

// startPlaneStore is startPlane on a store of the test's; the plane closes it.
func startPlaneStore(t *testing.T, ctx context.Context, st *EtcdStore, addr string, k *kafkaEnv, opts ...Opt) *plane {
	t.Helper()
	cp, err := New(ctx, append([]Opt{WithStore(st), WithReplication(k.repl), LeaseDuration(tLease), ForwardDeadline(tForward),
		CutoverTimeout(tTimeout), Logger(quiet),
		Clusters(&batonv1.Cluster{Name: "source", Bootstrap: k.src.Addrs()}, &batonv1.Cluster{Name: "destination", Bootstrap: k.dst.Addrs()})},
		opts...)...)
	if err != nil {
		_ = st.Close()
		t.Fatal(err)
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	cp.Register(g)
	go func() { _ = g.Serve(ln) }()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = cp.Run(rctx) }()
	p := &plane{cp: cp, store: st, addr: ln.Addr().String()}
	var once sync.Once
	p.stop = func() { once.Do(func() { g.Stop(); cancel(); <-done; _ = st.Close() }) }
	t.Cleanup(p.stop)
	return p
}

// standIn is an agent stand-in: the xds client library and the Lease
// service, with no data path. It reports each topic stopped (and drained)
// once it applied MIGRATING or COMPLETE for it.
type standIn struct {
	id     string
	client *xds.Client
	keeper *xds.LeaseKeeper
	cancel context.CancelFunc

	mu      sync.Mutex
	stuck   bool                       // reports one request in flight on every topic, forever
	acked   map[string]map[int32]int64 // reported as the acked ends
	version uint64
	routes  map[string]*batonv1.TopicRoute
}

func startAgent(t *testing.T, ctx context.Context, addr, id string) *standIn {
	t.Helper()
	return startAgentIn(t, ctx, addr, id, "team-a", "app")
}

// startAgentIn is startAgent reporting namespace and workload.
func startAgentIn(t *testing.T, ctx context.Context, addr, id, namespace, workload string) *standIn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	a := &standIn{id: id, routes: map[string]*batonv1.TopicRoute{}}
	node := xds.NodeMeta(id, namespace, workload)
	a.client, err = xds.NewClient(conn, node, xds.ClientLogger(quiet), xds.Backoff(20*time.Millisecond, 200*time.Millisecond),
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
	a.cancel = cancel
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = a.client.Run(actx) }()
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
		d := &batonv1.TopicDrain{Topic: r.GetTopic(), StoppedForwarding: stopped, Drained: stopped, AckedEnds: a.acked[r.GetTopic()]}
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

// addAndMigrate adds topic, waits for agents to hold leases at the current
// version and for the gate to pass, and starts a cutover.
func addAndMigrate(t *testing.T, ctx context.Context, p *plane, topic string, agents ...*standIn) {
	t.Helper()
	if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: topic, State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	waitLeases(t, ctx, p, agents...)
	migrateWhenGateOpens(t, ctx, p, topic)
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
		if !errors.Is(err, ErrGateRefused) {
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

func waitState(t *testing.T, ctx context.Context, p *plane, topic string, want migration.State) Topic {
	t.Helper()
	var got Topic
	eventually(t, ctx, fmt.Sprintf("%s is %s", topic, want), func() bool {
		got, _ = p.cp.Topic(topic)
		if got.Cutover == nil && got.State != want && want == migration.Complete && got.Attempts > 0 {
			// Settled the other way: say why at once rather than wait.
			t.Fatalf("the cutover of %s ended in %s, not %s; events: %v", topic, got.State, want, eventLines(t, ctx, p, topic))
		}
		return got.State == want && got.Cutover == nil
	})
	return got
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

// wantInOrder checks that want appears in got as a subsequence.
// wantEvents waits until topic's log holds want as a subsequence: an event
// is written just after the state change it reports, so a test that saw
// the state may look a moment before the event lands.
func wantEvents(t *testing.T, ctx context.Context, p *plane, topic string, want ...string) {
	t.Helper()
	wait.Until(10*time.Second, func() string {
		if inOrder(kinds(t, ctx, p, topic), want) || ctx.Err() != nil {
			return ""
		}
		return "not yet"
	})
	wantInOrder(t, kinds(t, ctx, p, topic), want...)
}

func inOrder(got, want []string) bool {
	i := 0
	for _, k := range got {
		if i < len(want) && k == want[i] {
			i++
		}
	}
	return i == len(want)
}

func wantInOrder(t *testing.T, got []string, want ...string) {
	t.Helper()
	i := 0
	for _, k := range got {
		if i < len(want) && k == want[i] {
			i++
		}
	}
	if i < len(want) {
		t.Errorf("events %v: missing %q (want in order %v)", got, want[i], want)
	}
}

func TestCutover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k := startKafka(t, ctx)

	t.Run("all agents drain: COMPLETE", func(t *testing.T) {
		p := startPlane(t, ctx, t.TempDir(), "", k)
		a, b := startAgent(t, ctx, p.addr, "a"), startAgent(t, ctx, p.addr, "b")
		k.produce(t, ctx, "drain", 50)
		addAndMigrate(t, ctx, p, "drain", a, b)
		top := waitState(t, ctx, p, "drain", migration.Complete)
		eventually(t, ctx, "agents applied COMPLETE", func() bool {
			return a.state("drain") == batonv1.State_STATE_COMPLETE && b.state("drain") == batonv1.State_STATE_COMPLETE
		})
		if top.Attempts != 1 {
			t.Errorf("attempts %d", top.Attempts)
		}
		// The producer is idempotent: its last batches per partition come
		// with the COMPLETE route, for agents to answer retries (§9).
		a.mu.Lock()
		copied := a.routes["drain"].GetSourceBatches()
		a.mu.Unlock()
		if len(copied) == 0 || len(copied) != len(top.SourceBatches) {
			t.Errorf("COMPLETE route carries %d source batches, the stored topic %d; want the producer's last ones", len(copied), len(top.SourceBatches))
		}
		perPart := map[int32]int{}
		for _, b := range copied {
			perPart[b.GetPartition()]++
			if b.GetOffset() >= 50 || b.GetRecords() != 1 {
				t.Errorf("source batch %v: the producer wrote 50 single-record batches", b)
			}
		}
		for p, n := range perPart {
			if n > 5 {
				t.Errorf("partition %d: %d source batches of one producer, want at most its last 5", p, n)
			}
		}
		wantEvents(t, ctx, p, "drain", EventAdded, EventInitiated, EventWaitingOnAgent, EventAgentDrained,
			EventDrained, EventEndOffsets, EventLagZero, EventReplStopped, EventGuardLifted, EventCompleted)
		// COMPLETE is one-way; a second migrate or an abort is refused.
		if _, err := p.cp.SetState(ctx, "drain", migration.Proxy, "test"); !errors.Is(err, ErrIllegalTransition) {
			t.Errorf("COMPLETE -> PROXY: %v", err)
		}
		if _, err := p.cp.Abort(ctx, "drain", "test", ""); !errors.Is(err, ErrIllegalTransition) {
			t.Errorf("abort after COMPLETE: %v", err)
		}
		if _, err := p.cp.Migrate(ctx, "nope", "test"); !errors.Is(err, ErrUnknownTopic) {
			t.Errorf("migrate unknown: %v", err)
		}
	})

	t.Run("silent agent: waits lease grant + lease + F", func(t *testing.T) {
		// A longer lease than the other cases: the migrate below must start
		// while the silent agent's lease still runs, however slow the
		// machine, for the wait on it to be seen.
		const lease = 4 * time.Second
		p := startPlane(t, ctx, t.TempDir(), "", k, LeaseDuration(lease))
		a, silent := startAgent(t, ctx, p.addr, "a"), startAgent(t, ctx, p.addr, "silent")
		k.produce(t, ctx, "silent", 50)
		if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: "silent"}, "test"); err != nil {
			t.Fatal(err)
		}
		waitLeases(t, ctx, p, a, silent)
		eventually(t, ctx, "the gate can measure the lag", func() bool { _, err := k.repl.Lag("silent"); return err == nil })
		silent.cancel() // stops heartbeating and xDS
		migrateWhenGateOpens(t, ctx, p, "silent")
		waitState(t, ctx, p, "silent", migration.Complete)
		evs, _ := p.cp.Events(ctx, "silent", 0)
		var granted, expired, completed time.Time
		for _, av := range p.cp.Agents() {
			if av.Node == "silent" {
				granted = av.GrantedAt
			}
		}
		for _, e := range evs {
			switch {
			case e.Kind == EventAgentExpired && e.Agent == "silent":
				expired = e.Time
			case e.Kind == EventCompleted:
				completed = e.Time
			}
		}
		if expired.IsZero() || completed.IsZero() {
			t.Fatalf("events %v: want agent_lease_expired for silent, then completed", kinds(t, ctx, p, "silent"))
		}
		if granted.IsZero() {
			t.Fatal("the silent agent has no recorded lease grant: the wait below would prove nothing")
		}
		if safe := granted.Add(lease + tForward); expired.Before(safe) || completed.Before(safe) {
			t.Errorf("proceeded at %v / %v, before the silent agent's grant %v + lease + F = %v", expired, completed, granted, safe)
		}
		wantEvents(t, ctx, p, "silent", EventInitiated, EventWaitingOnAgent, EventAgentExpired, EventDrained, EventCompleted)
	})

	t.Run("replication stuck: rollback to PROXY", func(t *testing.T) {
		p := startPlane(t, ctx, t.TempDir(), "", k)
		a := startAgent(t, ctx, p.addr, "a")
		k.produce(t, ctx, "stuck", 20)
		if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: "stuck"}, "test"); err != nil {
			t.Fatal(err)
		}
		waitLeases(t, ctx, p, a)
		eventually(t, ctx, "replication caught up", func() bool { l, err := k.repl.Lag("stuck"); return err == nil && l == 0 })
		if err := k.repl.R.Pause("stuck"); err != nil {
			t.Fatal(err)
		}
		k.produce(t, ctx, "stuck", 20)
		if _, err := p.cp.Migrate(ctx, "stuck", "test"); err != nil {
			t.Fatal(err)
		}
		eventually(t, ctx, "agent saw MIGRATING", func() bool { return a.state("stuck") == batonv1.State_STATE_MIGRATING })
		waitState(t, ctx, p, "stuck", migration.Proxy)
		eventually(t, ctx, "agent told to forward again", func() bool { return a.state("stuck") == batonv1.State_STATE_PROXY })
		wantEvents(t, ctx, p, "stuck", EventInitiated, EventDrained, EventEndOffsets, EventTimedOut, EventRolledBack)
		// Rollback restarted (resumed) replication: it catches up again.
		eventually(t, ctx, "replication resumed", func() bool { l, err := k.repl.Lag("stuck"); return err == nil && l == 0 })
	})

	t.Run("abort mid-cutover", func(t *testing.T) {
		p := startPlane(t, ctx, t.TempDir(), "", k)
		a := startAgent(t, ctx, p.addr, "a")
		hold := startAgent(t, ctx, p.addr, "holder")
		k.produce(t, ctx, "abort", 20)
		if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: "abort"}, "test"); err != nil {
			t.Fatal(err)
		}
		waitLeases(t, ctx, p, a, hold)
		// The holder keeps renewing but never reports the topic stopped,
		// so the cutover waits on it.
		hold.mu.Lock()
		hold.stuck = true
		hold.mu.Unlock()
		migrateWhenGateOpens(t, ctx, p, "abort")
		if _, err := p.cp.Migrate(ctx, "abort", "test"); !errors.Is(err, ErrCutoverRunning) {
			t.Errorf("second migrate: %v", err)
		}
		eventually(t, ctx, "waiting on the holder", func() bool {
			return slices.Contains(kinds(t, ctx, p, "abort"), EventWaitingOnAgent)
		})
		got, err := p.cp.Abort(ctx, "abort", "operator", "changed my mind")
		if err != nil {
			t.Fatal(err)
		}
		if got.State != migration.Proxy {
			t.Errorf("after abort: %v", got.State)
		}
		wantEvents(t, ctx, p, "abort", EventInitiated, EventWaitingOnAgent, EventAborted, EventRolledBack)
		evs, _ := p.cp.Events(ctx, "abort", 0)
		for _, e := range evs {
			if e.Kind == EventAborted && (e.Actor != "operator" || e.Reason != "changed my mind" || e.Attempt != 1) {
				t.Errorf("aborted event %+v", e)
			}
		}
	})

	t.Run("restart during PROXY and during MIGRATING", func(t *testing.T) {
		dir := t.TempDir()
		p := startPlane(t, ctx, dir, "", k)
		addr := p.addr
		k.produce(t, ctx, "restart", 20)
		if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: "restart", Mode: "retriable"}, "test"); err != nil {
			t.Fatal(err)
		}
		v := p.cp.Version()
		p.stop()

		p = startPlane(t, ctx, dir, addr, k)
		top, err := p.cp.Topic("restart")
		if err != nil || top.State != migration.Proxy || top.Mode != "retriable" || p.cp.Version() != v {
			t.Fatalf("after restart in PROXY: %+v, version %d (want %d), %v", top, p.cp.Version(), v, err)
		}
		a := startAgent(t, ctx, addr, "a")
		holder := startAgent(t, ctx, addr, "holder")
		waitLeases(t, ctx, p, a, holder)
		holder.mu.Lock()
		holder.stuck = true // never drains
		holder.mu.Unlock()
		migrateWhenGateOpens(t, ctx, p, "restart")
		eventually(t, ctx, "agent saw MIGRATING", func() bool { return a.state("restart") == batonv1.State_STATE_MIGRATING })
		p.stop() // mid-cutover

		p = startPlane(t, ctx, dir, addr, k)
		top, _ = p.cp.Topic("restart")
		if top.State != migration.Proxy || top.Cutover != nil {
			t.Fatalf("after restart mid-cutover: %+v", top)
		}
		eventually(t, ctx, "agent told to forward again", func() bool { return a.state("restart") == batonv1.State_STATE_PROXY })
		wantEvents(t, ctx, p, "restart", EventAdded, EventInitiated, EventWaitingOnAgent, EventRecovered, EventRolledBack)
		// And a later attempt completes once the holder drains.
		holder.cancel()
		migrateWhenGateOpens(t, ctx, p, "restart")
		top = waitState(t, ctx, p, "restart", migration.Complete)
		if top.Attempts != 2 {
			t.Errorf("attempts %d, want 2", top.Attempts)
		}
	})
}
