package controlplane

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/baton-kafka/baton/controlplane/cutover"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
)

// driver carries out one cutover attempt's actions (package cutover
// decides them) against the store, the replicator, the source fence and
// the destination write guard, each under the attempt's deadline, and
// feeds each outcome back.
type driver struct {
	cp   *ControlPlane
	name string
	co   Cutover
	a    *cutover.Attempt
	// ctx is the run's: it ends at an abort, or when the control plane
	// stops. dctx is ctx bounded by the attempt's deadline.
	ctx, dctx context.Context
	// changed is the signal taken at the last read a report may change
	// the answer of (the agents, the fence, the copy's progress): a report
	// after it wakes the next wait.
	changed <-chan struct{}
	// progressed is signalled when the copy of the topic advances, from
	// when replication is raised to top priority (nil before).
	progressed chan struct{}
	// recent are the source batches the replication stop returned, stored
	// with StepDone and COMPLETE.
	recent []replicator.SourceBatch
}

// rules are the cutover rules' parameters of this control plane.
func (cp *ControlPlane) rules() cutover.Config {
	return cutover.Config{Lease: cp.cfg.lease, Forward: cp.cfg.forward, Fenced: cp.cfg.fenced(),
		UnleasedForward: migration.UnleasedForwardDeadline}
}

// cutover runs attempt co of topic name until it is decided: the core's
// actions in turn, its events recorded, an abort fed in place of the
// outcome it interrupted. A control plane that stops leaves the attempt
// MIGRATING for the next start to recover (New).
func (cp *ControlPlane) cutover(ctx context.Context, name string, co Cutover, r *run) {
	t, err := cp.Topic(name)
	if err != nil {
		cp.log.Error("starting a cutover", "topic", name, "err", err)
		return
	}
	a := cutover.New(cp.rules(), cutover.Spec{Topic: name, Version: co.Version, Deadline: co.Deadline,
		FenceAtCutover: t.FenceAtCutover, ForwardDeadline: t.ForwardDeadline})
	dctx, cancel := context.WithDeadline(ctx, co.Deadline)
	defer cancel()
	d := &driver{cp: cp, name: name, co: co, a: a, ctx: ctx, dctx: dctx}
	defer func() {
		if d.progressed != nil {
			cp.catchUp.CompareAndDelete(name, d.progressed)
		}
	}()
	actions := a.Step(cp.now(), cutover.Start{})
	for len(actions) > 0 {
		act := actions[0]
		actions = actions[1:]
		switch x := act.(type) {
		case cutover.Emit:
			cp.event(ctx, Event{Topic: name, Kind: x.Kind, Actor: ActorControlPlane, Attempt: co.Attempt, Agent: x.Agent,
				Reason: x.Reason, Version: co.Version, StartedAt: co.StartedAt, Took: x.Took})
			continue
		case cutover.RollBack:
			d.rollBack(x)
			return
		}
		var ev cutover.Event
		if ctx.Err() == nil {
			ev = d.do(act)
		}
		if ctx.Err() != nil {
			// An abort asked before the stop is carried out: Abort waits
			// for it, and the next start might complete the attempt.
			cp.mu.Lock()
			aborted, actor, reason := r.aborted, r.actor, r.reason
			cp.mu.Unlock()
			if !aborted {
				cp.log.Warn("control plane stopping mid-cutover; the next start completes or rolls it back", "topic", name)
				return
			}
			ev = cutover.Abort{Actor: actor, Reason: reason}
		}
		actions = append(actions, a.Step(cp.now(), ev)...)
	}
}

// result is an action's outcome: its error, and whether it ended at the
// deadline (rather than at an abort).
func (d *driver) result(err error) cutover.Result {
	return cutover.Result{Err: err, Expired: err != nil && d.ctx.Err() == nil &&
		(errors.Is(err, context.DeadlineExceeded) || d.dctx.Err() != nil)}
}

// watch takes the signal of the next agent report, before a read: the
// wait after that read wakes at a report after it, not at one already
// seen (a closed signal would not wait at all).
func (d *driver) watch() {
	d.cp.mu.Lock()
	d.changed = d.cp.changed
	d.cp.mu.Unlock()
}

// waitChange waits until an agent reports, the copy advances (once
// replication is at top priority), a poll interval passes or the run ends.
func (d *driver) waitChange() {
	if d.changed == nil {
		d.watch()
	}
	select {
	case <-d.ctx.Done():
	case <-d.changed:
	case <-d.progressed:
	case <-time.After(d.cp.cfg.poll):
	}
}

// noteProgress is the replication's OnProgress: it wakes the cutover of
// topic if it waits for the copy.
func (cp *ControlPlane) noteProgress(topic string) {
	if ch, ok := cp.catchUp.Load(topic); ok {
		select {
		case ch.(chan struct{}) <- struct{}{}:
		default: // a wake is pending already
		}
	}
}

