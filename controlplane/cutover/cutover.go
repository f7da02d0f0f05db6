// Package cutover owns every decision of a topic's cutover from PROXY,
// through MIGRATING, to COMPLETE or back to PROXY (docs/design.md §6), as
// a deterministic state machine: an Attempt takes an Event (a result of
// what it asked for, an operator's abort) with the time it happened, and
// returns the Actions to take next. It does no I/O and keeps no clock: a
// driver (the control plane) runs each Action against etcd, the replicator,
// the source and the destination, and feeds the outcome back. So the rules
// can be read in one place and run on virtual time by a simulator.
//
// The steps, in order:
//
//  1. StepWaitAgents: the leases other replicas granted are read, then
//     every agent has drained (acked the MIGRATING version, stopped
//     forwarding, nothing in flight) or can no longer write (Drain).
//  2. StepFenceSource, for a topic whose routes promised it: the fence is
//     recorded up, put up, enforced by every source broker, then F waited.
//  3. StepReplicateToEnd: replication at top priority; the source's end
//     offsets (raised to what any agent acked above them) are read, and
//     the destination must hold them.
//  4. StepStopReplication: replication stops at or past those ends; the
//     destination write guard is lifted.
//  5. StepDone is stored (a control plane taking over completes from here,
//     Recover), then COMPLETE.
//
// A step whose outcome fails, or that ends past the deadline, decides the
// attempt: RollBack, once. An attempt decides at most once: once COMPLETE
// is stored, or after RollBack, it asks for nothing more.
package cutover

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Step is a cutover's stored step: where a control plane that took over
// finds it (Recover).
type Step string

// The steps, in the order an attempt takes them.
const (
	StepWaitAgents      Step = "wait-agents"
	StepFenceSource     Step = "fence-source"
	StepReplicateToEnd  Step = "replicate-to-end"
	StepStopReplication Step = "stop-replication"
	// StepDone: every step but storing COMPLETE is done (the agents
	// drained, the destination holds every record up to the source's end
	// offsets, replication stopped there, the write guard lifted).
	StepDone Step = "complete"
	// StepRollingBack is stored over StepDone by a rollback before it
	// stores PROXY: such an attempt is never completed by a control plane
	// taking over.
	StepRollingBack Step = "rolling-back"
)

// Kinds of the events a cutover records (Emit.Kind, and RollBack.Kind for
// the one that says why it rolled back).
const (
	KindWaitingOnAgent = "waiting_on_agent"
	KindAgentDrained   = "agent_drained"
	KindAgentExpired   = "agent_lease_expired"
	KindDrained        = "drained"
	KindSourceFenced   = "source_fenced"
	KindEndOffsets     = "end_offsets"
	KindLagZero        = "lag_zero"
	KindReplStopped    = "replication_stopped"
	KindGuardLifted    = "guard_lifted"
	KindTimedOut       = "timed_out"
	KindFailed         = "failed"
	KindAborted        = "aborted"
)

// Steps are the kinds of the events that end a step of the cutover, in
// the order an attempt records them: each carries the step's duration
// (Emit.Took). The driver's event that says COMPLETE was stored ends the
// last (Attempt.Took).
var Steps = []string{KindDrained, KindSourceFenced, KindEndOffsets, KindLagZero, KindReplStopped, KindGuardLifted}

// TimedOut starts the reason of a rollback because the deadline passed.
const TimedOut = "controlplane: cutover timeout passed"

// Config holds the rules' parameters.
type Config struct {
	// Lease is the agents' lease.
	Lease time.Duration
	// Forward is the control plane's forward deadline F: an agent answers
	// a produce it forwarded within F of sending it.
	Forward time.Duration
	// Fenced says the control plane has a source fence to put up.
	Fenced bool
	// UnleasedForward caps the F of an agent forwarding without a lease
	// (a fenced topic): the fence step waits at least this long.
	UnleasedForward time.Duration
}

