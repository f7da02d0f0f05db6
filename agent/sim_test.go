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
// The producers are idempotent: each record is one batch of its pod's
// producer session, with a sequence a retry keeps; now and then, after an
// unacknowledged send, a producer bumps its epoch and resends the record
// at sequence 0 of the new one, as librdkafka does. Both clusters dedupe as
// Kafka does (a batch among the session's last five is answered with the
// first copy's offset; a gap in a session's sequences is an
// OUT_OF_ORDER_SEQUENCE_NUMBER, fatal for librdkafka, and a violation
// here), the agent's real pidmap filter maps sessions to destination
// producer ids (allocated by the simulated destination) with a journal the
// pod keeps across agent restarts (its emptyDir), and the replicator hands
// the last five batches of each session it copied over to the control
// plane, which pushes them in the COMPLETE route. A pod is rescheduled
// with a new producer session and a fresh journal, as a new pod's app.
//
// Checked: invariant 1 (every acked record is in the destination after
// COMPLETE, or in the source while the topic is not COMPLETE), invariant 4
// (no agent writes the source after replication stopped for good, none
// writes the destination before COMPLETE), invariant 5 (an ack only for a
// record the cluster holds, at the offset acked), invariant 6 (after a
// rollback, nothing acked is missing) and invariant 7 (no batch of a
// producer session in the destination twice, no sequence gap, no record
// of a producer id there more often than in the source). A failing
// seed is printed; BATON_SIM_SEED=N replays it, BATON_SIM_SEEDS=N runs N
// seeds (default 5000).

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
	"github.com/baton-kafka/baton/filter/pidmap"
	"github.com/baton-kafka/baton/internal/recordbatch"
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
	if raceEnabled {
		seeds = 500
	}
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

// simRec is one record in a simulated log: one batch of a producer
// session (the client's, on either cluster).
type simRec struct {
	id    int64
	agent bool // written through an agent (not the replicator)
	sess  pidmap.Session
	seq   int32
	at    int64 // the record's timestamp (Unix ms), which every resend keeps
	// dst and dseq: the producer fields an agent wrote it to the
	// destination under.
	dst  pidmap.Session
	dseq int32
}

// simSeqs is what a cluster keeps of one producer session on the topic's
// partition for its dedupe: the last sequence and the offsets of the last
// five batches.
type simSeqs struct {
	last int32
	offs map[int32]int // sequence -> offset, the last five
	ord  []int32
}

// apply says where a batch of the session at seq goes: a duplicate of one
// of the last five (its offset), the next in order (-1: append it), or a
// gap (ok false).
func (q *simSeqs) apply(seq int32) (dupAt int, ok bool) {
	if off, dup := q.offs[seq]; dup {
		return off, true
	}
	if len(q.ord) > 0 && seq != q.last+1 {
		return 0, false
	}
	return -1, true
}

