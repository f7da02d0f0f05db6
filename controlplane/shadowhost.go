package controlplane

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-kafka/baton/controlplane/shadow"
)

// The PROXY phase's watch (bypass detection, agents' findings, destination
// latency profiles) is package shadow's job; shadowHost is what it sees of
// the control plane.

// BypassGrace sets how long a batch the replicator read from a PROXY
// topic's source waits for every agent that may have written it to report
// past it (default: twice the lease, 10 s): shadow.BypassGrace.
func BypassGrace(d time.Duration) Opt { return shadowOpt(shadow.BypassGrace(d)) }

// BypassWatch sets how long after COMPLETE S.T's end offsets are watched
// for writes (default shadow.DefaultBypassWatch, 24 h; 0: off).
func BypassWatch(d time.Duration) Opt { return shadowOpt(shadow.BypassWatch(d)) }

// BypassPoll sets how often S.T's end offsets are read while watched after
// COMPLETE (default shadow.DefaultBypassPoll, 5 s).
func BypassPoll(d time.Duration) Opt { return shadowOpt(shadow.BypassPoll(d)) }

// LatencyRefresh sets how often destination latencies are read and pushed
// (default shadow.DefaultLatencyRefresh, 5 s).
func LatencyRefresh(d time.Duration) Opt { return shadowOpt(shadow.LatencyRefresh(d)) }

func shadowOpt(o shadow.Opt) Opt {
	return optFunc(func(c *config) { c.shadow = append(c.shadow, o) })
}

// Shadow returns the PROXY phase's watch: forgotten producers
// (LastBypass), agents' open findings (OpenFindings), destination latency
// profiles.
func (cp *ControlPlane) Shadow() *shadow.Job { return cp.shadow }

// shadowHost is the control plane as the shadow job sees it.
type shadowHost struct{ cp *ControlPlane }

var (
	_ shadow.View      = shadowHost{}
	_ shadow.Recorder  = shadowHost{}
	_ shadow.Publisher = shadowHost{}
)

// Topics implements shadow.View.
func (h shadowHost) Topics() []shadow.Topic {
	ts := h.cp.Topics()
	out := make([]shadow.Topic, len(ts))
	for i, t := range ts {
		at := t.CompletedAt
		if at.IsZero() {
			at = t.UpdatedAt // completed before CompletedAt was stored
		}
		out[i] = shadow.Topic{Name: t.Name, State: t.State, CompletedAt: at, FenceAtCutover: t.FenceAtCutover,
			Latency: needsLatency(&t)}
	}
	return out
}

// Leases implements shadow.View.
func (h shadowHost) Leases() []shadow.Lease {
	h.cp.mu.Lock()
	defer h.cp.mu.Unlock()
	out := make([]shadow.Lease, 0, len(h.cp.agents))
	for _, a := range h.cp.agents {
		out = append(out, shadow.Lease{Node: a.Node, ExpiresAt: a.ExpiresAt})
	}
	return out
}

// Record implements shadow.Recorder.
func (h shadowHost) Record(ctx context.Context, e shadow.Event) {
	h.cp.event(ctx, Event{Topic: e.Topic, Kind: e.Kind, Actor: ActorControlPlane, Agent: e.Agent, Reason: e.Reason, Bypass: e.Bypass})
}

// PushLatency implements shadow.Publisher: the routes at the current
// version, then the profiles for the followers to push the same
// (follower.go).
func (h shadowHost) PushLatency(ctx context.Context, changed map[string]shadow.Profile) {
	cp := h.cp
	cp.mu.Lock()
	cp.publishLocked()
	cp.mu.Unlock()
	if es := cp.replicaStore(); es != nil {
		if err := es.PutLatency(ctx, changed); err != nil {
			cp.log.Debug("recording latency profiles for the followers", "err", err)
		}
	}
}

// newShadow is cp's shadow job; pushed are the profiles a previous leader
// pushed (nil: none).
func newShadow(cp *ControlPlane, pushed map[string]shadow.Profile) (*shadow.Job, error) {
	src, _ := cp.cfg.repl.(shadow.LatencySource) // none: no profiles
	h := shadowHost{cp}
	j, err := shadow.New(shadow.Deps{View: h, Recorder: h, Publisher: h, Source: cp.cfg.repl, Latency: src,
		Registry: cp.cfg.registry, Log: cp.log, Now: cp.now, Lease: cp.cfg.lease, Forward: cp.cfg.forward, Pushed: pushed},
		cp.cfg.shadow...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	return j, nil
}