// Attempt is one cutover attempt of a topic. Its zero value is not
// usable: build one with New.
type Attempt struct {
	cfg   Config
	topic string
	// version is the config version that carries MIGRATING; deadline ends
	// the attempt; fenceAtCutover and forward come from the topic's route.
	version        uint64
	deadline       time.Time
	fenceAtCutover bool
	forward        time.Duration

	phase   phase
	decided bool
	// mark is when the current step began: Start, then each step's event.
	mark time.Time
	// seen is what the drain has said of each agent (bits of seenWaiting,
	// seenDrained, seenExpired), so each is said once.
	seen map[string]uint8
	ends map[int32]int64

	// off turns guards off, for the simulator's test that each guard is
	// needed; always zero outside tests of this package.
	off guards
}

// Spec is what an attempt is of.
type Spec struct {
	Topic    string
	Version  uint64
	Deadline time.Time
	// FenceAtCutover says the topic's routes promised agents the source is
	// fenced at the cutover.
	FenceAtCutover bool
	// ForwardDeadline is the F the topic's route carries (0: none).
	ForwardDeadline time.Duration
}

// New returns the attempt s describes, before its first step: feed it
// Start.
func New(cfg Config, s Spec) *Attempt {
	return &Attempt{cfg: cfg, topic: s.Topic, version: s.Version, deadline: s.Deadline, fenceAtCutover: s.FenceAtCutover,
		forward: s.ForwardDeadline, seen: map[string]uint8{}}
}

// Took is how long the step under way at now has taken: since the last
// step's event (Steps), or since Start.
func (a *Attempt) Took(now time.Time) time.Duration { return now.Sub(a.mark) }

// ended is the event that ends a step at now: it carries the step's
// duration, and the next step begins.
func (a *Attempt) ended(now time.Time, e Emit) Emit {
	e.Took, a.mark = now.Sub(a.mark), now
	return e
}

// Decided reports whether COMPLETE was stored or a rollback asked for.
func (a *Attempt) Decided() bool { return a.decided }

// Ends are the offsets the destination must hold before COMPLETE: the
// source's end offsets, raised to what agents acked above them; nil
// before they were read.
func (a *Attempt) Ends() map[int32]int64 { return maps.Clone(a.ends) }

type phase uint8

const (
	phaseStart phase = iota
	phaseLeases
	phaseAgents
	phaseFenceStep
	phaseFencePut
	phaseFenceCheck
	phaseFenceWait
	phaseReplStep
	phasePriority
	phaseEndOffsets
	phaseProgress
	phaseStopStep
	phaseStop
	phaseGuard
	phaseDoneStep
	phaseComplete
	phaseOver
)

const (
	seenWaiting uint8 = 1 << iota
	seenDrained
	seenExpired
)

