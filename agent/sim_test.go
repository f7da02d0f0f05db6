package agent

// The cutover protocol simulation: the real control plane (state machine,
// cutover orchestrator, lease service) and the agent's real route, lease
// and drain code (RouteTable, LeaseKeeper, the filter chain with the
// produce hold and route, inflight, leaseReport, applyRoutes) on
// virtual time (testing/synctest), with
// in-memory links between them. Around them, in this file: an in-memory
// store, a source and a destination log for one topic, a replicator
// copying between them, producers, and a fault schedule drawn from a seed:
// delayed and dropped heartbeats and route pushes, agents cut off from the
// control plane, agents crashed and restarted, the control plane crashed
// and restarted, writes whose answer is lost, replication stalls, and
// migrations and aborts at random moments.
//
// Every time.Sleep here is a delay of the model on the bubble's virtual
// clock (synctest advances it when every goroutine waits), not a wait for
// the machine: a seed takes milliseconds, whatever the load.
//
// The model of the network: a request the agent writes to the source is
// applied there within F of being sent, or never (its answer may still be
// lost). That is the assumption the protocol's forward deadline rests on.
//
// Checked: invariant 1 (every acked record is in the destination after
// COMPLETE, or in the source while the topic is not COMPLETE), invariant 4
// (no agent writes the source after replication stopped for good, none
// writes the destination before COMPLETE), invariant 5 (an ack only for a
// record the cluster holds) and invariant 6 (after a rollback, nothing
// acked is missing). A failing seed is printed; BATON_SIM_SEED=N replays
// it, BATON_SIM_SEEDS=N runs N seeds (default 5000).

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/baton-kafka/baton/agent/internal/upstream"
	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
	"github.com/baton-kafka/baton/xds"
)

const (
	simTopic   = "orders"
	simLease   = 900 * time.Millisecond
	simForward = 300 * time.Millisecond
	simTimeout = 3 * time.Second
	simRun     = 8 * time.Second // faults and migrations happen in here
	simAgents  = 2
)

var simQuiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestSimulateCutoverProtocol(t *testing.T) {
	seeds, first := 5000, uint64(1)
	if s := os.Getenv("BATON_SIM_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("BATON_SIM_SEEDS=%q: want a positive count", s)
		}
		seeds = n
	}
	if s := os.Getenv("BATON_SIM_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("BATON_SIM_SEED=%q: want a seed", s)
		}
		seeds, first = 1, n
	}
	if testing.Short() {
		seeds = min(seeds, 200)
	}
	var completed, rolledBack, acked atomic.Int64
	// Seeds run two at a time per core: each is one synctest bubble.
	t.Run("seeds", func(t *testing.T) {
		for seed := first; seed < first+uint64(seeds); seed++ {
			t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
				t.Parallel()
				var res simResult
				synctest.Test(t, func(t *testing.T) { res = simulate(t, seed) })
				if res.failed != "" {
					t.Fatalf("seed %d: %s\nreplay: BATON_SIM_SEED=%d go test -race -run 'TestSimulateCutoverProtocol' ./agent/", seed, res.failed, seed)
				}
				if res.completed {
					completed.Add(1)
				}
				rolledBack.Add(int64(res.rollbacks))
				acked.Add(int64(res.acked))
			})
		}
	})
	t.Logf("simulated %d seeds: %d topics completed, %d rollbacks, %d records acked", seeds, completed.Load(), rolledBack.Load(), acked.Load())
	if seeds >= 100 && (completed.Load() == 0 || acked.Load() == 0) {
		t.Errorf("no seed completed a cutover, or none acked a record: the simulation tests nothing")
	}
}

type simResult struct {
	failed    string
	completed bool
	rollbacks int
	acked     int
}

// simRec is one record in a simulated log.
type simRec struct {
	id    int64
	agent bool // written through an agent (not the replicator)
}

