package cutover

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The simulator runs one attempt per seed on virtual time against a world
// of agents, a source, a replication and a store, all drawn from the seed:
//
//   - agents heartbeat (leases granted by GrantLease), apply MIGRATING a
//     while after it is pushed, or are cut off and never do; each forwards
//     writes until it applies MIGRATING or its lease ends (past its lease
//     too on a topic the source fence closes, until the fence refuses
//     them, answered within the F they hold, maybe an earlier control
//     plane's, capped at UnleasedForward), and a write lands up to F after
//     it was sent;
//   - the source's high watermark follows what landed up to the writer's
//     F later (the followers' copy); agents that stay connected ack some writes at
//     landing (acks=1, above the watermark) and report what they acked;
//   - replication copies up to the watermark at its own pace, and may stop
//     short or diverge;
//   - store writes fail, one kind reported failed but applied (COMPLETE),
//     the leader is lost (a new one Recovers from the stored step), also
//     after a rollback began (its PROXY write failed; at StepDone it had
//     stored StepRollingBack first, RollBackMarks), the operator aborts,
//     and the clock jumps.
//
// After every step it checks the invariants: one decision per attempt,
// nothing asked after it, and no COMPLETE after a rollback began, by
// whichever control plane; never COMPLETE at or past the deadline; never
// COMPLETE while an agent can still land a write the copy misses, nor
// before the destination holds every acked record. That a rollback
// restarts replication, so that nothing written under PROXY is lost, is
// the driver's (controlplane's rollback tests): the world does it.

// simSeeds is how many seeds TestSimulator runs (raceSeeds under -race);
// BATON_SIM_SEEDS overrides it, BATON_SIM_SEED replays one with its log.
// make test runs it both ways.
const (
	simSeeds  = 100_000
	raceSeeds = 10_000
)

func TestSimulator(t *testing.T) {
	t.Parallel()
	if s := os.Getenv("BATON_SIM_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("BATON_SIM_SEED=%q: %v", s, err)
		}
		w := simulateLog(seed, 0, true)
		for _, l := range w.log {
			t.Log(l)
		}
		if w.violation != "" {
			t.Fatalf("seed %d: %s", seed, w.violation)
		}
		return
	}
	n := simSeeds
	if raceEnabled {
		n = raceSeeds
	}
	if s := os.Getenv("BATON_SIM_SEEDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("BATON_SIM_SEEDS=%q: want a count >= 1", s)
		}
		n = v
	}
	// Seeds are independent: one worker per core, each taking every
	// workers-th seed; the lowest seed that breaks an invariant is said.
	workers := runtime.GOMAXPROCS(0)
	type result struct {
		outcomes map[string]int
		bad      uint64
		why      string
	}
	results := make([]result, workers)
	var wg sync.WaitGroup
	for k := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := result{outcomes: map[string]int{}, bad: math.MaxUint64}
			for seed := uint64(k); seed < uint64(n); seed += uint64(workers) {
				w := simulate(seed, 0)
				if w.violation != "" {
					r.bad, r.why = seed, w.violation
					break
				}
				r.outcomes[w.outcome]++
			}
			results[k] = r
		}()
	}
	wg.Wait()
	outcomes := map[string]int{}
	bad, why := uint64(math.MaxUint64), ""
	for _, r := range results {
		for o, c := range r.outcomes {
			outcomes[o] += c
		}
		if r.bad < bad {
			bad, why = r.bad, r.why
		}
	}
	if why != "" {
		t.Fatalf("seed %d: %s (replay: BATON_SIM_SEED=%d go test -run 'TestSimulator$' -v ./controlplane/cutover)", bad, why, bad)
	}
	t.Logf("%d seeds: %v", n, outcomes)
	// The seeds must reach every ending, or the invariants were checked
	// on too little.
	for _, o := range []string{"complete", "complete-recovered", "complete-stored-despite-error", "rolled-back-" + KindTimedOut,
		"rolled-back-" + KindFailed, "rolled-back-" + KindAborted, "rolled-back-recovered",
		"rolled-back-recovered-after-rollback"} {
		if outcomes[o] == 0 {
			t.Errorf("no seed ended %s: the simulator does not reach it", o)
		}
	}
}

