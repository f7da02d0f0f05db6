package controlplane

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/baton-kafka/baton/migration"
)

// Migrate starts a cutover of a PROXY topic (docs/design.md §6) and returns
// at once with the topic MIGRATING; the cutover runs in the background and
// ends COMPLETE or back in PROXY, with events all along. It is refused
// (ErrGateRefused, naming each gate and why) while a cutover gate refuses,
// unless force lists that gate; the initiated event records the gates
// forced past.
func (cp *ControlPlane) Migrate(ctx context.Context, name, actor string, force ...Gate) (Topic, error) {
	refusals := cp.checkGates(ctx, name)
	cp.mu.Lock()
	defer cp.mu.Unlock()
	t, ok := cp.topics[name]
	if !ok {
		return Topic{}, fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	if _, running := cp.runs[name]; running || t.State == migration.Migrating {
		return Topic{}, fmt.Errorf("%w: %s (attempt %d)", ErrCutoverRunning, name, t.Attempts)
	}
	if err := Transition(t.State, migration.Migrating); err != nil {
		return Topic{}, err
	}
	if cp.ctx.Err() != nil {
		return Topic{}, ErrClosed
	}
	attempt := t.Attempts + 1
	limit := cp.cfg.timeout / 4
	var refused string
	diverged := cp.cfg.repl.Diverged(name)
	lagRefusal, lag := cp.checkLagLocked(name)
	forced, stand := splitForced(append(lagRefusal, refusals...), force)
	switch g := cp.guardPendingLocked(name); {
	case t.FenceAtCutover && !cp.fenced():
		refused = "its routes told agents the source is fenced at the cutover (they may forward it without a lease), " +
			"and this control plane runs without a source fence: restart it with --source-fence=acl and the source's admin credentials"
	case t.SourceFenceUp:
		// Lifted in the background (restoreOne): a lift still on its way
		// would take down this cutover's fence after it found it up.
		refused = "the source fence of its last cutover, rolled back, is still up: it is being lifted in the background (see status)"
	case len(diverged) > 0:
		refused = divergedText(name, diverged)
	case g != nil:
		refused = fmt.Sprintf("the destination write guard is still being restored (since %s, %d failed attempts, last: %s)",
			g.Since.Format(time.RFC3339), g.Failures, g.LastErr)
	case len(stand) > 0:
		refused = joinRefusals(stand)
		if len(forced) > 0 {
			refused += " (forced past: " + joinRefusals(forced) + ")"
		}
		refused += "; to start anyway: baton topic migrate " + name + " --force=" + forceList(stand)
	}
	if refused != "" {
		cp.event(ctx, Event{Topic: name, Kind: EventGateRefused, Actor: actor, Attempt: attempt, Reason: refused})
		return Topic{}, fmt.Errorf("%w: %s: %s", ErrGateRefused, name, refused)
	}
	reason := fmt.Sprintf("time lag %v <= %v", lag.Round(time.Millisecond), limit)
	if len(forced) > 0 {
		reason = "forced past " + joinRefusals(forced)
		if len(lagRefusal) == 0 { // the time lag passed: say what it was
			reason += fmt.Sprintf("; time lag %v <= %v", lag.Round(time.Millisecond), limit)
		}
	}
	now := cp.now()
	nt := *t
	nt.State, nt.Attempts = migration.Migrating, attempt
	nt.Cutover = &Cutover{Attempt: attempt, Version: cp.version + 1, StartedAt: now, Deadline: now.Add(cp.cfg.timeout),
		Actor: actor, Step: "wait-agents"}
	if err := cp.commitLocked(ctx, nt, false); err != nil {
		return Topic{}, err
	}
	co := *nt.Cutover
	cp.event(ctx, Event{Topic: name, Kind: EventInitiated, From: migration.Proxy.String(), To: migration.Migrating.String(), Actor: actor,
		Attempt: attempt, Version: co.Version, StartedAt: co.StartedAt,
		Reason: fmt.Sprintf("%s; MIGRATING pushed at version %d", reason, co.Version)})
	rctx, cancel := context.WithCancel(cp.ctx)
	r := &run{cancel: cancel, done: make(chan struct{})}
	cp.runs[name] = r
	cp.wg.Add(1)
	go func() {
		defer cp.wg.Done()
		defer close(r.done)
		defer cancel()
		cp.cutover(rctx, name, co, r)
	}()
	return *cp.topics[name], nil
}

// Abort stops a running cutover and rolls the topic back to PROXY. A
// cutover that reached COMPLETE first is not undone.
func (cp *ControlPlane) Abort(ctx context.Context, name, actor, reason string) (Topic, error) {
	cp.mu.Lock()
	t, ok := cp.topics[name]
	if !ok {
		cp.mu.Unlock()
		return Topic{}, fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	r := cp.runs[name]
	if t.State != migration.Migrating || r == nil {
		from := t.State
		cp.mu.Unlock()
		if from == migration.Complete {
			return Topic{}, Transition(migration.Complete, migration.Proxy)
		}
		return Topic{}, fmt.Errorf("%w: abort: %s is %s: rule %q: only a running cutover can be aborted",
			ErrIllegalTransition, name, from, "abort-migrating-only")
	}
	r.aborted, r.actor, r.reason = true, actor, reason
	r.cancel()
	cp.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		return Topic{}, ctx.Err()
	}
	nt, err := cp.Topic(name)
	if err != nil {
		return Topic{}, err
	}
	if nt.State == migration.Complete {
		return nt, fmt.Errorf("%w: the cutover of %s completed before the abort: rule %q: %s",
			ErrIllegalTransition, name, RuleCompleteOneWay.Name, RuleCompleteOneWay.Why)
	}
	return nt, nil
}

// cutover runs steps 2 to 5 of docs/design.md §6 for one attempt.
func (cp *ControlPlane) cutover(ctx context.Context, name string, co Cutover, r *run) {
	ev := func(kind, agent, reason string) {
		cp.event(ctx, Event{Topic: name, Kind: kind, Actor: ActorControlPlane, Attempt: co.Attempt, Agent: agent,
			Reason: reason, Version: co.Version, StartedAt: co.StartedAt})
	}
	err := cp.cutoverSteps(ctx, name, co, ev)
	if err == nil {
		return
	}
	cp.mu.Lock()
	aborted, actor, reason := r.aborted, r.actor, r.reason
	delete(cp.runs, name)
	cp.mu.Unlock()
	kind := EventFailed
	switch {
	case aborted:
		kind = EventAborted
		if reason == "" {
			reason = "aborted by operator"
		}
	case cp.ctx.Err() != nil:
		cp.log.Warn("control plane stopping mid-cutover; the next start rolls it back", "topic", name)
		return
	case errors.Is(err, errTimedOut):
		kind, actor, reason = EventTimedOut, ActorControlPlane, err.Error()
	default:
		actor, reason = ActorControlPlane, err.Error()
	}
	bg := context.WithoutCancel(ctx)
	if txns := cp.openTxns(bg, name); txns != "" {
		reason += "; " + txns // what held the copy (docs/design.md §9)
	}
	if err := cp.rollback(bg, name, co, kind, actor, reason); err != nil {
		cp.log.Error("rolling back; the topic stays MIGRATING until the next start", "topic", name, "err", err)
	}
}

// StepDone is the stored step of a cutover whose every step but storing
// COMPLETE is done: the agents drained, the destination holds every
// record up to the source's end offsets, replication stopped there (its
// last idempotent batches stored with the step) and the write guard is
// lifted. A control plane that finds a topic MIGRATING at this step before
// its deadline completes it; at any other step, or later, it rolls it
// back.
const StepDone = "complete"

// StepRollingBack is stored, over StepDone, by a rollback before it
// stores PROXY: such an attempt is never completed by a control plane
// taking over.
const StepRollingBack = "rolling-back"

// setStep stores the running cutover's step, with what also changes of
// the topic (nothing of its route: the version stays).
func (cp *ControlPlane) setStep(ctx context.Context, name, step string, also ...func(*Topic)) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	t, ok := cp.topics[name]
	if !ok || t.Cutover == nil {
		return fmt.Errorf("%w: %s vanished mid-cutover", ErrUnknownTopic, name)
	}
	// A new Topic and Cutover, not writes into the old ones: the Topic
	// copies that Topics, Topic and Migrate hand out share the pointer,
	// and are read (the HTTP API encodes them) without cp.mu.
	nt, co := *t, *t.Cutover
	co.Step = step
	nt.Cutover = &co
	for _, f := range also {
		f(&nt)
	}
	if err := cp.store.PutTopic(ctx, nt, cp.version); err != nil {
		return err
	}
	cp.topics[name] = &nt
	return nil
}