// simWorld is everything of one seed.
type simWorld struct {
	t    *testing.T
	seed uint64
	ctx  context.Context

	mu        sync.Mutex
	src, dst  []simRec
	copied    int // first source offset not copied
	running   bool
	stalled   bool
	violation string
	acked     map[int64]bool

	cp     atomic.Pointer[controlplane.ControlPlane]
	stopCP context.CancelFunc // ends the control plane's Run
	cpDone chan struct{}
	store  *controlplane.MemStore
}

// trace logs what happens when BATON_SIM_TRACE is set (with one seed).
var simTrace = os.Getenv("BATON_SIM_TRACE") != ""

func (w *simWorld) trace(format string, args ...any) {
	if simTrace {
		w.t.Logf("%s "+format, append([]any{time.Now().Format("05.000")}, args...)...)
	}
}

func (w *simWorld) rng(stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(w.seed, stream))
}

func (w *simWorld) violate(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.violation == "" {
		w.violation = fmt.Sprintf("at %s: ", time.Now().Format("15:04:05.000")) + fmt.Sprintf(format, args...)
	}
}

func simulate(t *testing.T, seed uint64) simResult {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &simWorld{t: t, seed: seed, ctx: ctx, acked: map[int64]bool{}, store: controlplane.NewMemStore()}
	if err := w.startControlPlane(); err != nil {
		return simResult{failed: "starting the control plane: " + err.Error()}
	}
	if _, err := w.cp.Load().AddTopic(ctx, controlplane.TopicSpec{Name: simTopic, State: migration.Proxy,
		HoldMax: 1500 * time.Millisecond}, "sim"); err != nil {
		return simResult{failed: "adding the topic: " + err.Error()}
	}

	var wg sync.WaitGroup
	stop := make(chan struct{})
	go1 := func(fn func()) { wg.Add(1); go func() { defer wg.Done(); fn() }() }
	go1(func() { w.copier(stop) })
	pods := make([]*simPod, simAgents)
	for i := range pods {
		pods[i] = &simPod{w: w, base: fmt.Sprintf("agent-%d", i), node: fmt.Sprintf("agent-%d", i), id: int64(i) << 40}
		pods[i].restart(false)
		p := pods[i]
		go1(func() { p.produce(stop, w.rng(uint64(100+i))) })
	}
	go1(func() { w.operator(stop) })
	go1(func() { w.faults(stop, pods) })

	time.Sleep(simRun)
	close(stop)
	wg.Wait()
	for _, p := range pods {
		p.crash()
	}
	// Let writes on their way land (within F) and replication catch up.
	time.Sleep(2 * simForward)
	w.mu.Lock()
	w.stalled = false
	w.mu.Unlock()
	if cp := w.cp.Load(); cp != nil {
		w.stopCP()
		<-w.cpDone
	}
	return w.check()
}

// check verifies invariants 1, 4 and 6 at the end of a run (4 and 5 are
// also checked as writes happen).
func (w *simWorld) check() simResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	res := simResult{acked: len(w.acked)}
	evs, _ := w.store.Events(w.ctx, simTopic, 0)
	for _, e := range evs {
		if e.Kind == controlplane.EventRolledBack {
			res.rollbacks++
		}
	}
	if w.violation != "" {
		res.failed = w.violation
		return res
	}
	st, ok := w.store.Topic(simTopic)
	if !ok {
		res.failed = "the topic is not in the store"
		return res
	}
	res.completed = st.State == migration.Complete
	where, log := "source", w.src
	if res.completed {
		where, log = "destination", w.dst
		// Invariant 4: nothing reached the source past the final copy.
		for off := w.copied; off < len(w.src); off++ {
			if w.src[off].agent {
				res.failed = fmt.Sprintf("invariant 4: record %d written to the source at offset %d after replication stopped at %d",
					w.src[off].id, off, w.copied)
				return res
			}
		}
	}
	in := map[int64]bool{}
	for _, r := range log {
		in[r.id] = true
	}
	for id := range w.acked {
		if !in[id] {
			res.failed = fmt.Sprintf("invariant 1/6: acked record %d is not in the %s (topic %s; source %d records, destination %d, copied %d)",
				id, where, st.State, len(w.src), len(w.dst), w.copied)
			return res
		}
	}
	return res
}

// --- the control plane and its crashes ---