// A seed replayed gives the same actions, event for event.
func TestSimulatorReplays(t *testing.T) {
	t.Parallel()
	for seed := range uint64(200) {
		a, b := simulate(seed, 0), simulate(seed, 0)
		if a.digest != b.digest || len(a.log) != len(b.log) {
			t.Fatalf("seed %d: replayed, %d actions (digest %x), then %d (digest %x)", seed, len(a.log), a.digest, len(b.log), b.digest)
		}
	}
}

// Each guard of the rules is needed: with it off, some seed breaks an
// invariant.
func TestSimulatorNeedsEveryGuard(t *testing.T) {
	t.Parallel()
	for _, g := range []struct {
		name string
		off  guards
	}{
		{"drain", guardDrain},
		{"replication reached the ends", guardReplicationEnds},
		{"acked above the high watermark", guardAckedAbove},
		{"deadline", guardDeadline},
		{"one decision", guardOneDecision},
		{"rollback marks StepDone", guardRollBackMark},
		{"route's F in the fence's wait", guardFenceForward},
		{"unleased F in the fence's wait", guardUnleasedForward},
	} {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(simSeeds) {
				if w := simulate(seed, g.off); w.violation != "" {
					t.Logf("with the %s guard off, seed %d: %s", g.name, seed, w.violation)
					return
				}
			}
			t.Errorf("with the %s guard off, no seed of %d broke an invariant: the simulator cannot tell it is needed", g.name, simSeeds)
		})
	}
}

var simStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	simLease   = 3 * time.Second
	simForward = 500 * time.Millisecond
	simTimeout = 8 * time.Second
	simPoll    = 100 * time.Millisecond
)

type simAgent struct {
	node string
	// heartbeat period; cutAt: no heartbeat nor route from then on (zero:
	// never cut off); applyAt: when it applies MIGRATING, if it gets it.
	period, sendEvery time.Duration
	cutAt, applyAt    time.Time
	nextHB, nextSend  time.Time
	leaseEnd          time.Time
	acksOne           bool // acks=1: acked at landing
	// heldF is the F of the last heartbeat answer it got before MIGRATING,
	// maybe an earlier control plane's; without a lease it answers within
	// it, capped at UnleasedForward.
	heldF    time.Duration
	view     Agent
	ackedEnd []int64 // reported at heartbeats
	ownAcked []int64
}

// simWrite is one produce an agent forwarded: sent, landed on the source
// (given an offset, committed later), and settled (answered, or given up
// on at F) with an ack or not.
type simWrite struct {
	agent     int
	partition int
	sendAt    time.Time
	landAt    time.Time
	landed    bool
	offset    int64
	settleAt  time.Time
	acked     bool
	f         time.Duration // the writer's F
}

type simWorld struct {
	rng      *rand.Rand
	now      time.Time
	cfg      Config
	spec     Spec
	attempt  *Attempt
	agents   []*simAgent
	inflight []simWrite
	// per partition: what landed (log end), when each landed record is
	// committed (the high watermark follows), the destination's next.
	leo       []int64
	commitAt  [][]time.Time
	dst       []int64
	replOn    bool
	replRate  float64 // records per ms
	replCarry float64
	stopShort bool
	fenceAt   time.Time // enforced from (zero: not up)

	storedStep Step
	decision   string // "", "complete", "proxy"
	decidedAt  time.Time
	stoppedAt  time.Time
	asked      bool // the core asked for a decision (StoreComplete or RollBack)
	rolledBack bool // the driver began the rollback the core asked for
	after      bool // an action came after a decision

	outcome   string
	violation string
	verbose   bool
	log       []string
	digest    uint64
	hwAt      []int // per partition: records committed by now
}