func (q *simSeqs) note(seq int32, off int) {
	q.last = seq
	q.offs[seq] = off
	q.ord = append(q.ord, seq)
	if len(q.ord) > 5 {
		delete(q.offs, q.ord[0])
		q.ord = q.ord[1:]
	}
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
	// Each cluster's producer state, by the session a batch carries on it.
	srcSeqs, dstSeqs map[pidmap.Session]*simSeqs
	nextDstID        int64 // the destination's producer id allocator

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
	w := &simWorld{t: t, seed: seed, ctx: ctx, acked: map[int64]bool{}, store: controlplane.NewMemStore(),
		srcSeqs: map[pidmap.Session]*simSeqs{}, dstSeqs: map[pidmap.Session]*simSeqs{}, nextDstID: 5000}
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
		pods[i] = &simPod{w: w, base: fmt.Sprintf("agent-%d", i), node: fmt.Sprintf("agent-%d", i), id: int64(i) << 40,
			sess: pidmap.Session{ID: int64(100 * (i + 1))}, journal: &simJournal{}}
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
	// Invariant 7: one copy of each batch of a producer session (a record
	// resent by a rescheduled pod's new session is the app's own copy).
	type batchKey struct {
		sess pidmap.Session
		seq  int32
	}
	seen := map[batchKey]int{}
	for off, r := range log {
		k := batchKey{r.sess, r.seq}
		if first, dup := seen[k]; dup {
			res.failed = fmt.Sprintf("invariant 7: record %d (session %d, sequence %d) is in the %s twice, at %d and %d",
				r.id, r.sess.ID, r.seq, where, first, off)
			return res
		}
		seen[k] = off
	}
	// Invariant 7, across the epochs of a producer id: no record of it in
	// the destination more often than in the source (a record the source
	// holds twice, a resend under a new epoch in PROXY, is what a client
	// writing the source directly gets too, and is copied as it is).
	if res.completed {
		type idRec struct{ pid, id int64 }
		inSrc, inDst := map[idRec]int{}, map[idRec]int{}
		for _, r := range w.src {
			inSrc[idRec{r.sess.ID, r.id}]++
		}
		for off, r := range w.dst {
			k := idRec{r.sess.ID, r.id}
			if inDst[k]++; inDst[k] > max(1, inSrc[k]) {
				res.failed = fmt.Sprintf("invariant 7: record %d of producer %d is in the destination %d times (the last at %d), in the source %d times",
					r.id, r.sess.ID, inDst[k], off, inSrc[k])
				return res
			}
		}
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
		switch rng.IntN(7) {
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
		case 6: // answers from the destination lost for a while
			p.lossyDst.Store(true)
			time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
			p.lossyDst.Store(false)
		}
	}
}

// --- the clusters and the replicator ---

// applySource is a batch's write to the source, deduped as Kafka does:
// the offset it is at, and whether it was already there.
func (w *simWorld) applySource(r simRec) (off int, dup bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.applyLocked(&w.src, w.srcSeqs, r.sess, r.seq, r, "source")
}

// applyDestination is an agent's write to the destination, under the
// producer fields it carries there (p); it must come after COMPLETE
// (invariant 4).
func (w *simWorld) applyDestination(r simRec, p recordbatch.Producer) (off int, dup bool) {
	st, _ := w.store.Topic(simTopic)
	if st.State != migration.Complete {
		w.violate("invariant 4: record %d written to the destination while the topic is %v", r.id, st.State)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.applyLocked(&w.dst, w.dstSeqs, pidmap.Session{ID: p.ID, Epoch: p.Epoch}, p.BaseSeq, r, "destination")
}

// applyLocked appends r to log unless the session's producer state there
// says it is a duplicate; a sequence gap is an OUT_OF_ORDER_SEQUENCE_NUMBER
// (fatal for librdkafka), a violation. w.mu is held.
func (w *simWorld) applyLocked(log *[]simRec, seqs map[pidmap.Session]*simSeqs, sess pidmap.Session, seq int32, r simRec, where string) (int, bool) {
	q := seqs[sess]
	if q == nil {
		q = &simSeqs{offs: map[int32]int{}}
		seqs[sess] = q
	}
	at, ok := q.apply(seq)
	if !ok {
		if w.violation == "" {
			w.violation = fmt.Sprintf("at %s: invariant 7: record %d at sequence %d of producer %d on the %s, whose last is %d: OUT_OF_ORDER_SEQUENCE_NUMBER",
				time.Now().Format("15:04:05.000"), r.id, seq, sess.ID, where, q.last)
		}
		return 0, false
	}
	if at >= 0 {
		return at, true
	}
	*log = append(*log, r)
	q.note(seq, len(*log)-1)
	return len(*log) - 1, false
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

// Stop stops the copy and hands over the last five batches of each
// producer session it copied, as the replicator's record of recent batches
// does (replicator/recent.go).
func (r *simRepl) Stop(context.Context, string) (map[int32]int64, []replicator.SourceBatch, error) {
	if simTrace {
		r.w.trace("replication stopped")
	}
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	r.w.running = false
	var recent []replicator.SourceBatch
	per := map[pidmap.Session]int{}
	for off := r.w.copied - 1; off >= 0; off-- {
		rec := r.w.src[off]
		if per[rec.sess] == 5 {
			continue
		}
		per[rec.sess]++
		recent = append(recent, replicator.SourceBatch{ProducerID: rec.sess.ID, Epoch: rec.sess.Epoch,
			BaseSeq: rec.seq, Records: 1, Offset: int64(off)})
	}
	return map[int32]int64{0: int64(r.w.copied)}, recent, nil
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

	cutOff, slow, lossy, lossyDst atomic.Bool

	mu     sync.Mutex
	agent  *Agent
	cancel context.CancelFunc
	done   chan struct{}
	epoch  int
	// The app's producer session, and the pod's emptyDir: the agent's
	// journal of destination producer ids. Both are new when the pod is
	// rescheduled.
	sess    pidmap.Session
	journal *simJournal
}

// simJournal is a pod's journal (StateDir): it outlives the agent.
type simJournal struct {
	mu sync.Mutex
	ms []pidmap.Mapping
	us []pidmap.Uncertain
}

var _ pidmap.Journal = (*simJournal)(nil)

func (j *simJournal) Record(m pidmap.Mapping) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.ms = append(j.ms, m)
	return nil
}

func (j *simJournal) RecordUncertain(u pidmap.Uncertain) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.us = append(j.us, u)
	return nil
}

