package rollout

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/migration"
)

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
			return fmt.Errorf("%w: until.soak: %q is not a duration of 0 or more (e.g. 10m)", controlplane.ErrBadConfig, j.Soak)
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