// actionName names an action for the digest without formatting it.
func actionName(a Action) string {
	switch a.(type) {
	case ReadLeases:
		return "ReadLeases"
	case ReadAgents:
		return "ReadAgents"
	case StoreStep:
		return "StoreStep"
	case PutFence:
		return "PutFence"
	case CheckFence:
		return "CheckFence"
	case Sleep:
		return "Sleep"
	case RaisePriority:
		return "RaisePriority"
	case ReadEndOffsets:
		return "ReadEndOffsets"
	case ReadProgress:
		return "ReadProgress"
	case StopReplication:
		return "StopReplication"
	case LiftGuard:
		return "LiftGuard"
	case StoreComplete:
		return "StoreComplete"
	}
	return fmt.Sprintf("%T", a)
}

func simulate(seed uint64, off guards) *simWorld { return simulateLog(seed, off, false) }

func simulateLog(seed uint64, off guards, verbose bool) *simWorld {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	w := &simWorld{rng: rng, now: simStart, replRate: 0.2 + rng.Float64()*2, verbose: verbose}
	w.cfg = Config{Lease: simLease, Forward: simForward, Fenced: rng.IntN(4) != 0,
		UnleasedForward: time.Duration(100+rng.IntN(1400)) * time.Millisecond}
	w.spec = Spec{Topic: "t", Version: 7, Deadline: simStart.Add(simTimeout), FenceAtCutover: rng.IntN(4) == 0}
	if rng.IntN(3) == 0 {
		w.spec.ForwardDeadline = time.Duration(rng.IntN(800)) * time.Millisecond
	}
	parts := 1 + rng.IntN(2)
	w.leo, w.commitAt, w.dst, w.hwAt = make([]int64, parts), make([][]time.Time, parts), make([]int64, parts), make([]int, parts)
	w.replOn = true
	if rng.IntN(20) == 0 {
		w.replRate = 0.002 // a copy too slow for the timeout
	}
	w.stopShort = rng.IntN(40) == 0
	for i := range 1 + rng.IntN(3) {
		a := &simAgent{node: "agent-" + strconv.Itoa(i), period: time.Duration(200+rng.IntN(900)) * time.Millisecond,
			sendEvery: time.Duration(20+rng.IntN(100)) * time.Millisecond, ackedEnd: make([]int64, parts), ownAcked: make([]int64, parts)}
		// Its lease was granted a while before MIGRATING, at version 6.
		granted := simStart.Add(-time.Duration(rng.Int64N(int64(a.period))))
		a.view = Agent{Node: a.node, GrantedAt: granted, LastHeartbeat: granted, AckedVersion: 6}
		a.heldF = time.Duration(rng.IntN(2000)) * time.Millisecond
		a.leaseEnd = granted.Add(simLease)
		a.nextHB = granted.Add(a.period)
		a.nextSend = simStart.Add(-time.Duration(rng.IntN(50)) * time.Millisecond)
		a.applyAt = simStart.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
		if rng.IntN(5) == 0 {
			a.cutAt = simStart.Add(time.Duration(rng.IntN(2000)-1000) * time.Millisecond)
		} else {
			// acks=1 only from an agent that stays connected: one the
			// drain counts out by its lease may report what it acked
			// above the high watermark after the end offsets are read,
			// which no rule here can wait for.
			a.acksOne = rng.IntN(2) == 0
		}
		w.agents = append(w.agents, a)
	}
	w.attempt = New(w.cfg, w.spec)
	w.attempt.off = off
	w.storedStep = StepWaitAgents
	w.run()
	return w
}

// say adds what happened to the digest (and, replaying one seed, to the
// log): its name, what it is about, and the virtual time.
func (w *simWorld) say(name, about string, args ...any) {
	const prime = 1099511628211
	d := w.digest ^ uint64(w.now.Sub(simStart))
	for _, s := range [2]string{name, about} {
		for i := 0; i < len(s); i++ {
			d = (d ^ uint64(s[i])) * prime
		}
		d *= prime
	}
	w.digest = d
	if w.verbose {
		w.log = append(w.log, fmt.Sprintf("%6dms %s %s %v", w.now.Sub(simStart).Milliseconds(), name, about, args))
	}
}

func (w *simWorld) fail(format string, args ...any) {
	if w.violation == "" {
		w.violation = fmt.Sprintf(format, args...)
	}
}

