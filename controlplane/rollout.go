package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/migration"
)

// Per-namespace rollout: the control plane learns which
// namespaces write each topic from the agents' heartbeats (the source
// writes they report for bypass detection, agent/writes.go), and runs
// cutovers in waves of namespaces. A topic has one writing cluster at a
// time, so a wave moves only the PROXY topics whose every writer namespace
// is in this wave or an earlier one: a topic written from a and b moves
// with the later of the two.
//
// What is kept is in memory: the writers are learnt again from the next
// heartbeat that carries a write after a restart, and the waves run are
// forgotten (a wave request names earlier namespaces with After then).

// DefaultRolloutWriterMemory is how long an agent counts as a writer of a
// topic after its last reported write of it, lease or not: an agent
// restarting, cut off a while, or not yet heard from by a new leader still
// holds its topics back from a wave that does not include its namespace.
const DefaultRolloutWriterMemory = time.Hour

// RolloutWriterMemory sets how long an agent counts as a writer of a topic
// after its last reported write of it (default DefaultRolloutWriterMemory);
// while it holds its lease it counts regardless. The memory is the
// control plane's own: it starts over at a restart.
func RolloutWriterMemory(d time.Duration) Opt { return optFunc(func(c *config) { c.writerMemory = d }) }

// ErrWaveRefused: a wave asked for before the conditions of the wave
// before it hold (WaveUntil); the message names each one unmet. It is
// declared here, not in state.go's block, to keep the rollout in its own
// files; it has that block's prefix.
var ErrWaveRefused = errors.New("controlplane: wave refused")

// Wave is one step of a rollout: the namespaces whose topics move, and
// what must hold before the next wave may start. The field names are
// those of a plan's waves (baton apply).
type Wave struct {
	Name       string    `json:"name"`
	Namespaces []string  `json:"namespaces"`
	Until      WaveUntil `json:"until"`
}

// WaveUntil is what must hold before the wave after this one may start.
type WaveUntil struct {
	// Complete: every topic the wave moved is COMPLETE (a cutover rolled
	// back to PROXY holds the next wave until it is migrated again).
	Complete bool `json:"complete,omitempty"`
	// NoForgottenProducers: no producer wrote the source of a topic the
	// wave moved around the agents (a forgotten_producer) since the wave
	// started.
	NoForgottenProducers bool `json:"noForgottenProducers,omitempty"`
	// Soak: how long every topic the wave moved must have been COMPLETE
	// (counted from the last of them to complete). In JSON a Go duration
	// ("10m"); it implies Complete.
	Soak time.Duration `json:"-"`
}

type waveUntilJSON struct {
	Complete             bool   `json:"complete,omitempty"`
	NoForgottenProducers bool   `json:"noForgottenProducers,omitempty"`
	Soak                 string `json:"soak,omitempty"`
}

