package rollout

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/migration"
)

// Agent is an agent as the rollout shows it.
type Agent struct {
	Node         string    `json:"node"`
	Workload     string    `json:"workload"`
	AckedVersion uint64    `json:"ackedVersion"`
	LeaseValid   bool      `json:"leaseValid"`
	ExpiresAt    time.Time `json:"expiresAt,omitzero"`
	// Refused is why its last heartbeat got no lease.
	Refused string `json:"refused,omitempty"`
	// Topics are the topics it reported writing.
	Topics []string `json:"topics"`
}

// Namespace is one namespace's agents and the topics written from it.
type Namespace struct {
	Namespace string   `json:"namespace"`
	Agents    []Agent  `json:"agents"`
	Topics    []string `json:"topics"`
}

// Bypass is the last producer seen writing a topic's source around the
// agents (a forgotten_producer event).
type Bypass struct {
	At   time.Time `json:"at"`
	What string    `json:"what"`
}

// Topic is a managed topic with the namespaces and workloads that write it.
type Topic struct {
	Name  string          `json:"name"`
	State migration.State `json:"state"`
	// Writers are the namespaces of the agents that write it (holding a
	// lease, or within the writer memory of their last write of it);
	// Workloads "namespace/workload" of the same agents.
	Writers   []string `json:"writers"`
	Workloads []string `json:"workloads"`
	// Bypass is set when a producer wrote its source around the agents
	// within the forgotten-producer window.
	Bypass *Bypass `json:"bypass,omitempty"`
}

// Status is the rollout as `baton rollout status` shows it (GET
// /v1/rollout).
type Status struct {
	// Version is the current config version, which agents must ack.
	Version    uint64      `json:"version"`
	Namespaces []Namespace `json:"namespaces"`
	Topics     []Topic     `json:"topics"`
	Waves      []WaveRun   `json:"waves"`
	// Unmet is what of the last wave's conditions (its Until) does not
	// hold yet: the next wave is refused until it is empty.
	Unmet []string `json:"unmet"`
}

// Status returns, per namespace, its agents and the topics written from
// it, and per topic its writers: an agent counts as a writer of a topic
// once it reported writing it, while it holds its lease and for the writer
// memory (WriterMemory) after its last write of it.
func (j *Job) Status() Status {
	now := j.cfg.now()
	out := Status{Version: j.plane.Version(), Namespaces: []Namespace{}, Topics: []Topic{}}
	agents := map[string]controlplane.Agent{}
	expires := map[string]time.Time{}
	for _, a := range j.plane.Agents() {
		agents[a.Node], expires[a.Node] = a.Agent, a.ExpiresAt
	}
	writers := j.writers.current(now, j.cfg.writerMemory, expires) // topic -> nodes
	wrote := map[string][]string{}                                 // node -> topics
	for topic, nodes := range writers {
		for _, node := range nodes {
			wrote[node] = append(wrote[node], topic)
		}
	}
	j.mu.Lock()
	out.Waves = slices.Clone(j.waves)
	j.mu.Unlock()
	if out.Waves == nil {
		out.Waves = []WaveRun{}
	}
	out.Namespaces = namespaces(agents, wrote, now)
	for _, t := range j.plane.Topics() {
		rt := Topic{Name: t.Name, State: t.State, Writers: []string{}, Workloads: []string{}}
		for _, node := range writers[t.Name] {
			a := agents[node]
			rt.Writers = append(rt.Writers, a.Namespace)
			rt.Workloads = append(rt.Workloads, a.Namespace+"/"+a.Workload)
		}
		rt.Writers = slices.Compact(slices.Sorted(slices.Values(rt.Writers)))
		rt.Workloads = slices.Compact(slices.Sorted(slices.Values(rt.Workloads)))
		if at, what, ok := j.bypass(t.Name, now); ok {
			rt.Bypass = &Bypass{At: at, What: what}
		}
		out.Topics = append(out.Topics, rt)
	}
	slices.SortFunc(out.Topics, func(a, b Topic) int { return strings.Compare(a.Name, b.Name) })
	out.Unmet = []string{}
	if len(out.Waves) > 0 {
		out.Unmet = append(out.Unmet, j.unmet(out.Waves[len(out.Waves)-1])...)
	}
	return out
}

// namespaces groups agents by namespace, in name order, each with the
// topics it wrote (wrote: node -> topics).
func namespaces(agents map[string]controlplane.Agent, wrote map[string][]string, now time.Time) []Namespace {
	byNS := map[string]*Namespace{}
	for _, node := range slices.Sorted(maps.Keys(agents)) {
		a := agents[node]
		ns := byNS[a.Namespace]
		if ns == nil {
			ns = &Namespace{Namespace: a.Namespace, Agents: []Agent{}, Topics: []string{}}
			byNS[a.Namespace] = ns
		}
		ts := slices.Sorted(slices.Values(wrote[node]))
		if ts == nil {
			ts = []string{}
		}
		ns.Agents = append(ns.Agents, Agent{Node: node, Workload: a.Workload, AckedVersion: a.AckedVersion,
			LeaseValid: now.Before(a.ExpiresAt), ExpiresAt: a.ExpiresAt, Refused: a.Refused, Topics: ts})
		ns.Topics = slices.Compact(slices.Sorted(slices.Values(append(ns.Topics, ts...))))
	}
	out := []Namespace{}
	for _, name := range slices.Sorted(maps.Keys(byNS)) {
		out = append(out, *byNS[name])
	}
	return out
}