// run drives the attempt: the core's actions against the world, the
// world's answers back, with store failures, leader loss, aborts and clock
// jumps drawn as it goes.
func (w *simWorld) run() {
	queue := w.attempt.Step(w.now, Start{})
	for steps := 0; len(queue) > 0 && w.violation == ""; steps++ {
		if steps > 10_000 {
			w.fail("no decision after %d steps", steps)
			return
		}
		act := queue[0]
		queue = queue[1:]
		if w.asked {
			if _, ok := act.(Emit); !ok {
				w.after = true
			}
		}
		var ev Event
		switch a := act.(type) {
		case Emit:
			w.say(a.Kind, a.Agent, a.Reason)
			continue
		case RollBack:
			w.rollBack(a)
			continue
		}
		if w.rng.IntN(400) == 0 {
			// The operator aborts: the action is not carried out, and the
			// abort is fed in its place.
			w.say("Abort", actionName(act))
			queue = append(queue, w.attempt.Step(w.now, Abort{Actor: "operator"})...)
			continue
		}
		ev = w.do(act)
		if w.violation != "" || w.decision != "" && w.outcome != "" && ev == nil {
			return
		}
		// The leader is lost: the attempt is abandoned mid-step, and a
		// control plane taking over recovers from the stored step.
		if w.decision == "" && w.rng.IntN(300) == 0 {
			w.advance(time.Duration(w.rng.IntN(3000)) * time.Millisecond)
			w.recoverAfterLoss()
			return
		}
		if w.rng.IntN(500) == 0 {
			w.advance(time.Duration(w.rng.IntN(4000)) * time.Millisecond) // the clock jumps
		}
		if ev != nil {
			if c, ok := ev.(CompleteStored); ok && c.Err != nil {
				w.asked = false // reported failed: the attempt decides again
			}
			queue = append(queue, w.attempt.Step(w.now, ev)...)
		}
		if w.decision != "" && w.rng.IntN(20) == 0 {
			// An abort after the decision: it must change nothing.
			queue = append(queue, w.attempt.Step(w.now, Abort{Actor: "operator"})...)
		}
		w.check()
	}
	if w.violation == "" && w.decision == "" {
		w.fail("the attempt asked for nothing more, undecided")
	}
	if w.after {
		w.fail("the attempt asked for more after its decision")
	}
}