func (j *simJournal) uncertain() []pidmap.Uncertain {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]pidmap.Uncertain(nil), j.us...)
}

func (j *simJournal) all() []pidmap.Mapping {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]pidmap.Mapping(nil), j.ms...)
}

// simAlloc is the destination's producer id allocator.
type simAlloc struct{ w *simWorld }

func (a simAlloc) Allocate(context.Context) (int64, int16, error) {
	a.w.mu.Lock()
	defer a.w.mu.Unlock()
	a.w.nextDstID++
	return a.w.nextDstID, 0, nil
}

// simFinder finds a batch in the source log by the client's producer
// fields, or in the destination's by those an agent wrote it under.
type simFinder struct {
	w           *simWorld
	destination bool
}

func (f simFinder) Find(_ context.Context, b pidmap.Batch) (int64, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	log, where := f.w.src, "source"
	if f.destination {
		log, where = f.w.dst, "destination"
	}
	want := pidmap.Session{ID: b.ProducerID, Epoch: b.Epoch}
	for off, r := range log {
		sess, seq := r.sess, r.seq
		if f.destination {
			sess, seq = r.dst, r.dseq
		}
		if sess == want && seq == b.Seq {
			return int64(off), nil
		}
	}
	return 0, fmt.Errorf("%w: sequence %d of producer %d in the %s", pidmap.ErrNotFound, b.Seq, b.ProducerID, where)
}

// simVia is where the simulation's Handler sent a part.
type simVia filter.Cluster

func (v simVia) Cluster() filter.Cluster { return filter.Cluster(v) }
func (simVia) Dead() bool                { return false }