// do carries out one action and returns its outcome.
func (d *driver) do(act cutover.Action) cutover.Event {
	cp, name := d.cp, d.name
	switch a := act.(type) {
	case cutover.ReadLeases:
		// Leases other replicas granted before MIGRATING was stored are
		// all in etcd by now.
		var err error
		if cp.cfg.records != nil {
			err = cp.cfg.records.Sync(d.dctx)
		}
		return cutover.LeasesRead{Result: d.result(err)}
	case cutover.ReadAgents:
		if a.Wait {
			d.waitChange()
		}
		return cutover.AgentsRead{Agents: d.agents()}
	case cutover.StoreStep:
		err := cp.setStep(d.dctx, name, a.Step, func(t *Topic) {
			if a.SourceFenceUp {
				t.SourceFenceUp = true
			}
			if a.Step == cutover.StepDone {
				t.SourceBatches = d.recent
			}
		})
		return cutover.StepStored{Result: d.result(err)}
	case cutover.PutFence:
		return cutover.FencePut{Result: d.result(cp.cfg.fence.Fence(d.dctx, name))}
	case cutover.CheckFence:
		if a.Wait {
			d.waitChange()
		}
		d.watch()
		ok, behind, err := cp.cfg.fence.Enforced(d.dctx, name)
		return cutover.FenceChecked{Enforced: ok, Behind: behind, Result: d.result(err)}
	case cutover.Sleep:
		select {
		case <-d.ctx.Done():
		case <-time.After(a.For):
		}
		return cutover.Slept{}
	case cutover.RaisePriority:
		// From here the wait for the copy wakes at each of its advances.
		d.progressed = make(chan struct{}, 1)
		cp.catchUp.Store(name, d.progressed)
		return cutover.PriorityRaised{Result: cutover.Result{Err: cp.cfg.repl.SetMigrating(name, true)}}
	case cutover.ReadEndOffsets:
		ends, err := cp.cfg.repl.SourceEndOffsets(d.dctx, name)
		r := cutover.EndOffsetsRead{Ends: ends, Result: d.result(err)}
		if err == nil {
			r.AckedAbove = cp.ackedAbove(name, ends)
		}
		return r
	case cutover.ReadProgress:
		if a.Wait {
			d.waitChange()
		}
		d.watch()
		r := cutover.ProgressRead{Diverged: d.diverged()}
		r.Progress, r.Err = cp.cfg.repl.Progress(name)
		return r
	case cutover.StopReplication:
		final, recent, err := cp.cfg.repl.Stop(d.dctx, name)
		d.recent = recent
		return cutover.ReplicationStopped{Final: final, Diverged: d.diverged(), Result: d.result(err)}
	case cutover.LiftGuard:
		// Never under a restore's Protect (acl.Keeper.LiftGuard).
		return cutover.GuardLifted{Result: d.result(cp.keeper.LiftGuard(d.dctx, name))}
	case cutover.StoreComplete:
		return d.storeComplete()
	}
	panic(fmt.Sprintf("controlplane: the cutover asked for %T, which the driver does not carry out", act))
}

// agents is what the drain reads of every agent, and the signal of the
// next report.
func (d *driver) agents() []cutover.Agent {
	d.cp.mu.Lock()
	defer d.cp.mu.Unlock()
	d.changed = d.cp.changed
	out := make([]cutover.Agent, 0, len(d.cp.agents))
	for _, a := range d.cp.agents {
		r, reported := a.Topics[d.name]
		out = append(out, cutover.Agent{Node: a.Node, GrantedAt: a.GrantedAt, EarlierGrantedAt: a.EarlierGrantedAt,
			LastHeartbeat: a.LastHeartbeat, AckedVersion: a.AckedVersion, Reported: reported, Stopped: r.StoppedForwarding,
			InFlight: int64(r.InFlight)})
	}
	return out
}

func (d *driver) diverged() string {
	if dv := d.cp.cfg.repl.Diverged(d.name); len(dv) > 0 {
		return divergedText(d.name, dv)
	}
	return ""
}

// storeComplete stores COMPLETE at the next version, unless the operator
// aborted first (nil: the caller feeds the abort).
func (d *driver) storeComplete() cutover.Event {
	cp, co := d.cp, d.co
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if d.ctx.Err() != nil {
		return nil
	}
	t := *cp.topics[d.name]
	t.State, t.Cutover, t.CompletedAt = migration.Complete, nil, cp.now()
	// Agents answer a client's retry of one of these from its copy (§9).
	t.SourceBatches, t.SourceBatchesUntil = d.recent, cp.now().Add(SourceBatchesKept)
	// Bounded by the deadline too. A write etcd applies after the client
	// gave up is not overwritten: the rollback finds the attempt decided
	// and takes the COMPLETE (decideLocked).
	if _, err := cp.decideLocked(d.dctx, t, co.Attempt); err != nil {
		return cutover.CompleteStored{Result: d.result(err)}
	}
	delete(cp.runs, d.name)
	cp.event(d.ctx, Event{Topic: d.name, Kind: EventCompleted, From: migration.Migrating.String(), To: migration.Complete.String(),
		Actor: ActorControlPlane, Attempt: co.Attempt, Version: cp.version, StartedAt: co.StartedAt, Took: d.a.Took(cp.now()),
		Reason: fmt.Sprintf("cutover took %v", cp.now().Sub(co.StartedAt).Round(time.Millisecond))})
	return cutover.CompleteStored{}
}

// rollBack carries out the attempt's rollback: the event saying why, then
// PROXY (rollback), never bounded by the run's context.
func (d *driver) rollBack(x cutover.RollBack) {
	cp := d.cp
	cp.mu.Lock()
	delete(cp.runs, d.name)
	cp.mu.Unlock()
	actor := x.Actor
	if actor == "" {
		actor = ActorControlPlane
	}
	reason := x.Reason
	bg := context.WithoutCancel(d.ctx)
	if txns := cp.txns.HeldBy(bg, d.name); txns != "" {
		reason += "; " + txns // what held the copy (docs/design.md §9)
	}
	if err := cp.rollback(bg, d.name, d.co, x.Kind, actor, reason); err != nil {
		cp.log.Error("rolling back; the topic stays MIGRATING until the next start", "topic", d.name, "err", err)
	}
}
