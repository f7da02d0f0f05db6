package rollout

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/migration"
)

// WaveRun is a wave as run: what it moved, what stayed, and the migrates
// the control plane refused (a cutover gate, a cutover running).
type WaveRun struct {
	Wave
	// After are the earlier namespaces the request named (beyond the waves
	// this control plane ran).
	After     []string             `json:"after,omitempty"`
	StartedAt time.Time            `json:"startedAt"`
	Actor     string               `json:"actor"`
	Moved     []controlplane.Topic `json:"moved"`
	// Started are the topics of Moved whose cutover this request started
	// (a retry's Moved keeps what the wave's earlier runs moved).
	Started []string   `json:"started"`
	Stayed  []WaveStay `json:"stayed"`
	Refused []WaveStay `json:"refused"`
	// Earlier are the namespaces of the waves before it, After included.
	Earlier []string `json:"earlier"`
}

// WaveRequest asks for a wave: After names namespaces of earlier waves
// this control plane did not run (it forgets its waves at a restart).
type WaveRequest struct {
	Wave
	After []string `json:"after,omitempty"`
	// Force lists the cutover gates each migrate is forced past.
	Force []string `json:"force,omitempty"`
}

// check refuses a request whose namespaces are missing or malformed.
func (req WaveRequest) check() error {
	if len(req.Namespaces) == 0 {
		return fmt.Errorf("%w: namespaces: a wave names at least one namespace", controlplane.ErrBadConfig)
	}
	for i, ns := range append(slices.Clone(req.Namespaces), req.After...) {
		if strings.TrimSpace(ns) == "" || strings.ContainsAny(ns, ", \t") {
			field := "namespaces"
			if i >= len(req.Namespaces) {
				field = "after"
			}
			return fmt.Errorf("%w: %s: %q is not a namespace", controlplane.ErrBadConfig, field, ns)
		}
	}
	return nil
}

// RunWave runs a wave: it checks the conditions of the wave before it,
// selects the topics (SelectWave) and starts their cutovers through the
// plane's Migrate, as `baton topic migrate` does. A migrate refused (a
// gate, a cutover running) is reported in Refused, the others still
// start. The wave is recorded, refusals or not: its namespaces count as
// earlier for the next wave. The last wave asked for again by its name
// (with the same namespaces and until, else controlplane.ErrBadConfig) is
// a retry: it moves what is eligible now, its record keeps what it moved
// before. Waves run one at a time.
func (j *Job) RunWave(ctx context.Context, req WaveRequest, actor string) (WaveRun, error) {
	if err := req.check(); err != nil {
		return WaveRun{}, err
	}
	force, err := controlplane.ParseForce(req.Force)
	if err != nil {
		return WaveRun{}, err
	}
	j.runs.Lock()
	defer j.runs.Unlock()
	j.mu.Lock()
	runs := slices.Clone(j.waves)
	j.mu.Unlock()
	runs, retry, err := retryOf(runs, &req)
	if err != nil {
		return WaveRun{}, err
	}
	if len(runs) > 0 {
		if unmet := j.unmet(runs[len(runs)-1]); len(unmet) > 0 {
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
	st := j.Status()
	ts := make([]WaveTopic, 0, len(st.Topics))
	for _, t := range st.Topics {
		ts = append(ts, WaveTopic{Name: t.Name, State: t.State, Writers: t.Writers})
	}
	sel := SelectWave(ts, earlier, req.Namespaces)
	run := WaveRun{Wave: req.Wave, After: req.After, StartedAt: j.cfg.now(), Actor: actor, Moved: []controlplane.Topic{},
		Started: []string{}, Stayed: sel.Stay, Refused: []WaveStay{}, Earlier: earlier}
	if run.Name == "" {
		run.Name = fmt.Sprintf("wave-%d", len(runs)+1)
	}
	for _, name := range sel.Move {
		t, err := j.plane.Migrate(ctx, name, actor, force...)
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
			if !slices.ContainsFunc(run.Moved, func(m controlplane.Topic) bool { return m.Name == t.Name }) {
				run.Moved = append(run.Moved, t)
			}
		}
		slices.SortFunc(run.Moved, func(a, b controlplane.Topic) int { return strings.Compare(a.Name, b.Name) })
	}
	j.mu.Lock()
	j.waves = append(runs, run)
	j.mu.Unlock()
	return run, nil
}

// retryOf tells whether req retries the last of runs: the last wave asked
// for again by name (a migrate of it refused by a gate, a cutover rolled
// back) runs again after the waves before it, and its record is updated,
// not added to. It is the same wave: other namespaces or conditions under
// its name would skip the conditions it set. It returns the runs before
// the retried one and that one (nil: no retry), and adds to req.After the
// earlier namespaces the first run was told of.
func retryOf(runs []WaveRun, req *WaveRequest) ([]WaveRun, *WaveRun, error) {
	n := len(runs)
	if n == 0 || req.Name == "" || runs[n-1].Name != req.Name {
		return runs, nil, nil
	}
	retry := &runs[n-1]
	prev := retry.Wave
	switch {
	case !slices.Equal(slices.Compact(slices.Sorted(slices.Values(req.Namespaces))),
		slices.Compact(slices.Sorted(slices.Values(prev.Namespaces)))):
		return nil, nil, fmt.Errorf("%w: namespaces: wave %s ran with namespaces %s: a retry by its name names the same "+
			"(a wave of other namespaces needs another name)", controlplane.ErrBadConfig, prev.Name, strings.Join(prev.Namespaces, ","))
	case req.Until != prev.Until:
		return nil, nil, fmt.Errorf("%w: until: wave %s ran with until %s: a retry by its name sets the same",
			controlplane.ErrBadConfig, prev.Name, untilText(prev.Until))
	}
	req.After = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(retry.After), req.After...))))
	return runs[:n-1], retry, nil
}

// unmet is what of run's conditions does not hold now. A topic the wave's
// migrate was refused for counts as the wave's once COMPLETE (it was
// migrated by hand); until then it holds complete and soak.
func (j *Job) unmet(run WaveRun) []string {
	now := j.cfg.now()
	var unmet []string
	var last time.Time // the last of the wave's topics to complete
	names := namesOf(run.Moved)
	for _, r := range run.Refused {
		names = append(names, r.Topic)
	}
	for i, name := range names {
		refused := i >= len(run.Moved)
		t, err := j.plane.Topic(name)
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
			if at, what, ok := j.bypass(name, now); ok && !at.Before(run.StartedAt) {
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
func namesOf(ts []controlplane.Topic) []string {
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