func (w *simWorld) startControlPlane() error {
	cp, err := controlplane.New(w.ctx, controlplane.WithStore(w.store), controlplane.WithReplication(&simRepl{w}),
		controlplane.LeaseDuration(simLease), controlplane.ForwardDeadline(simForward),
		controlplane.CutoverTimeout(simTimeout), controlplane.Logger(simQuiet),
		controlplane.Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"}))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(w.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = cp.Run(ctx) }()
	w.stopCP, w.cpDone = cancel, done
	w.cp.Store(cp)
	return nil
}

func (w *simWorld) crashControlPlane(down time.Duration) {
	cp := w.cp.Swap(nil)
	if cp == nil {
		return
	}
	// A crash: nothing more reaches the store (Run's last flush fails).
	w.store.SetUnavailable(true)
	w.stopCP()
	<-w.cpDone
	w.store.SetUnavailable(false)
	time.Sleep(down)
	if err := w.startControlPlane(); err != nil {
		w.violate("restarting the control plane: %v", err)
	}
}

// operator migrates the topic at random moments, and sometimes aborts.
func (w *simWorld) operator(stop <-chan struct{}) {
	rng := w.rng(1)
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(200+rng.IntN(1500)) * time.Millisecond):
		}
		cp := w.cp.Load()
		if cp == nil {
			continue
		}
		tp, err := cp.Topic(simTopic)
		if err != nil {
			continue
		}
		switch tp.State {
		case migration.Proxy:
			_, _ = cp.Migrate(w.ctx, simTopic, "sim")
		case migration.Migrating:
			if rng.IntN(6) == 0 {
				_, _ = cp.Abort(w.ctx, simTopic, "sim", "sim: operator abort")
			}
		}
	}
}

// faults draws the fault schedule.
func (w *simWorld) faults(stop <-chan struct{}, pods []*simPod) {
	rng := w.rng(2)
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(300+rng.IntN(2500)) * time.Millisecond):
		}
		p := pods[rng.IntN(len(pods))]
		switch rng.IntN(6) {
		case 0: // an agent cut off from the control plane
			if simTrace {
				w.trace("fault: %s cut off", p.base)
			}
			d := time.Duration(rng.IntN(3000)) * time.Millisecond
			p.cutOff.Store(true)
			time.Sleep(d)
			p.cutOff.Store(false)
		case 1: // an agent crashed and restarted, sometimes as a new pod
			if simTrace {
				w.trace("fault: %s crashed", p.base)
			}
			p.crash()
			time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond)
			p.restart(rng.IntN(2) == 0)
		case 2: // the control plane crashed and restarted
			if simTrace {
				w.trace("fault: control plane crashed")
			}
			w.crashControlPlane(time.Duration(rng.IntN(2000)) * time.Millisecond)
		case 3: // replication stalled
			w.mu.Lock()
			w.stalled = true
			w.mu.Unlock()
			time.Sleep(time.Duration(rng.IntN(4000)) * time.Millisecond)
			w.mu.Lock()
			w.stalled = false
			w.mu.Unlock()
		case 4: // slow links to the control plane
			p.slow.Store(true)
			time.Sleep(time.Duration(rng.IntN(3000)) * time.Millisecond)
			p.slow.Store(false)
		case 5: // answers from the source lost for a while
			p.lossy.Store(true)
			time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
			p.lossy.Store(false)
		}
	}
}

// --- the clusters and the replicator ---

func (w *simWorld) appendSource(id int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.src = append(w.src, simRec{id: id, agent: true})
}

// appendDestination is an agent's write to the destination; it must come
// after COMPLETE (invariant 4).
func (w *simWorld) appendDestination(id int64) {
	st, _ := w.store.Topic(simTopic)
	if st.State != migration.Complete {
		w.violate("invariant 4: record %d written to the destination while the topic is %v", id, st.State)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dst = append(w.dst, simRec{id: id, agent: true})
}

func (w *simWorld) copier(stop <-chan struct{}) {
	rng := w.rng(3)
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(5+rng.IntN(40)) * time.Millisecond):
		}
		w.copyOnce()
	}
}