// Step takes e, which happened at now, and returns what to do next. It
// MUST be fed the outcome of every Action it returns that asks for one
// (an Action's doc says which Event answers it), and nothing else but
// Abort. Abort is fed in place of that outcome, when the driver did not
// carry the Action out (or discards what it did) because the operator
// aborted, or when nothing is outstanding. Once COMPLETE is stored or a
// RollBack returned, it returns nothing.
func (a *Attempt) Step(now time.Time, e Event) []Action {
	_, abort := e.(Abort)
	if a.phase == phaseOver && !(abort && a.off.has(guardOneDecision)) {
		return nil
	}
	if ab, ok := e.(Abort); ok {
		reason := ab.Reason
		if reason == "" {
			reason = "aborted by operator"
		}
		return a.rollBack(KindAborted, ab.Actor, reason)
	}
	switch a.phase {
	case phaseStart:
		if _, ok := e.(Start); ok {
			a.phase, a.mark = phaseLeases, now
			return []Action{ReadLeases{}}
		}
	case phaseLeases:
		if r, ok := e.(LeasesRead); ok {
			if r.Err != nil {
				return a.failed(now, "reading the leases other replicas granted", r.Result)
			}
			a.phase = phaseAgents
			return []Action{ReadAgents{}}
		}
	case phaseAgents:
		if r, ok := e.(AgentsRead); ok {
			return a.agents(now, r.Agents)
		}
	case phaseFenceStep:
		if r, ok := e.(StepStored); ok {
			if r.Err != nil {
				return a.failed(now, "storing the step", r.Result)
			}
			a.phase = phaseFencePut
			return []Action{PutFence{}}
		}
	case phaseFencePut:
		if r, ok := e.(FencePut); ok {
			if r.Err != nil {
				return a.failed(now, "fencing the topic on the source", r.Result)
			}
			a.phase = phaseFenceCheck
			return []Action{CheckFence{}}
		}
	case phaseFenceCheck:
		if r, ok := e.(FenceChecked); ok {
			return a.fenceChecked(now, r)
		}
	case phaseFenceWait:
		if _, ok := e.(Slept); ok {
			return a.replicateToEnd()
		}
	case phaseReplStep:
		if r, ok := e.(StepStored); ok {
			if r.Err != nil {
				return a.failed(now, "storing the step", r.Result)
			}
			a.phase = phasePriority
			return []Action{RaisePriority{}}
		}
	case phasePriority:
		if r, ok := e.(PriorityRaised); ok {
			if r.Err != nil {
				return a.fail(KindFailed, "raising replication priority: "+r.Err.Error())
			}
			a.phase = phaseEndOffsets
			return []Action{ReadEndOffsets{}}
		}
	case phaseEndOffsets:
		if r, ok := e.(EndOffsetsRead); ok {
			return a.endOffsets(now, r)
		}
	case phaseProgress:
		if r, ok := e.(ProgressRead); ok {
			return a.progress(now, r)
		}
	case phaseStopStep:
		if r, ok := e.(StepStored); ok {
			if r.Err != nil {
				return a.failed(now, "storing the step", r.Result)
			}
			a.phase = phaseStop
			return []Action{StopReplication{}}
		}
	case phaseStop:
		if r, ok := e.(ReplicationStopped); ok {
			return a.stopped(now, r)
		}
	case phaseGuard:
		if r, ok := e.(GuardLifted); ok {
			if r.Err != nil {
				return a.failed(now, "lifting the destination write guard", r.Result)
			}
			a.phase = phaseDoneStep
			return []Action{
				a.ended(now, Emit{Kind: KindGuardLifted, Reason: "producers may write the topic on the destination"}),
				// A leader that takes over from here stores COMPLETE
				// instead of rolling back (Recover).
				StoreStep{Step: StepDone},
			}
		}
	case phaseDoneStep:
		if r, ok := e.(StepStored); ok {
			if r.Err != nil {
				return a.failed(now, "storing the step", r.Result)
			}
			if a.late(now) {
				return a.fail(KindTimedOut, TimedOut+": before storing COMPLETE")
			}
			a.phase = phaseComplete
			return []Action{StoreComplete{}}
		}
	case phaseComplete:
		if r, ok := e.(CompleteStored); ok {
			if r.Err != nil {
				// Reported failed, maybe stored: the rollback's own write
				// is conditional on the attempt being undecided in the
				// store, and takes a COMPLETE it finds there.
				return a.failed(now, "storing COMPLETE", r.Result)
			}
			a.phase, a.decided = phaseOver, true
			return nil
		}
	}
	panic(fmt.Sprintf("cutover: %s: %T fed in phase %d: the driver fed an event nothing asked for", a.topic, e, a.phase))
}