// MarshalJSON writes Soak as a Go duration.
func (u WaveUntil) MarshalJSON() ([]byte, error) {
	j := waveUntilJSON{Complete: u.Complete, NoForgottenProducers: u.NoForgottenProducers}
	if u.Soak != 0 {
		j.Soak = u.Soak.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads Soak as a Go duration.
func (u *WaveUntil) UnmarshalJSON(b []byte) error {
	var j waveUntilJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*u = WaveUntil{Complete: j.Complete, NoForgottenProducers: j.NoForgottenProducers}
	if j.Soak != "" {
		d, err := time.ParseDuration(j.Soak)
		if err != nil || d < 0 {
			return fmt.Errorf("%w: until.soak: %q is not a duration of 0 or more (e.g. 10m)", ErrBadConfig, j.Soak)
		}
		u.Soak = d
	}
	return nil
}

// WaveTopic is what SelectWave needs of a topic: its state and the
// namespaces of the agents that write it.
type WaveTopic struct {
	Name    string          `json:"name"`
	State   migration.State `json:"state"`
	Writers []string        `json:"writers"`
}

// WaveStay is a topic a wave does not move, and why.
type WaveStay struct {
	Topic  string `json:"topic"`
	Reason string `json:"reason"`
}

// WaveSelection is what a wave moves and what stays.
type WaveSelection struct {
	Move []string   `json:"move"`
	Stay []WaveStay `json:"stay"`
}

// SelectWave picks what a wave of namespaces moves: every PROXY topic whose
// writer namespaces are all in wave or earlier (the namespaces of the
// waves before it): one of an earlier wave that is PROXY again (its
// cutover rolled back) moves with this one. A topic with no known
// writer is not moved (nothing says which wave it belongs to), nor one
// written from a namespace in no wave yet. Topics are taken in name order.
func SelectWave(topics []WaveTopic, earlier, wave []string) WaveSelection {
	sel := WaveSelection{Move: []string{}, Stay: []WaveStay{}}
	ts := slices.Clone(topics)
	slices.SortFunc(ts, func(a, b WaveTopic) int { return strings.Compare(a.Name, b.Name) })
	for _, t := range ts {
		stay := func(format string, args ...any) {
			sel.Stay = append(sel.Stay, WaveStay{Topic: t.Name, Reason: fmt.Sprintf(format, args...)})
		}
		writers := slices.Compact(slices.Sorted(slices.Values(t.Writers)))
		var outside []string
		for _, ns := range writers {
			if !slices.Contains(wave, ns) && !slices.Contains(earlier, ns) {
				outside = append(outside, nsName(ns))
			}
		}
		switch {
		case t.State != migration.Proxy:
			stay("%s, not PROXY", t.State)
		case len(writers) == 0:
			stay("no agent reported writing it: no namespace is known to write it")
		case len(outside) > 0:
			stay("also written from %s, in no wave yet: it moves with the wave of the last of its writers",
				strings.Join(outside, ", "))
		default:
			sel.Move = append(sel.Move, t.Name)
		}
	}
	return sel
}

// nsName is a namespace as shown: an agent with none reports "".
func nsName(ns string) string {
	if ns == "" {
		return "(no namespace)"
	}
	return ns
}

// rolloutState is the writers learnt from heartbeats and the waves run.
// Its lock mu is its own; it is never held with cp.mu.
type rolloutState struct {
	// runs serialises RunWave: the check of the wave before and the
	// record of this one are one step, or two waves asked for at once
	// both pass the check and one record is lost. Held across Migrate
	// (cp.mu) and mu: neither is ever held when it is taken.
	runs sync.Mutex
	mu   sync.Mutex
	// writes is, per topic, the agents that reported writing it and when
	// they last did (the control plane's clock).
	writes map[string]map[string]time.Time
	waves  []WaveRun
}

// noteWriters records which topics an agent's heartbeat reports source
// writes for (acked offset ranges, or writes whose offsets it never
// learned).
func (cp *ControlPlane) noteWriters(req *batonv1.HeartbeatRequest, now time.Time) {
	rs := &cp.rollout
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, d := range req.GetTopics() {
		wrote := false
		for _, pw := range d.GetWrites() {
			wrote = wrote || len(pw.GetAcked()) > 0 || pw.GetUnknownFrom() != nil
		}
		if !wrote {
			continue
		}
		if rs.writes == nil {
			rs.writes = map[string]map[string]time.Time{}
		}
		if rs.writes[d.GetTopic()] == nil {
			rs.writes[d.GetTopic()] = map[string]time.Time{}
		}
		rs.writes[d.GetTopic()][req.GetNodeId()] = now
	}
}

// RolloutAgent is an agent as the rollout shows it.
type RolloutAgent struct {
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

// RolloutNamespace is one namespace's agents and the topics written from it.
type RolloutNamespace struct {
	Namespace string         `json:"namespace"`
	Agents    []RolloutAgent `json:"agents"`
	Topics    []string       `json:"topics"`
}

// RolloutBypass is the last producer seen writing a topic's source around
// the agents (a forgotten_producer event).
type RolloutBypass struct {
	At   time.Time `json:"at"`
	What string    `json:"what"`
}

// RolloutTopic is a managed topic with the namespaces and workloads that
// write it.
type RolloutTopic struct {
	Name  string          `json:"name"`
	State migration.State `json:"state"`
	// Writers are the namespaces of the agents that write it (holding a
	// lease, or within the writer memory of their last write of it);
	// Workloads "namespace/workload" of the same agents.
	Writers   []string `json:"writers"`
	Workloads []string `json:"workloads"`
	// Bypass is set when a producer wrote its source around the agents
	// within the forgotten-producer window.
	Bypass *RolloutBypass `json:"bypass,omitempty"`
}

// WaveRun is a wave as run: what it moved, what stayed, and the migrates
// the control plane refused (a cutover gate, a cutover running).
type WaveRun struct {
	Wave
	// After are the earlier namespaces the request named (beyond the waves
	// this control plane ran).
	After     []string  `json:"after,omitempty"`
	StartedAt time.Time `json:"startedAt"`
	Actor     string    `json:"actor"`
	Moved     []Topic   `json:"moved"`
	// Started are the topics of Moved whose cutover this request started
	// (a retry's Moved keeps what the wave's earlier runs moved).
	Started []string   `json:"started"`
	Stayed  []WaveStay `json:"stayed"`
	Refused []WaveStay `json:"refused"`
	// Earlier are the namespaces of the waves before it, After included.
	Earlier []string `json:"earlier"`
}

// Rollout is the rollout as `baton rollout status` shows it.
type Rollout struct {
	// Version is the current config version, which agents must ack.
	Version    uint64             `json:"version"`
	Namespaces []RolloutNamespace `json:"namespaces"`
	Topics     []RolloutTopic     `json:"topics"`
	Waves      []WaveRun          `json:"waves"`
	// Unmet is what of the last wave's conditions (its Until) does not
	// hold yet: the next wave is refused until it is empty.
	Unmet []string `json:"unmet"`
}

// Rollout returns, per namespace, its agents and the topics written from
// it, and per topic its writers: an agent counts as a writer of a topic
// once it reported writing it, while it holds its lease and for the writer
// memory (RolloutWriterMemory) after its last write of it.
func (cp *ControlPlane) Rollout() Rollout {
	now := cp.now()
	cp.mu.Lock()
	out := Rollout{Version: cp.version, Namespaces: []RolloutNamespace{}, Topics: []RolloutTopic{}}
	agents := map[string]Agent{}
	for n, a := range cp.agents {
		agents[n] = *a
	}
	topics := map[string]migration.State{}
	for n, t := range cp.topics {
		topics[n] = t.State
	}
	cp.mu.Unlock()

	rs := &cp.rollout
	rs.mu.Lock()
	wrote := map[string][]string{} // node -> topics
	writers := map[string][]string{}
	for topic, nodes := range rs.writes {
		for node, at := range nodes {
			a, ok := agents[node]
			if !ok || (!now.Before(a.ExpiresAt) && now.Sub(at) > cp.cfg.writerMemory) {
				continue
			}
			wrote[node] = append(wrote[node], topic)
			writers[topic] = append(writers[topic], node)
		}
	}
	out.Waves = slices.Clone(rs.waves)
	rs.mu.Unlock()
	if out.Waves == nil {
		out.Waves = []WaveRun{}
	}

	byNS := map[string]*RolloutNamespace{}
	for _, node := range slices.Sorted(maps.Keys(agents)) {
		a := agents[node]
		ns := byNS[a.Namespace]
		if ns == nil {
			ns = &RolloutNamespace{Namespace: a.Namespace, Agents: []RolloutAgent{}, Topics: []string{}}
			byNS[a.Namespace] = ns
		}
		ts := slices.Sorted(slices.Values(wrote[node]))
		if ts == nil {
			ts = []string{}
		}
		ns.Agents = append(ns.Agents, RolloutAgent{Node: node, Workload: a.Workload, AckedVersion: a.AckedVersion,
			LeaseValid: now.Before(a.ExpiresAt), ExpiresAt: a.ExpiresAt, Refused: a.Refused, Topics: ts})
		ns.Topics = slices.Compact(slices.Sorted(slices.Values(append(ns.Topics, ts...))))
	}
	for _, name := range slices.Sorted(maps.Keys(byNS)) {
		out.Namespaces = append(out.Namespaces, *byNS[name])
	}
	for _, name := range slices.Sorted(maps.Keys(topics)) {
		rt := RolloutTopic{Name: name, State: topics[name], Writers: []string{}, Workloads: []string{}}
		for _, node := range writers[name] {
			a := agents[node]
			rt.Writers = append(rt.Writers, a.Namespace)
			rt.Workloads = append(rt.Workloads, a.Namespace+"/"+a.Workload)
		}
		rt.Writers = slices.Compact(slices.Sorted(slices.Values(rt.Writers)))
		rt.Workloads = slices.Compact(slices.Sorted(slices.Values(rt.Workloads)))
		if at, what, ok := cp.shadow.LastBypass(name); ok && (cp.cfg.forgottenWindow == 0 || now.Sub(at) <= cp.cfg.forgottenWindow) {
			rt.Bypass = &RolloutBypass{At: at, What: what}
		}
		out.Topics = append(out.Topics, rt)
	}
	out.Unmet = []string{}
	if len(out.Waves) > 0 {
		out.Unmet = append(out.Unmet, cp.unmetUntil(out.Waves[len(out.Waves)-1])...)
	}
	return out
}

// WaveRequest asks for a wave: After names namespaces of earlier waves
// this control plane did not run (it forgets its waves at a restart).
type WaveRequest struct {
	Wave
	After []string `json:"after,omitempty"`
	// Force lists the cutover gates each migrate is forced past.
	Force []string `json:"force,omitempty"`
}

// RunWave runs a wave: it checks the conditions of the wave before it,
// selects the topics (SelectWave) and starts their cutovers through
// Migrate, as `baton topic migrate` does. A migrate refused (a gate, a
// cutover running) is reported in Refused, the others still start. The
// wave is recorded, refusals or not: its namespaces count as earlier for
// the next wave. The last wave asked for again by its name (with the same
// namespaces and until, else ErrBadConfig) is a retry: it moves what is
// eligible now, its record keeps what it moved before. Waves run one at a
// time.
func (cp *ControlPlane) RunWave(ctx context.Context, req WaveRequest, actor string) (WaveRun, error) {
	w := req.Wave
	if len(w.Namespaces) == 0 {
		return WaveRun{}, fmt.Errorf("%w: namespaces: a wave names at least one namespace", ErrBadConfig)
	}
	for i, ns := range append(slices.Clone(w.Namespaces), req.After...) {
		if strings.TrimSpace(ns) == "" || strings.ContainsAny(ns, ", \t") {
			field := "namespaces"
			if i >= len(w.Namespaces) {
				field = "after"
			}
			return WaveRun{}, fmt.Errorf("%w: %s: %q is not a namespace", ErrBadConfig, field, ns)
		}
	}
	force, err := ParseForce(req.Force)
	if err != nil {
		return WaveRun{}, err
	}
	cp.rollout.runs.Lock()
	defer cp.rollout.runs.Unlock()
	cp.rollout.mu.Lock()
	runs := slices.Clone(cp.rollout.waves)
	cp.rollout.mu.Unlock()
	// The last wave asked for again by name is a retry (a migrate of it
	// refused by a gate, a cutover rolled back): it runs again after the
	// waves before it, and its record is updated, not added to. It is the
	// same wave: other namespaces or conditions under its name would skip
	// the conditions it set.
	var retry *WaveRun
	if n := len(runs); n > 0 && w.Name != "" && runs[n-1].Name == w.Name {
		retry = &runs[n-1]
		runs = runs[:n-1]
		prev := retry.Wave
		switch {
		case !slices.Equal(slices.Compact(slices.Sorted(slices.Values(w.Namespaces))),
			slices.Compact(slices.Sorted(slices.Values(prev.Namespaces)))):
			return WaveRun{}, fmt.Errorf("%w: namespaces: wave %s ran with namespaces %s: a retry by its name names the same "+
				"(a wave of other namespaces needs another name)", ErrBadConfig, prev.Name, strings.Join(prev.Namespaces, ","))
		case w.Until != prev.Until:
			return WaveRun{}, fmt.Errorf("%w: until: wave %s ran with until %s: a retry by its name sets the same",
				ErrBadConfig, prev.Name, untilText(prev.Until))
		}
		// The earlier namespaces its first run was told of stay earlier.
		req.After = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(retry.After), req.After...))))
	}
	if len(runs) > 0 {
		if unmet := cp.unmetUntil(runs[len(runs)-1]); len(unmet) > 0 {
			prev := runs[len(runs)-1]
			return WaveRun{}, fmt.Errorf("%w: the wave before it (%s) set conditions that do not hold yet: %s",
				ErrWaveRefused, waveName(prev.Wave), strings.Join(unmet, "; "))
		}
	}
	earlier := slices.Clone(req.After)
	for _, r := range runs {
		earlier = append(earlier, r.Namespaces...)
	}
	earlier = slices.Compact(slices.Sorted(slices.Values(earlier)))
	ro := cp.Rollout()
	ts := make([]WaveTopic, 0, len(ro.Topics))
	for _, t := range ro.Topics {
		ts = append(ts, WaveTopic{Name: t.Name, State: t.State, Writers: t.Writers})
	}
	sel := SelectWave(ts, earlier, w.Namespaces)
	run := WaveRun{Wave: w, After: req.After, StartedAt: cp.now(), Actor: actor, Moved: []Topic{}, Started: []string{}, Stayed: sel.Stay,
		Refused: []WaveStay{}, Earlier: earlier}
	if run.Name == "" {
		run.Name = fmt.Sprintf("wave-%d", len(runs)+1)
	}
	for _, name := range sel.Move {
		t, err := cp.Migrate(ctx, name, actor, force...)
		if err != nil {
			run.Refused = append(run.Refused, WaveStay{Topic: name, Reason: err.Error()})
			continue
		}
		run.Moved = append(run.Moved, t)
		run.Started = append(run.Started, t.Name)
	}
	if retry != nil {
		// What the first run moved stays the wave's: its conditions
		// cover them.
		run.StartedAt = retry.StartedAt
		for _, t := range retry.Moved {
			if !slices.ContainsFunc(run.Moved, func(m Topic) bool { return m.Name == t.Name }) {
				run.Moved = append(run.Moved, t)
			}
		}
		slices.SortFunc(run.Moved, func(a, b Topic) int { return strings.Compare(a.Name, b.Name) })
	}
	cp.rollout.mu.Lock()
	cp.rollout.waves = append(runs, run)
	cp.rollout.mu.Unlock()
	return run, nil
}