// do runs one action and returns its answer.
func (w *simWorld) do(act Action) Event {
	w.advance(time.Duration(w.rng.IntN(15)) * time.Millisecond) // the I/O's own time
	w.say(actionName(act), "", act)
	storeErr := func() Result {
		if w.rng.IntN(60) == 0 {
			return Result{Err: errors.New("etcd: request timed out")}
		}
		return Result{}
	}
	switch a := act.(type) {
	case ReadLeases:
		return LeasesRead{storeErr()}
	case ReadAgents:
		if a.Wait {
			w.advance(time.Duration(10+w.rng.IntN(int(simPoll/time.Millisecond))) * time.Millisecond)
		}
		agents := make([]Agent, len(w.agents))
		for i, ag := range w.agents {
			agents[i] = ag.view
		}
		return AgentsRead{Agents: agents}
	case StoreStep:
		r := storeErr()
		if r.Err == nil {
			w.storedStep = a.Step
		}
		return StepStored{r}
	case PutFence:
		r := storeErr()
		if r.Err == nil && w.fenceAt.IsZero() {
			w.fenceAt = w.now.Add(time.Duration(w.rng.IntN(300)) * time.Millisecond)
		}
		return FencePut{r}
	case CheckFence:
		if a.Wait {
			w.advance(simPoll)
		}
		ok := !w.fenceAt.IsZero() && !w.now.Before(w.fenceAt)
		return FenceChecked{Enforced: ok, Behind: "broker 2 allows writes"}
	case Sleep:
		w.advance(a.For)
		return Slept{}
	case RaisePriority:
		return PriorityRaised{}
	case ReadEndOffsets:
		r := EndOffsetsRead{Ends: map[int32]int64{}, AckedAbove: map[int32]AckedEnd{}, Result: storeErr()}
		if r.Err != nil {
			return r
		}
		for p := range w.leo {
			hw := w.hw(p)
			r.Ends[int32(p)] = hw
			for _, ag := range w.agents {
				if e := ag.ackedEnd[p]; e > hw && e > r.AckedAbove[int32(p)].End {
					r.AckedAbove[int32(p)] = AckedEnd{End: e, Node: ag.node}
				}
			}
		}
		return r
	case ReadProgress:
		if a.Wait {
			w.advance(time.Duration(10+w.rng.IntN(int(simPoll/time.Millisecond))) * time.Millisecond)
		}
		r := ProgressRead{Progress: map[int32]int64{}}
		if w.rng.IntN(3000) == 0 {
			r.Diverged = "partition 0 diverged at 12"
		}
		for p := range w.dst {
			r.Progress[int32(p)] = w.dst[p]
		}
		return r
	case StopReplication:
		r := ReplicationStopped{Final: map[int32]int64{}, Result: storeErr()}
		if r.Err != nil {
			return r
		}
		w.replOn, w.stoppedAt = false, w.now
		for p := range w.dst {
			if w.stopShort && w.dst[p] > 0 {
				w.dst[p]-- // a stop that lost its last batch
			}
			r.Final[int32(p)] = w.dst[p]
		}
		return r
	case LiftGuard:
		return GuardLifted{storeErr()}
	case StoreComplete:
		w.asked = true
		if !w.now.Before(w.spec.Deadline) {
			w.fail("COMPLETE asked for at %v, at or past the deadline %v", w.now.Sub(simStart), simTimeout)
		}
		switch w.rng.IntN(40) {
		case 0:
			return CompleteStored{Result{Err: errors.New("etcd: request timed out")}}
		case 1:
			// Applied, reported failed.
			w.decide("complete", "complete-stored-despite-error")
			return CompleteStored{Result{Err: errors.New("etcd: context deadline exceeded")}}
		}
		w.decide("complete", "complete")
		return CompleteStored{}
	}
	w.fail("unknown action %T", act)
	return nil
}

func (w *simWorld) rollBack(a RollBack) {
	w.say("RollBack", a.Kind)
	if w.asked {
		w.fail("rolled back (%s) after the attempt decided", a.Kind)
		return
	}
	w.asked = true
	if w.decision != "" {
		return // a COMPLETE reported failed but stored: the conditional write keeps it
	}
	// The driver's rollback: at StepDone it first stores StepRollingBack
	// (RollBackMarks), then PROXY. That write may fail, and the leader be
	// lost before it is retried: a control plane taking over then recovers
	// from the stored step, and must not complete what was rolled back.
	w.rolledBack = true
	if RollBackMarks(w.storedStep) && !w.attempt.off.has(guardRollBackMark) {
		w.storedStep = StepRollingBack
	}
	if w.rng.IntN(10) == 0 {
		w.say("PROXY not stored, leader lost", string(w.storedStep))
		w.advance(time.Duration(w.rng.IntN(3000)) * time.Millisecond)
		w.recoverAfterLoss()
		return
	}
	w.decide("proxy", "rolled-back-"+a.Kind)
	w.replOn = true // restarted at normal priority
}

// recoverAfterLoss is a control plane taking over: Recover from the stored
// step.
func (w *simWorld) recoverAfterLoss() {
	w.say("leader lost", string(w.storedStep))
	switch {
	case Recover(w.now, w.storedStep, w.spec.Deadline):
		w.decide("complete", "complete-recovered")
	case w.rolledBack:
		w.decide("proxy", "rolled-back-recovered-after-rollback")
		w.replOn = true
	default:
		w.decide("proxy", "rolled-back-recovered")
		w.replOn = true
	}
	w.check()
}

func (w *simWorld) decide(d, outcome string) {
	if w.decision != "" {
		w.fail("decided %s after %s", d, w.decision)
		return
	}
	if d == "complete" && w.rolledBack {
		w.fail("COMPLETE (%s) after the attempt rolled back: decided twice", outcome)
		return
	}
	w.decision, w.outcome, w.decidedAt = d, outcome, w.now
	w.say("decided", d)
	if d == "complete" {
		w.checkComplete()
	}
}