// agents is the drain: each agent is said once waiting, then once drained
// or expired; the step ends when none is waiting.
func (a *Attempt) agents(now time.Time, agents []Agent) []Action {
	p := Drain(now, a.cfg, DrainSpec{Version: a.version, Fenced: a.fenceAtCutover, Forward: a.forward}, agents)
	if a.off.has(guardDrain) {
		p.Waiting = nil
	}
	var out []Action
	for _, w := range p.Waiting {
		if a.seen[w.Node]&seenWaiting == 0 {
			a.seen[w.Node] |= seenWaiting
			out = append(out, Emit{Kind: KindWaitingOnAgent, Agent: w.Node, Reason: w.Why()})
		}
	}
	for _, n := range p.Drained {
		if s := a.seen[n]; s&seenWaiting != 0 && s&seenDrained == 0 {
			a.seen[n] |= seenDrained
			out = append(out, Emit{Kind: KindAgentDrained, Agent: n, Reason: fmt.Sprintf("reported version >= %d, stopped, zero in flight", a.version)})
		}
	}
	for _, n := range p.Expired {
		if s := a.seen[n]; s&seenWaiting != 0 && s&seenExpired == 0 {
			a.seen[n] |= seenExpired
			out = append(out, Emit{Kind: KindAgentExpired, Agent: n, Reason: "silent past lease grant + lease + forward deadline, or, on a topic the source " +
				"fence closes, past two thirds of a lease"})
		}
	}
	if len(p.Waiting) > 0 {
		if a.late(now) {
			return append(out, a.fail(KindTimedOut, TimedOut+": waiting for agents: "+p.Summary())...)
		}
		return append(out, ReadAgents{Wait: true})
	}
	out = append(out, a.ended(now, Emit{Kind: KindDrained, Reason: "every agent stopped forwarding and drained, or its lease ran out"}))
	if !a.fenceAtCutover {
		return append(out, a.replicateToEnd()...)
	}
	if !a.cfg.Fenced {
		return append(out, a.fail(KindFailed, fmt.Sprintf("controlplane: no source fence: %s: its routes told agents the source is fenced at the cutover", a.topic))...)
	}
	a.phase = phaseFenceStep
	return append(out, StoreStep{Step: StepFenceSource, SourceFenceUp: true})
}

func (a *Attempt) fenceChecked(now time.Time, r FenceChecked) []Action {
	if r.Err == nil && r.Enforced {
		// An agent forwarding without a lease answers within its F, capped
		// at UnleasedForward: the F it holds may be an earlier control
		// plane's, larger than this one's.
		wait := max(a.cfg.Forward, a.forward, a.cfg.UnleasedForward)
		if a.off.has(guardFenceForward) {
			wait = max(a.cfg.Forward, a.cfg.UnleasedForward)
		}
		if a.off.has(guardUnleasedForward) {
			wait = max(a.cfg.Forward, a.forward)
		}
		a.phase = phaseFenceWait
		return []Action{
			a.ended(now, Emit{Kind: KindSourceFenced, Reason: fmt.Sprintf("every source broker denies writes to %s (superusers aside); "+
				"waiting F (%v) for produce requests the source accepted just before", a.topic, wait)}),
			Sleep{For: wait},
		}
	}
	behind := r.Behind
	if r.Err != nil {
		behind = r.Err.Error() // a broker restarting: asked again until the deadline
	}
	if a.late(now) {
		return a.fail(KindTimedOut, TimedOut+": waiting for every source broker to enforce the fence: "+behind)
	}
	return []Action{CheckFence{Wait: true}}
}

func (a *Attempt) replicateToEnd() []Action {
	a.phase = phaseReplStep
	return []Action{StoreStep{Step: StepReplicateToEnd}}
}

func (a *Attempt) endOffsets(now time.Time, r EndOffsetsRead) []Action {
	if r.Err != nil {
		return a.failed(now, "reading source end offsets", r.Result)
	}
	a.ends = maps.Clone(r.Ends)
	if a.ends == nil {
		a.ends = map[int32]int64{}
	}
	out := []Action{a.ended(now, Emit{Kind: KindEndOffsets, Reason: "source end offsets " + FormatOffsets(a.ends)})}
	// A leader acks an acks=1 write before its followers copy it, so it can
	// sit above the high watermark just read: the destination must hold
	// what any agent acked too (if the leader lost it, the wait times out
	// and the cutover rolls back).
	if len(r.AckedAbove) > 0 && !a.off.has(guardAckedAbove) {
		var b strings.Builder
		for _, p := range slices.Sorted(maps.Keys(r.AckedAbove)) {
			ab := r.AckedAbove[p]
			fmt.Fprintf(&b, " %d:%d (%s)", p, ab.End, ab.Node)
			a.ends[p] = ab.End
		}
		out = append(out, Emit{Kind: KindEndOffsets, Reason: "agents acked records above the source high watermark; waiting for them too:" + b.String()})
	}
	a.phase = phaseProgress
	return append(out, ReadProgress{})
}

