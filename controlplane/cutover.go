package controlplane

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/baton-kafka/baton/controlplane/cutover"
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
	switch g := failedRestore(cp.keeper, name); {
	case t.FenceAtCutover && !cp.cfg.fenced():
		refused = "its routes told agents the source is fenced at the cutover (they may forward it without a lease), " +
			"and this control plane runs without a source fence: restart it with --source-fence=acl and the source's admin credentials"
	case t.SourceFenceUp:
		// Lifted in the background (acl.Keeper): a lift still on its way
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
		Actor: actor, Step: cutover.StepWaitAgents}
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

// setStep stores the running cutover's step, with what also changes of
// the topic (nothing of its route: the version stays).
func (cp *ControlPlane) setStep(ctx context.Context, name string, step cutover.Step, also ...func(*Topic)) error {
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

// resume stores COMPLETE for a cutover a control plane that stopped left
// at cutover.StepDone: every step was done, so nothing is left to undo and
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
// guard is restored (see acl.Keeper.Restore). kind ("" for none) is the event
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
	if t.Cutover != nil && cutover.RollBackMarks(t.Cutover.Step) {
		// First, durably: this attempt is rolled back, so that no control
		// plane taking over completes it (New) should PROXY fail below.
		mt, mc := *t, *t.Cutover
		mc.Step = cutover.StepRollingBack
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
	cp.keeper.Restore(name, true)
	if err := cp.cfg.repl.Start(name); err != nil {
		return fmt.Errorf("restarting replication: %w", err)
	}
	if err := cp.cfg.repl.SetMigrating(name, false); err != nil {
		cp.log.Warn("lowering replication priority", "topic", name, "err", err)
	}
	return nil
}