func (w *simWorld) copyOnce() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.running || w.stalled {
		return
	}
	if len(w.dst) != w.copied {
		if w.violation == "" {
			w.violation = fmt.Sprintf("invariant 3/4: the destination holds %d records, %d copied: another writer", len(w.dst), w.copied)
		}
		return
	}
	w.dst = append(w.dst, w.src[w.copied:]...)
	w.copied = len(w.src)
}

// simRepl is the Replication the control plane drives.
type simRepl struct{ w *simWorld }

var _ controlplane.Replication = (*simRepl)(nil)

func (r *simRepl) Start(string) error {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	r.w.running = true
	return nil
}

func (r *simRepl) Stop(context.Context, string) (map[int32]int64, []replicator.SourceBatch, error) {
	if simTrace {
		r.w.trace("replication stopped")
	}
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	r.w.running = false
	return map[int32]int64{0: int64(r.w.copied)}, nil, nil
}

func (r *simRepl) SetMigrating(string, bool) error { return nil }

// Diverged implements controlplane.Replication: the simulated destination
// has no other writer before COMPLETE unless an invariant already broke.
func (r *simRepl) Diverged(string) map[int32]string { return nil }

func (r *simRepl) Lag(string) (time.Duration, error) {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	if r.w.copied == len(r.w.src) {
		return 0, nil
	}
	return 100 * time.Millisecond, nil
}

func (r *simRepl) Progress(string) (map[int32]int64, error) {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	return map[int32]int64{0: int64(r.w.copied)}, nil
}

func (r *simRepl) SourceEndOffsets(context.Context, string) (map[int32]int64, error) {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	return map[int32]int64{0: int64(len(r.w.src))}, nil
}

// --- a producer pod: the app and its agent ---

type simPod struct {
	w    *simWorld
	base string
	node string // base, or base-N once rescheduled
	id   int64  // record ids of this pod start here

	cutOff, slow, lossy atomic.Bool

	mu     sync.Mutex
	agent  *Agent
	cancel context.CancelFunc
	done   chan struct{}
	epoch  int
}

// restart starts a fresh agent for the pod: new route table, new lease;
// rescheduled, under a new node id, as a new pod.
func (p *simPod) restart(rescheduled bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.epoch++
	if rescheduled {
		p.node = fmt.Sprintf("%s-%d", p.base, p.epoch)
	}
	node := p.node
	a := &Agent{
		cfg:     config{forwardDeadline: time.Hour}, // the control plane's F must win
		log:     simQuiet,
		routes:  NewRouteTable(nil),
		metrics: newMetrics(prometheus.NewRegistry()),
	}
	a.src = upstream.New(upstream.Config{Name: "source", Bootstrap: []string{"source:9092"}, PoolSize: 1,
		DialTimeout: time.Second, ReadTimeout: time.Second, Log: simQuiet})
	a.dst = upstream.New(upstream.Config{Name: "destination", Bootstrap: []string{"destination:9092"}, PoolSize: 1,
		DialTimeout: time.Second, ReadTimeout: time.Second, Log: simQuiet})
	// The clusters are never asked: the agent advertises produce as if
	// both had answered, so the chain's filters (which leave alone what
	// the agent never advertised) act on the simulation's requests.
	a.advCache.Store(&advertisedCache{keys: map[int16]versionRange{0: {0, 12}}})
	a.pidmap = a.newPIDMap()
	a.writes = newSourceWrites(true, a.routes) // on, as with a control plane
	conn := &simLeaseConn{p: p, node: node, rng: p.w.rng(uint64(200 + 10*p.epoch + int(p.id>>40)))}
	keeper, err := xds.NewLeaseKeeper(conn, xds.NodeMeta(node, "ns", "wl"), a.leaseReport,
		xds.ClientLogger(simQuiet))
	if err != nil {
		p.w.violate("lease keeper: %v", err)
		return
	}
	a.cp = &cpLink{keeper: keeper}
	ctx, cancel := context.WithCancel(p.w.ctx)
	p.agent, p.cancel, p.done = a, cancel, make(chan struct{})
	done := p.done
	rng := p.w.rng(uint64(300 + 10*p.epoch + int(p.id>>40)))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = keeper.Run(ctx) }()
	go func() { defer wg.Done(); p.feedRoutes(ctx, a, rng) }()
	go func() { wg.Wait(); close(done) }()
}