// checkComplete: at COMPLETE, no agent can land a write after replication
// stopped, and the destination holds every record acked, or to be acked.
func (w *simWorld) checkComplete() {
	if w.stoppedAt.IsZero() {
		w.fail("COMPLETE without replication stopped")
		return
	}
	for i, ag := range w.agents {
		if last := w.lastLanding(i); last.After(w.stoppedAt) {
			w.fail("COMPLETE while %s can land a write at %v, after replication stopped at %v", ag.node, last.Sub(simStart), w.stoppedAt.Sub(simStart))
			return
		}
		for p := range w.leo {
			if ag.ownAcked[p] > w.dst[p] {
				w.fail("COMPLETE with partition %d copied to %d, but %s acked up to %d", p, w.dst[p], ag.node, ag.ownAcked[p])
				return
			}
		}
	}
	for _, wr := range w.inflight {
		if wr.landed && wr.acked && wr.offset+1 > w.dst[wr.partition] {
			w.fail("COMPLETE with partition %d copied to %d, but %s's write at offset %d is acked at %v", wr.partition,
				w.dst[wr.partition], w.agents[wr.agent].node, wr.offset, wr.settleAt.Sub(simStart))
			return
		}
	}
}

// lastLanding is the latest time agent i can land a write: its writes in
// flight, and the ones it may still send.
func (w *simWorld) lastLanding(i int) time.Time {
	var last time.Time
	for _, wr := range w.inflight {
		if wr.agent == i && !wr.landed && !w.fenceRefuses(wr.landAt) && wr.landAt.After(last) {
			last = wr.landAt
		}
	}
	if until := w.sendsUntil(w.agents[i]); w.now.Before(until) {
		// It may still send until then; the fence, once up, refuses what
		// lands after it.
		l := until.Add(max(w.cfg.Forward, w.spec.ForwardDeadline, w.unleasedF(w.agents[i])))
		if w.fenceRefuses(l) {
			l = w.fenceAt
		}
		if l.After(last) {
			last = l
		}
	}
	return last
}

// sendsUntil is when agent a stops sending: once it applied MIGRATING, or
// its lease ended (not on a fenced topic, forwarded without a lease).
func (w *simWorld) sendsUntil(a *simAgent) time.Time {
	until := time.Unix(1<<40, 0)
	if a.cutAt.IsZero() || a.applyAt.Before(a.cutAt) {
		until = a.applyAt
	}
	if !w.spec.FenceAtCutover && a.leaseEnd.Before(until) {
		until = a.leaseEnd
	}
	return until
}

// unleasedF is the F agent a answers within when it forwards without a
// lease: the one it holds (the larger of the last answer before MIGRATING
// and this control plane's), capped at UnleasedForward.
func (w *simWorld) unleasedF(a *simAgent) time.Duration {
	return max(1, min(max(a.heldF, w.cfg.Forward, w.spec.ForwardDeadline), w.cfg.UnleasedForward))
}

func (w *simWorld) fenceRefuses(at time.Time) bool {
	return !w.fenceAt.IsZero() && !at.Before(w.fenceAt)
}

func (w *simWorld) check() {
	if w.after {
		w.fail("the attempt asked for more after its decision")
	}
}

// hw is partition p's high watermark now.
func (w *simWorld) hw(p int) int64 { return w.committedBy(p, w.now) }

// committedBy is how many records of p are committed at at; at never goes
// back between calls (virtual time only moves on).
func (w *simWorld) committedBy(p int, at time.Time) int64 {
	cs := w.commitAt[p]
	for w.hwAt[p] < len(cs) && !cs[w.hwAt[p]].After(at) {
		w.hwAt[p]++
	}
	return int64(w.hwAt[p])
}

// advance moves the world on by d, in one tick: what happens within it is
// ordered by time where the rules can see it (what an agent reports at a
// heartbeat is what had settled by then).
func (w *simWorld) advance(d time.Duration) {
	to := w.now.Add(d)
	w.tick(to)
	w.now = to
}