func (a *Attempt) progress(now time.Time, r ProgressRead) []Action {
	if r.Diverged != "" {
		return a.fail(KindFailed, r.Diverged)
	}
	behind := ""
	if r.Err != nil {
		behind = r.Err.Error()
	} else {
		ok, b := Reached(r.Progress, a.ends)
		if ok || a.off.has(guardReplicationEnds) {
			a.phase = phaseStopStep
			return []Action{
				a.ended(now, Emit{Kind: KindLagZero, Reason: "destination holds every source record up to the end offsets"}),
				StoreStep{Step: StepStopReplication},
			}
		}
		behind = b
	}
	if a.late(now) {
		return a.fail(KindTimedOut, TimedOut+": waiting for replication to reach the source end offsets: "+behind)
	}
	return []Action{ReadProgress{Wait: true}}
}

func (a *Attempt) stopped(now time.Time, r ReplicationStopped) []Action {
	if r.Err != nil {
		return a.failed(now, "stopping replication", r.Result)
	}
	if ok, behind := Reached(r.Final, a.ends); !ok && !a.off.has(guardReplicationEnds) {
		return a.fail(KindFailed, "replication stopped short of the end offsets: "+behind)
	}
	if r.Diverged != "" {
		return a.fail(KindFailed, r.Diverged)
	}
	// Said before the deadline's check: where the copy stopped is worth
	// reading before the timed_out that may follow.
	stopped := a.ended(now, Emit{Kind: KindReplStopped, Reason: "final offsets " + FormatOffsets(r.Final)})
	if a.late(now) {
		return append([]Action{stopped}, a.fail(KindTimedOut, TimedOut+": after stopping replication")...)
	}
	a.phase = phaseGuard
	return []Action{stopped, LiftGuard{}}
}

// late reports whether the deadline has passed at now.
func (a *Attempt) late(now time.Time) bool {
	return !now.Before(a.deadline) && !a.off.has(guardDeadline)
}

// failed decides the attempt after what failed: timed out when the
// deadline passed (or the driver says its context's did), failed
// otherwise.
func (a *Attempt) failed(now time.Time, what string, r Result) []Action {
	if r.Expired || a.late(now) {
		return a.fail(KindTimedOut, fmt.Sprintf("%s: %s: %v", TimedOut, what, r.Err))
	}
	return a.fail(KindFailed, fmt.Sprintf("%s: %v", what, r.Err))
}

func (a *Attempt) fail(kind, reason string) []Action {
	return a.rollBack(kind, "", reason)
}

func (a *Attempt) rollBack(kind, actor, reason string) []Action {
	if a.phase == phaseOver && !a.off.has(guardOneDecision) {
		return nil // decided already
	}
	a.phase, a.decided = phaseOver, true
	return []Action{RollBack{Kind: kind, Actor: actor, Reason: reason}}
}

// guards are the guards a test of this package turns off.
type guards uint8

const (
	guardDrain guards = 1 << iota
	guardReplicationEnds
	guardAckedAbove
	guardDeadline
	guardOneDecision
	// guardRollBackMark is RollBackMarks, which the driver's rollback
	// follows: off, the simulator's world stores no StepRollingBack.
	guardRollBackMark
	// guardFenceForward: the fence step waits the route's F too.
	guardFenceForward
	// guardUnleasedForward: the fence step waits UnleasedForward too.
	guardUnleasedForward
)

func (g guards) has(x guards) bool { return g&x != 0 }