func (p *simPod) crash() {
	p.mu.Lock()
	cancel, done := p.cancel, p.done
	p.agent, p.cancel = nil, nil
	p.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (p *simPod) current() *Agent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.agent
}

// feedRoutes is the xDS push: the control plane's routes reach the agent
// after a delay, not at all while it is cut off.
func (p *simPod) feedRoutes(ctx context.Context, a *Agent, rng *rand.Rand) {
	var applied uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(10+rng.IntN(60)) * time.Millisecond):
		}
		if p.cutOff.Load() {
			continue
		}
		if p.slow.Load() {
			time.Sleep(time.Duration(rng.IntN(600)) * time.Millisecond)
		}
		cp := p.w.cp.Load()
		if cp == nil {
			continue
		}
		v := cp.Version()
		if v <= applied {
			continue
		}
		var trs []*batonv1.TopicRoute
		for _, tp := range cp.Topics() {
			tr := &batonv1.TopicRoute{Topic: tp.Name, State: tp.State.Proto(), Version: tp.Version,
				HoldMax: durationpb.New(tp.HoldMax), ForwardDeadline: durationpb.New(simForward)}
			if tp.Mode == "retriable" {
				tr.Mode = batonv1.HoldMode_HOLD_MODE_RETRIABLE
			}
			trs = append(trs, tr)
		}
		if ctx.Err() != nil {
			return
		}
		if simTrace {
			p.w.trace("%s: applying routes at version %d: %v", p.base, v, trs)
		}
		if err := a.applyRoutes(v, trs); err != nil {
			p.w.violate("applying routes: %v", err)
		}
		applied = v
	}
}

// produce is the app: records one at a time, each retried until acked, as
// a producer does with a retriable error.
func (p *simPod) produce(stop <-chan struct{}, rng *rand.Rand) {
	id := p.id
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(40+rng.IntN(160)) * time.Millisecond):
		}
		a := p.current()
		if a == nil {
			continue // no agent: the app's connection is refused; retry
		}
		if p.send(a, id, rng) {
			id++
		}
	}
}

// send is one produce of record id through agent a, as produce() in
// router.go does it: the agent's filter chain holds the request
// (filter/hold), then decides where it goes (filter/route, which counts a
// source-bound write in flight), the in-flight count runs until the source
// answered or F passed, an unanswered write is retriable.
func (p *simPod) send(a *Agent, id int64, rng *rand.Rand) bool {
	ctx := p.w.ctx
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.Topics = []kmsg.ProduceRequestTopic{{Topic: simTopic, Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0}}}}
	x := &filter.Exchange{Header: filter.Header{APIKey: 0, APIVersion: 9}, Req: req, Received: time.Now()}
	h := &simHandler{p: p, a: a, id: id, rng: rng}
	chain := filter.NewChain(filter.ConnInfo{}, a.chain(), h)
	chain.Response(ctx, chain.Request(ctx, x))
	return h.acked
}

// simHandler is the chain's Handler in the simulation: one record's
// produce, decided and written when the chain dispatches it.
type simHandler struct {
	p     *simPod
	a     *Agent
	id    int64
	rng   *rand.Rand
	acked bool
}

func (h *simHandler) Dispatch(_ context.Context, x *filter.Exchange) filter.Pending {
	x.Resp = kmsg.NewPtrProduceResponse() // the outcome is h.acked
	h.acked = h.p.write(h.a, x.Parts()[0].To, h.id, h.rng)
	return filter.Done{}
}

