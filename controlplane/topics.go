package controlplane

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/baton-kafka/baton/controlplane/shadow"
	"github.com/baton-kafka/baton/migration"
)

// The topics as an operator manages them: add, move between REJECT and
// PROXY, remove, read with their replication state; and the drop of a
// COMPLETE route's source batches.

// Topics returns every managed topic, sorted by name.
func (cp *ControlPlane) Topics() []Topic {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	out := make([]Topic, 0, len(cp.topics))
	for _, t := range cp.topics {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Topic returns one managed topic.
func (cp *ControlPlane) Topic(name string) (Topic, error) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	t, ok := cp.topics[name]
	if !ok {
		return Topic{}, fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	return *t, nil
}

// TopicStatus is a topic with its replication state.
type TopicStatus struct {
	Topic
	Lag      time.Duration `json:"lag"`
	LagError string        `json:"lagError,omitempty"`
	// GuardRestore is set while the destination write guard is being
	// restored in the background (after a rollback or a start).
	GuardRestore *GuardRestore `json:"guardRestore,omitempty"`
	// Diverged names the partitions whose destination copy took a write
	// not the replicator's (a cutover is refused): partition -> why.
	Diverged map[int32]string `json:"diverged,omitempty"`
	// Findings are the topic's open findings, as agents report them
	// (docs/design.md §12).
	Findings []shadow.Finding `json:"findings,omitempty"`
	// DestinationLatency is the destination latency agents were last sent
	// for latency emulation (PROXY, emulation on).
	DestinationLatency *DestinationLatency `json:"destinationLatency,omitempty"`
}

// Status returns a topic with its time lag.
func (cp *ControlPlane) Status(name string) (TopicStatus, error) {
	t, err := cp.Topic(name)
	if err != nil {
		return TopicStatus{}, err
	}
	st := TopicStatus{Topic: t}
	if l, ok := cp.shadow.Latency(name); ok && needsLatency(&t) {
		st.DestinationLatency = &DestinationLatency{P50: l.P50, P99: l.P99, Samples: l.Samples, MeasuredAt: l.At}
	}
	st.GuardRestore = failedRestore(cp.keeper, name)
	st.Findings = cp.shadow.OpenFindings(name, "", 0)
	if t.State != migration.Complete {
		if st.Lag, err = cp.cfg.repl.Lag(name); err != nil {
			st.LagError = err.Error()
		}
		st.Diverged = cp.cfg.repl.Diverged(name)
	}
	return st, nil
}

// AddTopic starts managing a topic: REJECT or PROXY, replication started.
func (cp *ControlPlane) AddTopic(ctx context.Context, spec TopicSpec, actor string) (Topic, error) {
	if spec.Name == "" {
		return Topic{}, fmt.Errorf("%w: topic name is required", ErrBadConfig)
	}
	if spec.State == migration.Unmanaged {
		spec.State = migration.Proxy
	}
	mode, err := migration.ParseHoldMode(spec.Mode)
	if err != nil {
		return Topic{}, fmt.Errorf("%w: mode: %w", ErrBadConfig, err)
	}
	spec.Mode = mode.String()
	if spec.HoldMax < 0 {
		return Topic{}, fmt.Errorf("%w: holdMax %v is negative", ErrBadConfig, spec.HoldMax)
	}
	if spec.ForwardDeadline < 0 || spec.ForwardDeadline >= cp.cfg.lease {
		return Topic{}, fmt.Errorf("%w: forwardDeadline %v: want 0 (the control plane's, %v) or below the lease (%v)",
			ErrBadConfig, spec.ForwardDeadline, cp.cfg.forward, cp.cfg.lease)
	}
	if spec.Source == "" {
		spec.Source = cp.cfg.source.GetName()
	}
	if spec.Destination == "" {
		spec.Destination = cp.cfg.dest.GetName()
	}
	if err := Transition(migration.Unmanaged, spec.State); err != nil {
		return Topic{}, err
	}
	cp.mu.Lock()
	_, exists := cp.topics[spec.Name]
	cp.mu.Unlock()
	if exists { // checked again below, under the lock: this spares the reads
		return Topic{}, fmt.Errorf("%w: %s", ErrTopicExists, spec.Name)
	}
	promised, leftUp, err := cp.keeper.Adding(ctx, spec.Name)
	if err != nil {
		return Topic{}, err
	}
	if err := cp.cfg.guard.Protect(ctx, spec.Name); err != nil {
		return Topic{}, fmt.Errorf("controlplane: protecting %s on the destination: %w", spec.Name, err)
	}
	cp.mu.Lock()
	if _, ok := cp.topics[spec.Name]; ok {
		cp.mu.Unlock()
		return Topic{}, fmt.Errorf("%w: %s", ErrTopicExists, spec.Name)
	}
	t := Topic{TopicSpec: spec, FenceAtCutover: promised, SourceFenceUp: leftUp}
	err = cp.commitLocked(ctx, t, false)
	t = *cp.topics[spec.Name]
	cp.mu.Unlock()
	if err != nil {
		return Topic{}, err
	}
	if err := cp.cfg.repl.Start(spec.Name); err != nil {
		cp.log.Error("starting replication", "topic", spec.Name, "err", err)
	}
	if leftUp {
		cp.keeper.Restore(spec.Name, false) // lifts the fence an earlier cutover left up
	}
	cp.event(ctx, Event{Topic: t.Name, Kind: EventAdded, To: t.State.String(), Actor: actor, Version: t.Version})
	return t, nil
}

// SetState moves a topic between REJECT and PROXY, or removes it
// (to migration.Unmanaged). MIGRATING and COMPLETE are the cutover's: see
// Migrate. A topic mid-cutover is refused (ErrCutoverRunning): its
// MIGRATING ends in COMPLETE or its rollback's PROXY, or by Abort.
func (cp *ControlPlane) SetState(ctx context.Context, name string, to migration.State, actor string) (Topic, error) {
	return cp.setState(ctx, name, to, actor, nil)
}

// RemoveTopic stops managing a topic, as SetState to migration.Unmanaged
// does, and refuses a COMPLETE one unless force (ErrNeedsForce): agents
// route a topic no route names to the source, so producers still writing
// it through an agent would go back to the source, where the source fence
// kept since the cutover refuses them, or, with none, their records land
// where nothing copies them to the destination any more.
func (cp *ControlPlane) RemoveTopic(ctx context.Context, name, actor string, force bool) (Topic, error) {
	return cp.setState(ctx, name, migration.Unmanaged, actor, func(t *Topic) error {
		if t.State != migration.Complete || force {
			return nil
		}
		fence := "with no source fence up, their records would land on the source, where nothing copies them to the destination"
		if t.SourceFenceUp {
			fence = "the source fence kept since the cutover refuses them (TOPIC_AUTHORIZATION_FAILED)"
		}
		return fmt.Errorf("%w: remove %s: it is COMPLETE, and agents route a topic no route names to the source: producers "+
			"still writing it through an agent would write the source again (%s); point them at the destination's brokers "+
			"directly first; to remove it anyway: baton topic remove %s --force", ErrNeedsForce, name, fence, name)
	})
}

// setState is SetState, refused also by check (nil: none), under cp.mu.
func (cp *ControlPlane) setState(ctx context.Context, name string, to migration.State, actor string, check func(*Topic) error) (Topic, error) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	t, ok := cp.topics[name]
	if !ok {
		return Topic{}, fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	from := t.State
	if _, running := cp.runs[name]; running || from == migration.Migrating {
		step := ""
		if t.Cutover != nil {
			step = ", step " + string(t.Cutover.Step)
		}
		return Topic{}, fmt.Errorf("%w: %s is MIGRATING (attempt %d%s): the cutover ends in COMPLETE, or rolled back in PROXY; "+
			"to end it now: baton topic abort %s", ErrCutoverRunning, name, t.Attempts, step, name)
	}
	if err := Transition(from, to); err != nil {
		return Topic{}, err
	}
	if to == migration.Migrating || to == migration.Complete {
		return Topic{}, fmt.Errorf("%w: %s -> %s: rule %q: use migrate", ErrIllegalTransition, from, to, RuleCompleteByCutover.Name)
	}
	if check != nil {
		if err := check(t); err != nil {
			return Topic{}, err
		}
	}
	if to == migration.Unmanaged && t.SourceFenceUp && from != migration.Complete {
		// Only the restore of a REJECT or PROXY topic lifts it.
		return Topic{}, fmt.Errorf("%w: %s -> %s: %s is fenced on the source since a rolled-back cutover, and the fence is "+
			"lifted in the background (see status): removing it first would leave the fence up with nobody to lift it",
			ErrIllegalTransition, from, to, name)
	}
	nt := *t
	nt.State = to
	if err := cp.commitLocked(ctx, nt, to == migration.Unmanaged); err != nil {
		return Topic{}, err
	}
	kind := EventTransition
	if to == migration.Unmanaged {
		kind = EventRemoved
	}
	cp.event(ctx, Event{Topic: name, Kind: kind, From: from.String(), To: to.String(), Actor: actor, Version: cp.version,
		FenceAtCutover: to == migration.Unmanaged && t.FenceAtCutover})
	if to == migration.Unmanaged {
		return nt, nil
	}
	return *cp.topics[name], nil
}

// SourceBatchesKept is how long a COMPLETE route carries the source
// batches copied before its cutover (docs/design.md §9): longer than any
// client retries one batch (librdkafka's message timeout is 5 minutes).
const SourceBatchesKept = 15 * time.Minute

// dropSourceBatches takes the source batches out of the routes of topics
// COMPLETE for longer than SourceBatchesKept, at a new version. A failed
// write is tried again at the next tick.
func (cp *ControlPlane) dropSourceBatches(ctx context.Context) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, t := range cp.topics {
		// A MIGRATING topic at StepDone holds its batches for COMPLETE;
		// no one but its cutover writes it.
		if t.State != migration.Complete || len(t.SourceBatches) == 0 || cp.now().Before(t.SourceBatchesUntil) {
			continue
		}
		nt := *t
		nt.SourceBatches, nt.SourceBatchesUntil = nil, time.Time{}
		if err := cp.commitLocked(ctx, nt, false); err != nil {
			cp.log.Debug("dropping a COMPLETE topic's source batches", "topic", t.Name, "err", err)
			return
		}
	}
}
