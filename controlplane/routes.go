package controlplane

import (
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane/shadow"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/xds"
)

// The routes pushed to agents over xDS: every managed topic rendered as
// its TopicRoute, published at each config version, alike by the leader
// and the followers.

// renderRoute renders a topic as its TopicRoute: forward is the control
// plane's F, lat the topic's pushed destination latency profile (nil: none).
func renderRoute(t *Topic, forward time.Duration, lat *batonv1.LatencyProfile) *batonv1.TopicRoute {
	r := &batonv1.TopicRoute{Topic: t.Name, State: t.State.Proto(), Version: t.Version,
		SourceCluster: t.Source, DestinationCluster: t.Destination,
		HoldMax: durationpb.New(cmp(t.HoldMax, migration.DefaultHoldMax)), ForwardDeadline: durationpb.New(cmp(t.ForwardDeadline, forward))}
	if mode, err := migration.ParseHoldMode(t.Mode); err == nil {
		r.Mode = mode.Proto() // validated when the topic was added
	}
	for _, b := range t.SourceBatches {
		r.SourceBatches = append(r.SourceBatches, &batonv1.SourceBatch{Partition: b.Partition, ProducerId: b.ProducerID,
			ProducerEpoch: int32(b.Epoch), BaseSequence: b.BaseSeq, Records: b.Records, Offset: b.Offset})
	}
	if s := t.Shadow; s != (Shadow{}) {
		r.Shadow = &batonv1.ShadowFeatures{LatencyEmulation: s.LatencyEmulation, AuthCheck: s.AuthCheck,
			AuthEnforce: s.AuthEnforce, Tagging: s.Tagging, Headroom: s.Headroom}
	}
	r.DestinationLatency = lat
	r.SourceFenced = t.FenceAtCutover
	return r
}

// route renders t as this control plane pushes it. cp.mu is held.
func (cp *ControlPlane) route(t *Topic) *batonv1.TopicRoute {
	return renderRoute(t, cp.cfg.forward, latencyProfile(t, cp.shadow.Profiles()))
}

func cmp(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// renderResources is every route at version, as the leader and the
// followers publish them alike.
func renderResources(version uint64, topics map[string]*Topic, latency map[string]shadow.Profile, forward time.Duration,
	clusters ...*batonv1.Cluster) xds.Resources {
	res := xds.Resources{Version: version, Targets: map[string]xds.Target{}, Clusters: clusters}
	for _, n := range slices.Sorted(maps.Keys(topics)) {
		t := topics[n]
		res.Routes = append(res.Routes, renderRoute(t, forward, latencyProfile(t, latency)))
		if len(t.Target.Namespaces)+len(t.Target.Workloads) > 0 {
			res.Targets[n] = t.Target
		}
	}
	return res
}

// publishLocked pushes every route at the current version, and tells the
// shadow job the topics' states: every change of a topic's state
// publishes. cp.mu is held.
func (cp *ControlPlane) publishLocked() {
	states := make(map[string]migration.State, len(cp.topics))
	for name, t := range cp.topics {
		states[name] = t.State
	}
	cp.shadow.NoteStates(states)
	cp.cfg.xds.Update(renderResources(cp.version, cp.topics, cp.shadow.Profiles(), cp.cfg.forward, cp.cfg.source, cp.cfg.dest))
}

// RouteResources is every route of st, as the leader publishes them
// (forward is F, clusters the Cluster resources): what a follower serves.
func RouteResources(st *RouteState, forward time.Duration, clusters ...*batonv1.Cluster) xds.Resources {
	return renderResources(st.Version, st.Topics, st.Latency, forward, clusters...)
}
