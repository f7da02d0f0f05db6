package controlplane

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/xds"
)

// Latency emulation's push (docs/design.md §12): every LatencyRefresh tick
// the control plane reads the replicator's destination latency of each
// PROXY topic with latency emulation on, and puts it in the topic's
// TopicRoute (destination_latency) when it changed materially: p50 or p99
// by more than LatencyChange from what agents have, or what they have is
// older than LatencyMaxAge.
//
// A profile is a measurement, not config: it is pushed at the current
// config version, not a new one, and not stored. A new version would make
// every agent apply it before its next lease renewal (leases are granted
// only at the current version, §5) and would bump the version a cutover
// waits for; at the same version a lease and a cutover never see it. Delta
// xDS sends the changed routes anyway (a resource's version carries a hash
// of its bytes); a state-of-the-world agent, which is sent responses only
// at new versions, gets the profile with the next config change. After a
// restart profiles are measured again within a tick.
//
// Why these thresholds: the replicator's quantiles are read to a bucket of
// 9 %, and a 1-minute window moves by a few percent from one tick to the
// next with no change on the destination; a producer cannot tell 10 %
// apart either. Pushing only beyond that keeps the xDS stream quiet while
// the destination is steady, and a tick of 5 s brings a real change to
// agents within seconds. The max age re-pushes a steady profile once a
// minute, so measured_at tells an operator (and agents) the profile is
// live, at one route update per topic and minute. All changes of a tick go
// out in one update.
const (
	DefaultLatencyRefresh = 5 * time.Second
	// LatencyChange is the relative change of p50 or p99 that is pushed.
	LatencyChange = 0.10
	// LatencyMaxAge is how old a pushed profile gets before it is pushed
	// again unchanged.
	LatencyMaxAge = time.Minute
)

// LatencyRefresh sets how often destination latencies are read and pushed
// (default DefaultLatencyRefresh, 5 s).
func LatencyRefresh(d time.Duration) Opt { return optFunc(func(c *config) { c.latencyRefresh = d }) }

// pushedLatency is a profile as agents were sent it.
type pushedLatency struct {
	P50, P99 time.Duration
	Samples  int
	At       time.Time
}

// DestinationLatency is a topic's destination latency profile as agents
// were last sent it (TopicStatus).
type DestinationLatency struct {
	P50        time.Duration `json:"p50"`
	P99        time.Duration `json:"p99"`
	Samples    int           `json:"samples"`
	MeasuredAt time.Time     `json:"measuredAt"`
}

// latencyLoop pushes destination latencies until the control plane closes.
func (cp *ControlPlane) latencyLoop(src LatencySource) {
	t := time.NewTicker(cp.cfg.latencyRefresh)
	defer t.Stop()
	for {
		select {
		case <-cp.ctx.Done():
			return
		case <-t.C:
			cp.refreshLatency(src)
		}
	}
}

// refreshLatency reads every emulated PROXY topic's latency and publishes,
// at the current version, the ones that changed materially.
func (cp *ControlPlane) refreshLatency(src LatencySource) {
	now := cp.now()
	changed := map[string]pushedLatency{}
	defer func() {
		// Followers push what the leader pushed (follower.go).
		if es := cp.replicaStore(); es != nil && len(changed) > 0 {
			ctx, cancel := context.WithTimeout(cp.ctx, cp.cfg.latencyRefresh)
			defer cancel()
			if err := es.putLatency(ctx, changed); err != nil {
				cp.log.Debug("recording latency profiles for the followers", "err", err)
			}
		}
	}()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for name := range cp.latency {
		if _, ok := cp.topics[name]; !ok {
			delete(cp.latency, name) // removed: nothing renders it
		}
	}
	for name, t := range cp.topics {
		if !needsLatency(t) {
			continue
		}
		m, ok := src.DestinationLatency(name)
		if !ok {
			continue // nothing copied lately: the last profile still holds
		}
		last, had := cp.latency[name]
		if had && !materially(last, m.P50, m.P99) && now.Sub(last.At) < LatencyMaxAge {
			continue
		}
		cp.latency[name] = pushedLatency{P50: m.P50, P99: m.P99, Samples: m.Samples, At: now}
		changed[name] = cp.latency[name]
	}
	if len(changed) > 0 {
		cp.publishLocked()
	}
}

// materially reports whether p50 or p99 moved by more than LatencyChange
// from what was pushed.
func materially(last pushedLatency, p50, p99 time.Duration) bool {
	moved := func(old, cur time.Duration) bool {
		if old <= 0 {
			return cur > 0
		}
		d := float64(cur-old) / float64(old)
		return d > LatencyChange || d < -LatencyChange
	}
	return moved(last.P50, p50) || moved(last.P99, p99)
}

