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
	"github.com/baton-kafka/baton/controlplane/shadow"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/xds"
)

// A topic's shadow features are config (SetShadow); the destination
// latency its route carries for them is measured by package shadow.

// DestinationLatency is a topic's destination latency profile as agents
// were last sent it (TopicStatus).
type DestinationLatency struct {
	P50        time.Duration `json:"p50"`
	P99        time.Duration `json:"p99"`
	Samples    int           `json:"samples"`
	MeasuredAt time.Time     `json:"measuredAt"`
}

// needsLatency says whether topic t's route carries the destination's
// latency: in PROXY, with latency emulation or headroom on (each acts on
// it: filter/latency, filter/headroom).
func needsLatency(t *Topic) bool {
	return t.State == migration.Proxy && (t.Shadow.LatencyEmulation || t.Shadow.Headroom)
}

// latencyProfile is what topic t's route carries: a profile only when it
// needs one (needsLatency) and one was measured.
func latencyProfile(t *Topic, latency map[string]shadow.Profile) *batonv1.LatencyProfile {
	if !needsLatency(t) {
		return nil
	}
	l, ok := latency[t.Name]
	if !ok {
		return nil
	}
	return &batonv1.LatencyProfile{P50: durationpb.New(l.P50), P99: durationpb.New(l.P99), MeasuredAt: timestamppb.New(l.At)}
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