// write is the produce of record id once the chain let it on, to the
// cluster the route filter chose (and, for the source, counted in flight).
func (p *simPod) write(a *Agent, to filter.Cluster, id int64, rng *rand.Rand) bool {
	switch to {
	case filter.Destination:
		p.w.appendDestination(id)
		p.ack(id, p.w.hasDestination)
		return true
	case filter.Nowhere:
		return false // retriable
	}
	fwd := a.forwardDeadline([]string{simTopic})
	start := time.Now()
	if simTrace {
		p.w.trace("%s: record %d to the source, F %v, lease valid %v, routes %v", p.base, id, fwd, a.leaseValid(), a.routes.Lookup(simTopic))
	}
	answered := make(chan struct{}, 1)
	lossy := p.lossy.Load()
	applyIn := time.Duration(rng.Int64N(int64(fwd)))
	answerIn := time.Duration(rng.Int64N(int64(fwd)))
	dropRequest := lossy && rng.IntN(2) == 0
	dropAnswer := lossy && rng.IntN(2) == 0
	go func() {
		time.Sleep(applyIn) // the source applies it within F, or never
		if dropRequest {
			return
		}
		p.w.appendSource(id)
		if simTrace {
			p.w.trace("%s: record %d applied on the source (sent at %s)", p.base, id, start.Format("05.000"))
		}
		time.Sleep(answerIn)
		if !dropAnswer {
			answered <- struct{}{}
		}
	}()
	timer := time.NewTimer(time.Until(start.Add(fwd)))
	defer timer.Stop()
	select {
	case <-answered:
		a.inflight.done([]string{simTopic}, true, start, fwd)
		p.ack(id, p.w.hasSource)
		return true
	case <-timer.C:
		a.inflight.done([]string{simTopic}, false, start, fwd)
		return false // uncertain: retriable (invariant 5)
	}
}

// ack records id as acked; invariant 5: the cluster holds it.
func (p *simPod) ack(id int64, holds func(int64) bool) {
	if !holds(id) {
		p.w.violate("invariant 5: record %d acked but not written", id)
	}
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	p.w.acked[id] = true
}

func (w *simWorld) hasSource(id int64) bool      { return w.has(&w.src, id) }
func (w *simWorld) hasDestination(id int64) bool { return w.has(&w.dst, id) }

func (w *simWorld) has(log *[]simRec, id int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(*log) - 1; i >= 0; i-- {
		if (*log)[i].id == id {
			return true
		}
	}
	return false
}

// simLeaseConn is the agent's gRPC link to the Lease service: the
// heartbeat reaches the current control plane after a delay, or is lost
// on the way there or back.
type simLeaseConn struct {
	p    *simPod
	node string
	rng  *rand.Rand
	mu   sync.Mutex
}

var _ grpc.ClientConnInterface = (*simLeaseConn)(nil)

var errSimLost = status.Error(codes.Unavailable, "sim: lost")

func (c *simLeaseConn) delay() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := time.Duration(c.rng.IntN(20)) * time.Millisecond
	if c.p.slow.Load() {
		d += time.Duration(c.rng.IntN(int(simLease/time.Millisecond))) * time.Millisecond
	}
	return d
}

func (c *simLeaseConn) lost() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.p.cutOff.Load() || c.rng.IntN(50) == 0
}

func (c *simLeaseConn) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	if method != batonv1.Lease_Heartbeat_FullMethodName {
		return status.Errorf(codes.Unimplemented, "sim: %s", method)
	}
	time.Sleep(c.delay())
	if c.lost() {
		return errSimLost
	}
	cp := c.p.w.cp.Load()
	if cp == nil {
		return status.Error(codes.Unavailable, "sim: control plane down")
	}
	req := args.(*batonv1.HeartbeatRequest)
	resp, err := cp.Heartbeat(ctx, req)
	if err != nil {
		return err
	}
	if simTrace {
		c.p.w.trace("%s: heartbeat sent %s acked %d %v -> granted %v", c.node, req.GetSentAt().AsTime().Format("05.000"), req.GetAckedVersion(), req.GetTopics(), resp.GetGranted())
	}
	time.Sleep(c.delay())
	if c.lost() {
		return errSimLost
	}
	proto.Merge(reply.(proto.Message), resp)
	return ctx.Err()
}

func (c *simLeaseConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "sim: no streams")
}