// untilText is a wave's conditions as an error says them.
func untilText(u WaveUntil) string {
	var s []string
	if u.Complete {
		s = append(s, "complete")
	}
	if u.NoForgottenProducers {
		s = append(s, "noForgottenProducers")
	}
	if u.Soak > 0 {
		s = append(s, "soak "+u.Soak.String())
	}
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, ", ")
}

func waveName(w Wave) string {
	return fmt.Sprintf("%s: namespaces %s", w.Name, strings.Join(w.Namespaces, ","))
}

// unmetUntil is what of run's conditions does not hold now. A topic the
// wave's migrate was refused for counts as the wave's once COMPLETE (it
// was migrated by hand); until then it holds complete and soak.
func (cp *ControlPlane) unmetUntil(run WaveRun) []string {
	now := cp.now()
	var unmet []string
	var last time.Time // the last of the wave's topics to complete
	names := namesOf(run.Moved)
	for _, r := range run.Refused {
		names = append(names, r.Topic)
	}
	for i, name := range names {
		refused := i >= len(run.Moved)
		t, err := cp.Topic(name)
		complete := err == nil && t.State == migration.Complete
		if complete {
			last = later(last, t.CompletedAt)
		}
		switch {
		case !run.Until.Complete && run.Until.Soak == 0:
		case complete:
		case refused:
			unmet = append(unmet, fmt.Sprintf("%s was refused its migrate (%s), want COMPLETE", name, run.Refused[i-len(run.Moved)].Reason))
		case err != nil:
			unmet = append(unmet, fmt.Sprintf("%s is no longer managed, want COMPLETE", name))
		default:
			unmet = append(unmet, fmt.Sprintf("%s is %s, want COMPLETE", name, t.State))
		}
		// A bypass holds the next wave while the forgotten-producer gate
		// would refuse the topic's cutover for it: within its window.
		if run.Until.NoForgottenProducers && !refused {
			if at, what, ok := cp.shadow.LastBypass(name); ok && !at.Before(run.StartedAt) &&
				(cp.cfg.forgottenWindow == 0 || now.Sub(at) <= cp.cfg.forgottenWindow) {
				unmet = append(unmet, fmt.Sprintf("%s: a producer wrote its source around the agents at %s: %s",
					name, at.Format(time.RFC3339), what))
			}
		}
	}
	if run.Until.Soak > 0 && len(unmet) == 0 && len(names) > 0 {
		if left := last.Add(run.Until.Soak).Sub(now); left > 0 {
			unmet = append(unmet, fmt.Sprintf("soaking: %v of %v left (its last topic completed at %s)",
				left.Round(time.Second), run.Until.Soak, last.Format(time.RFC3339)))
		}
	}
	return unmet
}

// namesOf is the names of ts.
func namesOf(ts []Topic) []string {
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