// wait polls cond (and wakes on agent heartbeats) until it holds, the
// deadline passes or ctx ends.
func (cp *ControlPlane) wait(ctx context.Context, deadline time.Time, what string, cond func() (bool, string, error)) error {
	for {
		cp.mu.Lock()
		ch := cp.changed
		cp.mu.Unlock()
		ok, behind, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if !cp.now().Before(deadline) {
			return fmt.Errorf("%w: %s: %s", errTimedOut, what, behind)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		case <-time.After(cp.cfg.poll):
		}
	}
}

// cutoverSteps runs the cutover. Every step that talks to etcd, the
// source or the destination gets a context ending at the deadline, and a
// step that misses it times the cutover out (rolled back by the caller).
func (cp *ControlPlane) cutoverSteps(ctx context.Context, name string, co Cutover, ev func(kind, agent, reason string)) error {
	dctx, cancel := context.WithDeadline(ctx, co.Deadline)
	defer cancel()
	// step wraps a step's error: a missed deadline is errTimedOut.
	step := func(what string, err error) error {
		if ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || dctx.Err() != nil) {
			return fmt.Errorf("%w: %s: %v", errTimedOut, what, err)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	// Step 2: every agent drained at >= v, or silent past grant + lease + F.
	// Leases other replicas granted before MIGRATING was stored are all
	// in etcd by now; read them first.
	if err := cp.syncRecorded(dctx); err != nil {
		return step("reading the leases other replicas granted", err)
	}
	waiting, drained, expired := map[string]bool{}, map[string]bool{}, map[string]bool{}
	err := cp.wait(ctx, co.Deadline, "waiting for agents", func() (bool, string, error) {
		pending := cp.pendingAgents(name, co.Version)
		for _, p := range pending.waiting {
			if !waiting[p.node] {
				waiting[p.node] = true
				ev(EventWaitingOnAgent, p.node, p.why)
			}
		}
		for _, n := range pending.drained {
			if waiting[n] && !drained[n] {
				drained[n] = true
				ev(EventAgentDrained, n, fmt.Sprintf("reported version >= %d, stopped, zero in flight", co.Version))
			}
		}
		for _, n := range pending.expired {
			if waiting[n] && !expired[n] {
				expired[n] = true
				ev(EventAgentExpired, n, "silent past lease grant + lease + forward deadline, or, on a topic the source "+
					"fence closes, past two thirds of a lease")
			}
		}
		return len(pending.waiting) == 0, pending.summary(), nil
	})
	if err != nil {
		return err
	}
	ev(EventDrained, "", "every agent stopped forwarding and drained, or its lease ran out")
	if err := cp.fenceSource(ctx, dctx, name, ev, step); err != nil {
		return err
	}

	// Step 3: top priority, source end offsets, wait for D to hold them.
	if err := cp.setStep(dctx, name, "replicate-to-end"); err != nil {
		return step("storing the step", err)
	}
	if err := cp.cfg.repl.SetMigrating(name, true); err != nil {
		return fmt.Errorf("raising replication priority: %w", err)
	}
	ends, err := cp.cfg.repl.SourceEndOffsets(dctx, name)
	if err != nil {
		return step("reading source end offsets", err)
	}
	ev(EventEndOffsets, "", "source end offsets "+formatOffsets(ends))
	// A leader acks an acks=1 write before its followers copy it, so it can
	// sit above the high watermark just read: wait for the destination to
	// hold what any agent acked too (the high watermark gets there once the
	// followers have it; if the leader lost it, the wait times out and the
	// cutover rolls back).
	if above := cp.ackedAbove(name, ends); len(above) > 0 {
		var b strings.Builder
		for _, p := range slices.Sorted(maps.Keys(above)) {
			fmt.Fprintf(&b, " %d:%d (%s)", p, above[p].end, above[p].node)
			ends[p] = above[p].end
		}
		ev(EventEndOffsets, "", "agents acked records above the source high watermark; waiting for them too:"+b.String())
	}
	if err := cp.wait(ctx, co.Deadline, "waiting for replication to reach the source end offsets", func() (bool, string, error) {
		if d := cp.cfg.repl.Diverged(name); len(d) > 0 {
			return false, "", errors.New(divergedText(name, d))
		}
		prog, err := cp.cfg.repl.Progress(name)
		if err != nil {
			return false, err.Error(), nil
		}
		ok, behind := reached(prog, ends)
		return ok, behind, nil
	}); err != nil {
		return err
	}
	ev(EventLagZero, "", "destination holds every source record up to the end offsets")

	// Step 4: stop replication, confirm, lift the write guard.
	if err := cp.setStep(dctx, name, "stop-replication"); err != nil {
		return step("storing the step", err)
	}
	final, recent, err := cp.cfg.repl.Stop(dctx, name)
	if err != nil {
		return step("stopping replication", err)
	}
	if ok, behind := reached(final, ends); !ok {
		return fmt.Errorf("replication stopped short of the end offsets: %s", behind)
	}
	if d := cp.cfg.repl.Diverged(name); len(d) > 0 {
		return errors.New(divergedText(name, d))
	}
	ev(EventReplStopped, "", "final offsets "+formatOffsets(final))
	if !cp.now().Before(co.Deadline) {
		return fmt.Errorf("%w: after stopping replication", errTimedOut)
	}
	cp.guardMu.Lock()
	err = cp.cfg.guard.Lift(dctx, name)
	cp.guardMu.Unlock()
	if err != nil {
		return step("lifting the destination write guard", err)
	}
	ev(EventGuardLifted, "", "producers may write the topic on the destination")
	// Every step but COMPLETE is done: a leader that takes over from here
	// stores COMPLETE with these batches instead of rolling back (New).
	if err := cp.setStep(dctx, name, StepDone, func(t *Topic) { t.SourceBatches = recent }); err != nil {
		return step("storing the step", err)
	}

	// Step 5: COMPLETE at v+1, unless aborted meanwhile.
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if !cp.now().Before(co.Deadline) {
		return fmt.Errorf("%w: before storing COMPLETE", errTimedOut)
	}
	t := *cp.topics[name]
	t.State, t.Cutover, t.CompletedAt = migration.Complete, nil, cp.now()
	// Agents answer a client's retry of one of these from its copy (§9).
	t.SourceBatches, t.SourceBatchesUntil = recent, cp.now().Add(SourceBatchesKept)
	// Bounded by the deadline too. A write etcd applies after the client
	// gave up is not overwritten: the rollback finds the attempt decided
	// and takes the COMPLETE (decideLocked).
	if _, err := cp.decideLocked(dctx, t, co.Attempt); err != nil {
		return step("storing COMPLETE", err)
	}
	delete(cp.runs, name)
	cp.event(ctx, Event{Topic: name, Kind: EventCompleted, From: migration.Migrating.String(), To: migration.Complete.String(),
		Actor: ActorControlPlane, Attempt: co.Attempt, Version: cp.version, StartedAt: co.StartedAt,
		Reason: fmt.Sprintf("cutover took %v", cp.now().Sub(co.StartedAt).Round(time.Millisecond))})
	return nil
}

// resume stores COMPLETE for a cutover a control plane that stopped left
// at StepDone: every step was done, so nothing is left to undo and
// producers held since get the destination.
func (cp *ControlPlane) resume(ctx context.Context, name string, co Cutover) error {
	cp.event(ctx, Event{Topic: name, Kind: EventRecovered, Actor: ActorControlPlane, Attempt: co.Attempt, StartedAt: co.StartedAt,
		Reason: "found MIGRATING after a restart with every step done (agents drained, replication stopped at the source's " +
			"end offsets, the write guard lifted); storing COMPLETE"})
	cp.mu.Lock()
	defer cp.mu.Unlock()
	t := *cp.topics[name]
	t.State, t.Cutover, t.CompletedAt = migration.Complete, nil, cp.now()
	t.SourceBatchesUntil = cp.now().Add(SourceBatchesKept)
	stored, err := cp.decideLocked(ctx, t, co.Attempt)
	if errors.Is(err, ErrDecided) {
		cp.log.Warn("the cutover found with every step done was decided already; keeping what is stored", "topic", name, "state", stored.State)
		return nil
	}
	if err != nil {
		return fmt.Errorf("controlplane: completing %s after a restart: %w", name, err)
	}
	cp.event(ctx, Event{Topic: name, Kind: EventCompleted, From: migration.Migrating.String(), To: migration.Complete.String(),
		Actor: ActorControlPlane, Attempt: co.Attempt, Version: cp.version, StartedAt: co.StartedAt,
		Reason: fmt.Sprintf("cutover took %v, finished by a control plane that took over", cp.now().Sub(co.StartedAt).Round(time.Millisecond))})
	return nil
}

// rollback returns a MIGRATING topic to PROXY: PROXY at the next version,
// replication restarted at normal priority, and the destination write
// guard restored in the background. It never waits for the destination:
// agents route PROXY to the source, so producers are back on S while the
// guard is restored (see restoreGuard). kind ("" for none) is the event
// saying why, before rolled_back.
func (cp *ControlPlane) rollback(ctx context.Context, name string, co Cutover, kind, actor, reason string) error {
	base := Event{Topic: name, Actor: actor, Attempt: co.Attempt, Reason: reason, StartedAt: co.StartedAt}
	if kind != "" {
		e := base
		e.Kind = kind
		cp.event(ctx, e)
	}
	cp.mu.Lock()
	t, ok := cp.topics[name]
	if !ok || t.State != migration.Migrating {
		cp.mu.Unlock()
		return nil
	}
	var stored Topic
	var err error
	if t.Cutover != nil && t.Cutover.Step == StepDone {
		// First, durably: this attempt is rolled back, so that no control
		// plane taking over completes it (New) should PROXY fail below.
		mt, mc := *t, *t.Cutover
		mc.Step = StepRollingBack
		mt.Cutover = &mc
		if stored, err = cp.store.PutTopicUndecided(ctx, mt, cp.version, co.Attempt, false); err == nil {
			cp.topics[name] = &mt
			t = &mt
		}
	}
	if err == nil {
		nt := *t
		nt.State, nt.Cutover = migration.Proxy, nil
		// Stored with StepDone for COMPLETE; a PROXY route carries none.
		nt.SourceBatches, nt.SourceBatchesUntil = nil, time.Time{}
		stored, err = cp.decideLocked(ctx, nt, co.Attempt)
	}
	switch {
	case errors.Is(err, ErrDecided) && !decision(stored, name):
		cp.mu.Unlock()
		return fmt.Errorf("controlplane: %s attempt %d is decided but stored %s: %w", name, co.Attempt, stored.State, err)
	case errors.Is(err, ErrDecided):
		// Decided by a write that was reported failed but stored.
		cp.adoptLocked(stored)
		if stored.State == migration.Complete { // nothing is left to roll back
			v := cp.version
			cp.mu.Unlock()
			cp.event(ctx, Event{Topic: name, Kind: EventCompleted, From: migration.Migrating.String(), To: migration.Complete.String(),
				Actor: ActorControlPlane, Attempt: co.Attempt, Version: v, StartedAt: co.StartedAt,
				Reason: "its COMPLETE, whose write was reported failed, had been stored: the cutover completed"})
			return nil
		}
	case err != nil:
		cp.mu.Unlock()
		return err
	}
	v := cp.version
	cp.mu.Unlock()
	e := base
	e.Kind, e.From, e.To, e.Version = EventRolledBack, migration.Migrating.String(), migration.Proxy.String(), v
	cp.event(ctx, e)
	cp.restoreGuard(name, true)
	if err := cp.cfg.repl.Start(name); err != nil {
		return fmt.Errorf("restarting replication: %w", err)
	}
	if err := cp.cfg.repl.SetMigrating(name, false); err != nil {
		cp.log.Warn("lowering replication priority", "topic", name, "err", err)
	}
	return nil
}

type pendingAgent struct{ node, why string }

type pending struct {
	waiting          []pendingAgent
	drained, expired []string
}

func (p pending) summary() string {
	var b strings.Builder
	for i, w := range p.waiting {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %s", w.node, w.why)
	}
	return b.String()
}

// pendingAgents sorts agents into safe (drained or expired) and waiting.
func (cp *ControlPlane) pendingAgents(topic string, v uint64) pending {
	now := cp.now()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var p pending
	// Agents answer a forwarded produce within the F pushed in the topic's
	// route: wait out the larger of it and the control plane's own.
	forward := cp.cfg.forward
	fenced := false
	if t, ok := cp.topics[topic]; ok {
		forward = max(forward, t.ForwardDeadline)
		fenced = t.FenceAtCutover
	}
	for _, a := range cp.agents {
		if a.GrantedAt.IsZero() {
			continue // never held a lease: never forwarded
		}
		safeAt := a.GrantedAt.Add(cp.cfg.lease + forward)
		if !now.Before(safeAt) {
			p.expired = append(p.expired, a.Node)
			continue
		}
		// A fenced topic's source refuses whatever a silent agent sends
		// after the fence (the next step), so the drain waits only for
		// agents that heartbeat: one that missed a renewal is not waited
		// out. It also keeps the copy its room in the timeout.
		if fenced && now.Sub(a.LastHeartbeat) > 2*cp.cfg.lease/3 {
			p.expired = append(p.expired, a.Node)
			continue
		}
		// A restarted agent's earlier process is silent for good; what it
		// sent may land up to F later (the silent-safe rule, for it).
		if earlierSafe := a.EarlierGrantedAt.Add(cp.cfg.lease + forward); !fenced && now.Before(earlierSafe) {
			p.waiting = append(p.waiting, pendingAgent{a.Node, fmt.Sprintf("an earlier process of this agent held a lease granted at %s; "+
				"what it sent may still reach the source; safe at %s", a.EarlierGrantedAt.Format(time.RFC3339Nano), earlierSafe.Format(time.RFC3339Nano))})
			continue
		}
		d, reported := a.Topics[topic]
		switch {
		case a.AckedVersion < v:
			p.waiting = append(p.waiting, pendingAgent{a.Node, fmt.Sprintf("acked version %d < %d; silent-safe at %s",
				a.AckedVersion, v, safeAt.Format(time.RFC3339Nano))})
		case !reported || !d.StoppedForwarding || d.InFlight > 0:
			p.waiting = append(p.waiting, pendingAgent{a.Node, fmt.Sprintf("stopped=%v in_flight=%d", d.StoppedForwarding, d.InFlight)})
		default:
			p.drained = append(p.drained, a.Node)
		}
	}
	sort.Slice(p.waiting, func(i, j int) bool { return p.waiting[i].node < p.waiting[j].node })
	sort.Strings(p.drained)
	sort.Strings(p.expired)
	return p
}

func formatOffsets(m map[int32]int64) string {
	ps := make([]int32, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d:%d", p, m[p])
	}
	return b.String()
}