// restart starts a fresh agent for the pod: new route table, new lease;
// rescheduled, under a new node id, as a new pod.
func (p *simPod) restart(rescheduled bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.epoch++
	if rescheduled {
		p.node = fmt.Sprintf("%s-%d", p.base, p.epoch)
		p.sess = pidmap.Session{ID: p.sess.ID + 1}
		p.journal = &simJournal{}
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
	pm, err := pidmap.New(pidmap.Config{Allocator: simAlloc{p.w}, Source: simFinder{p.w, false}, Destination: simFinder{p.w, true},
		Copied:  func(topic string) *pidmap.Copied { return a.routes.Lookup(topic).copied },
		Journal: p.journal, Restored: p.journal.all(), RestoredUncertain: p.journal.uncertain(), Timeout: simForward, Log: simQuiet})
	if err != nil {
		p.w.violate("pidmap: %v", err)
		return
	}
	a.pidmap = pm
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

func (p *simPod) current() (*Agent, pidmap.Session) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.agent, p.sess
}

// alive reports whether a is still the pod's agent: a killed agent's
// answers never reach the app.
func (p *simPod) alive(a *Agent) bool {
	cur, _ := p.current()
	return cur == a
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
			for _, b := range tp.SourceBatches {
				tr.SourceBatches = append(tr.SourceBatches, &batonv1.SourceBatch{Partition: b.Partition, ProducerId: b.ProducerID,
					ProducerEpoch: int32(b.Epoch), BaseSequence: b.BaseSeq, Records: b.Records, Offset: b.Offset})
			}
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

// produce is the app, an idempotent producer: records one at a time, one
// batch each, each retried under its sequence until acked, as a producer
// does with a retriable error. Now and then, after an unacked send, it
// bumps its epoch and sends the record again at sequence 0 of the new
// epoch, as librdkafka does on some errors (finding 16 of
// docs/reliability.md), if the agent that answered is still running. A rescheduled pod's app starts a new session,
// and sends its unacked record again in it.
func (p *simPod) produce(stop <-chan struct{}, rng *rand.Rand) {
	id := p.id
	var podSess, sess pidmap.Session
	var seq int32
	var at int64
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(40+rng.IntN(160)) * time.Millisecond):
		}
		a, cur := p.current()
		if a == nil {
			continue // no agent: the app's connection is refused; retry
		}
		if cur != podSess {
			podSess, sess, seq = cur, cur, 0
		}
		if at == 0 {
			at = time.Now().UnixMilli()
		}
		switch {
		case p.send(a, simRec{id: id, agent: true, sess: sess, seq: seq, at: at}, rng):
			id++
			seq++
			at = 0
		case p.alive(a) && rng.IntN(8) == 0:
			// A bump follows an answer (or a timeout) the client got from
			// a live agent: a killed agent's client sees its connection
			// close, and retries under its sequence.
			sess.Epoch++
			seq = 0
			if simTrace {
				p.w.trace("%s: record %d unacked: the app bumps its epoch to %d", p.base, id, sess.Epoch)
			}
		}
	}
}

// send is one produce of record id through agent a, as produce() in
// router.go does it: the agent's filter chain holds the request
// (filter/hold), then decides where it goes (filter/route, which counts a
// source-bound write in flight), the in-flight count runs until the source
// answered or F passed, an unanswered write is retriable.
func (p *simPod) send(a *Agent, r simRec, rng *rand.Rand) bool {
	ctx := p.w.ctx
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.Topics = []kmsg.ProduceRequestTopic{{Topic: simTopic, Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0,
		Records: pinTestSeqBatchAt(strconv.FormatInt(r.id, 10), r.sess.ID, r.sess.Epoch, r.seq, r.at)}}}}
	x := &filter.Exchange{Header: filter.Header{APIKey: 0, APIVersion: 9}, Req: req, Received: time.Now()}
	h := &simHandler{p: p, a: a, r: r, rng: rng}
	chain := filter.NewChain(filter.ConnInfo{}, a.chain(), h)
	chain.Response(ctx, chain.Request(ctx, x))
	return h.acked
}

// simHandler is the chain's Handler in the simulation: one record's
// produce, decided and written when the chain dispatches it.
type simHandler struct {
	p     *simPod
	a     *Agent
	r     simRec
	rng   *rand.Rand
	acked bool
}

func (h *simHandler) Dispatch(_ context.Context, x *filter.Exchange) filter.Pending {
	x.Resp = kmsg.NewPtrProduceResponse() // the outcome is h.acked
	part := &x.Parts()[0]
	switch {
	case part.Answered && part.Code == 0: // a batch already written (pidmap)
		h.acked = h.p.alive(h.a) && h.p.ack(h.r.id, &h.p.w.dst, int(part.Offset))
	case part.Answered:
		h.acked = false
	default:
		h.acked = h.p.write(h.a, part, h.r, h.rng)
	}
	return filter.Done{}
}