// needsLatency says whether topic t's route carries the destination's
// latency: in PROXY, with latency emulation or headroom on (each acts on
// it: filter/latency, filter/headroom).
func needsLatency(t *Topic) bool {
	return t.State == migration.Proxy && (t.Shadow.LatencyEmulation || t.Shadow.Headroom)
}

// latencyProfile is what topic t's route carries: a profile only when it
// needs one (needsLatency) and one was measured.
func latencyProfile(t *Topic, latency map[string]pushedLatency) *batonv1.LatencyProfile {
	if !needsLatency(t) {
		return nil
	}
	l, ok := latency[t.Name]
	if !ok {
		return nil
	}
	return &batonv1.LatencyProfile{P50: durationpb.New(l.P50), P99: durationpb.New(l.P99), MeasuredAt: timestamppb.New(l.At)}
}

// destinationLatency is what TopicStatus shows of topic's pushed profile.
func (cp *ControlPlane) destinationLatency(name string) *DestinationLatency {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	t, ok := cp.topics[name]
	if !ok || latencyProfile(t, cp.latency) == nil {
		return nil
	}
	l := cp.latency[name]
	return &DestinationLatency{P50: l.P50, P99: l.P99, Samples: l.Samples, MeasuredAt: l.At}
}

// ShadowChange switches shadow features of a topic; nil fields stay.
type ShadowChange struct {
	LatencyEmulation *bool `json:"latencyEmulation,omitempty"`
	// AuthCheck and AuthEnforce: the auth check (filter/authcheck);
	// turning AuthCheck off is how a topic's false reports are silenced.
	AuthCheck   *bool `json:"authCheck,omitempty"`
	AuthEnforce *bool `json:"authEnforce,omitempty"`
	// Headroom: the headroom check (filter/headroom).
	Headroom *bool `json:"headroom,omitempty"`
	// Target, when set, replaces the nodes that get the shadow features
	// (an empty one: every node): a rollout switches them on namespace by
	// namespace.
	Target *xds.Target `json:"target,omitempty"`
}

// SetShadow switches a REJECT or PROXY topic's shadow features, at a new
// config version (a switch is config: agents apply it before their next
// lease renewal, as any route change). Refused while a cutover runs and
// after it: shadow features act in REJECT and PROXY only.
func (cp *ControlPlane) SetShadow(ctx context.Context, name string, ch ShadowChange, actor string) (Topic, error) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	t, ok := cp.topics[name]
	if !ok {
		return Topic{}, fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	if t.State != migration.Reject && t.State != migration.Proxy {
		return Topic{}, fmt.Errorf("%w: %s is %s: shadow features are switched in REJECT and PROXY only", ErrIllegalTransition, name, t.State)
	}
	nt := *t
	if ch.LatencyEmulation != nil {
		nt.Shadow.LatencyEmulation = *ch.LatencyEmulation
	}
	if ch.AuthCheck != nil {
		nt.Shadow.AuthCheck = *ch.AuthCheck
	}
	if ch.AuthEnforce != nil {
		nt.Shadow.AuthEnforce = *ch.AuthEnforce
	}
	if ch.Headroom != nil {
		nt.Shadow.Headroom = *ch.Headroom
	}
	if ch.Target != nil {
		nt.Target = xds.Target{Namespaces: slices.Clone(ch.Target.Namespaces), Workloads: slices.Clone(ch.Target.Workloads)}
	}
	if nt.Shadow == t.Shadow && sameTarget(nt.Target, t.Target) {
		return nt, nil // nothing to change: no new version
	}
	if err := cp.commitLocked(ctx, nt, false); err != nil {
		return Topic{}, err
	}
	cp.event(ctx, Event{Topic: name, Kind: EventShadowChanged, Actor: actor, Version: cp.version,
		Reason: fmt.Sprintf("latency emulation %s, auth check %s, auth enforce %s, headroom %s; for %s", onOff(nt.Shadow.LatencyEmulation),
			onOff(nt.Shadow.AuthCheck), onOff(nt.Shadow.AuthEnforce), onOff(nt.Shadow.Headroom), targetText(nt.Target))})
	return *cp.topics[name], nil
}

// sameTarget reports whether a and b name the same nodes.
func sameTarget(a, b xds.Target) bool {
	set := func(s []string) []string { return slices.Compact(slices.Sorted(slices.Values(s))) }
	return slices.Equal(set(a.Namespaces), set(b.Namespaces)) && slices.Equal(set(a.Workloads), set(b.Workloads))
}

// targetText is a target as the event log says it.
func targetText(t xds.Target) string {
	var parts []string
	if len(t.Namespaces) > 0 {
		parts = append(parts, "namespaces "+strings.Join(t.Namespaces, ","))
	}
	if len(t.Workloads) > 0 {
		parts = append(parts, "workloads "+strings.Join(t.Workloads, ","))
	}
	if len(parts) == 0 {
		return "every node"
	}
	return strings.Join(parts, ", ")
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