func (w *simWorld) tick(to time.Time) {
	forward := max(w.cfg.Forward, w.spec.ForwardDeadline)
	for i, a := range w.agents {
		for !a.nextSend.After(to) {
			at := a.nextSend
			a.nextSend = a.nextSend.Add(a.sendEvery)
			if !at.Before(w.sendsUntil(a)) {
				continue
			}
			f := forward
			if !at.Before(a.leaseEnd) {
				f = w.unleasedF(a) // a fenced topic, forwarded without a lease
			}
			land := at.Add(time.Duration(w.rng.Int64N(int64(f))))
			w.inflight = append(w.inflight, simWrite{agent: i, partition: w.rng.IntN(len(w.leo)), sendAt: at, landAt: land,
				settleAt: at.Add(f), f: f})
		}
	}
	// Landings: each gets its offset, its commit and its answer.
	for k := range w.inflight {
		wr := &w.inflight[k]
		if wr.landed || wr.landAt.After(to) {
			continue
		}
		wr.landed = true
		if w.fenceRefuses(wr.landAt) {
			wr.settleAt, wr.offset = wr.landAt, -1 // refused by the fence: the client is told so
			continue
		}
		p := wr.partition
		wr.offset = w.leo[p]
		w.leo[p]++
		// The followers' copy takes up to the writer's F (a write acked
		// later is given up on): an acks=all write the source authorized
		// just before the fence may be acked up to F after it was sent.
		commit := wr.landAt.Add(time.Duration(w.rng.Int64N(int64(wr.f))))
		if last := len(w.commitAt[p]); last > 0 && commit.Before(w.commitAt[p][last-1]) {
			commit = w.commitAt[p][last-1]
		}
		w.commitAt[p] = append(w.commitAt[p], commit)
		ack := commit // acks=all: answered once the followers have it
		if w.agents[wr.agent].acksOne {
			ack = wr.landAt
		}
		if !ack.After(wr.settleAt) {
			wr.settleAt, wr.acked = ack, true
		}
	}
	// Heartbeats: the control plane's view and the lease, from what had
	// settled by each.
	for i, a := range w.agents {
		for !a.nextHB.After(to) {
			h := a.nextHB
			a.nextHB = a.nextHB.Add(a.period)
			if !a.cutAt.IsZero() && !h.Before(a.cutAt) {
				continue
			}
			required := w.spec.Version
			if h.Before(simStart) {
				required-- // before MIGRATING was pushed
			}
			v := a.view
			v.LastHeartbeat = h
			if !h.Before(a.applyAt) {
				v.AckedVersion = w.spec.Version
				v.Reported, v.Stopped = true, true
			}
			v.InFlight = 0
			copy(a.ackedEnd, a.ownAcked)
			for _, wr := range w.inflight {
				switch {
				case wr.agent != i || wr.sendAt.After(h):
				case wr.settleAt.After(h) || !wr.landed:
					v.InFlight++
				case wr.acked:
					a.ackedEnd[wr.partition] = max(a.ackedEnd[wr.partition], wr.offset+1)
				}
			}
			l := GrantLease(h, w.cfg.Lease, v.AckedVersion, required, v.GrantedAt)
			if l.Granted {
				v.GrantedAt = l.GrantedAt
				a.leaseEnd = h.Add(w.cfg.Lease)
			}
			a.view = v
		}
	}
	// Settled: acked or not, out of flight.
	kept := w.inflight[:0]
	for _, wr := range w.inflight {
		if wr.landed && !wr.settleAt.After(to) {
			if wr.acked {
				a := w.agents[wr.agent]
				a.ownAcked[wr.partition] = max(a.ownAcked[wr.partition], wr.offset+1)
			}
			continue
		}
		kept = append(kept, wr)
	}
	w.inflight = kept
	// The copy, up to the high watermark.
	if w.replOn {
		w.replCarry += w.replRate * float64(to.Sub(w.now).Milliseconds())
		step := int64(w.replCarry)
		w.replCarry -= float64(step)
		for p := range w.dst {
			w.dst[p] = min(w.committedBy(p, to), w.dst[p]+step)
		}
	}
}