// write is the produce of record r once the chain let it on, to the
// cluster the route filter chose (and, for the source, counted in flight).
// A write is applied within F of being sent or never, and its answer may
// be lost; an agent killed meanwhile answers nothing.
func (p *simPod) write(a *Agent, part *filter.Part, r simRec, rng *rand.Rand) bool {
	switch part.To {
	case filter.Destination:
		return p.writeDestination(a, part, r, rng)
	case filter.Nowhere:
		return false // retriable
	}
	fwd := a.forwardDeadline([]string{simTopic})
	start := time.Now()
	if simTrace {
		p.w.trace("%s: record %d (seq %d) to the source, F %v, lease valid %v, routes %v", p.base, r.id, r.seq, fwd, a.leaseValid(), a.routes.Lookup(simTopic))
	}
	type answer struct{ off int }
	answered := make(chan answer, 1)
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
		off, _ := p.w.applySource(r)
		if simTrace {
			p.w.trace("%s: record %d applied on the source at %d (sent at %s)", p.base, r.id, off, start.Format("05.000"))
		}
		time.Sleep(answerIn)
		if !dropAnswer {
			answered <- answer{off}
		}
	}()
	timer := time.NewTimer(time.Until(start.Add(fwd)))
	defer timer.Stop()
	select {
	case ans := <-answered:
		a.inflight.done([]string{simTopic}, true, start, fwd)
		return p.alive(a) && p.ack(r.id, &p.w.src, ans.off)
	case <-timer.C:
		a.inflight.done([]string{simTopic}, false, start, fwd)
		part.Uncertain = true // as the router marks it
		return false          // uncertain: retriable (invariant 5)
	}
}

// writeDestination is a produce to the destination, of the bytes pidmap
// planned (its copy under the destination producer) or the client's.
func (p *simPod) writeDestination(a *Agent, part *filter.Part, r simRec, rng *rand.Rand) bool {
	raw := part.Records
	if part.Send != nil {
		raw = part.Send
	}
	prod, ok := recordbatch.ReadProducer(raw)
	if !ok {
		p.w.violate("record %d to the destination: no producer fields in its batch", r.id)
		return false
	}
	part.Via = simVia(filter.Destination)
	time.Sleep(time.Duration(rng.Int64N(int64(simForward)))) // on its way
	lossy := p.lossyDst.Load() && rng.IntN(2) == 0
	r.dst, r.dseq = pidmap.Session{ID: prod.ID, Epoch: prod.Epoch}, prod.BaseSeq
	off, _ := p.w.applyDestination(r, prod)
	if simTrace {
		p.w.trace("%s: record %d (seq %d) applied on the destination at %d as producer %d seq %d", p.base, r.id, r.seq, off, prod.ID, prod.BaseSeq)
	}
	time.Sleep(time.Duration(rng.Int64N(int64(simForward)))) // the answer on its way
	if simTrace && (lossy || !p.alive(a)) {
		p.w.trace("%s: record %d: the answer from the destination is lost (lossy %v, agent alive %v)", p.base, r.id, lossy, p.alive(a))
	}
	if lossy {
		part.Uncertain = true // as the router marks it: the connection died
		return false          // answered retriable: the client resends it
	}
	return p.alive(a) && p.ack(r.id, &p.w.dst, off)
}

// ack records id as acked at off of log; invariant 5: log holds it there.
func (p *simPod) ack(id int64, log *[]simRec, off int) bool {
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	if off < 0 || off >= len(*log) || (*log)[off].id != id {
		if p.w.violation == "" {
			p.w.violation = fmt.Sprintf("at %s: invariant 5: record %d acked at offset %d, which does not hold it",
				time.Now().Format("15:04:05.000"), id, off)
		}
		return false
	}
	p.w.acked[id] = true
	return true
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
