package controlplane

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Gate names one of the cutover gates `baton topic migrate` passes through
// before a topic leaves PROXY (docs/design.md §6). A gate that refuses
// names itself and says why; an operator may force a migrate past any of
// them (--force), and the initiated event records which and why.
//
// Refusals that guard correctness rather than judge readiness (a diverged
// destination, a write guard still being restored) are not gates: nothing
// forces past them.
type Gate string

// The cutover gates, in the order they are checked.
const (
	// GateTimeLag refuses while the replication's time lag is unknown or
	// above the cutover timeout/4: the drain would likely not finish in
	// time and the cutover would roll back after holding producers.
	GateTimeLag Gate = "time-lag"
	// GateForgottenProducer refuses while a producer that bypasses the
	// agents wrote the source topic within the gate window: after the
	// cutover its writes would go to a source nobody copies any more.
	GateForgottenProducer Gate = "forgotten-producer"
	// GateHeadroom refuses while a headroom warning is open for the topic:
	// a producer that cannot sustain its rate at the destination's latency.
	GateHeadroom Gate = "headroom"
	// GateDestinationAuth refuses while a principal seen in PROXY lacks
	// WRITE on the destination topic: it would be refused after the
	// cutover, which cannot be undone.
	GateDestinationAuth Gate = "destination-auth"
)

// Gates lists every gate, in check order.
var Gates = []Gate{GateTimeLag, GateForgottenProducer, GateHeadroom, GateDestinationAuth}

// ForceAll in a force list forces past every gate.
const ForceAll = "all"

// ParseForce checks a --force list: gate names, or "all".
func ParseForce(names []string) ([]Gate, error) {
	var out []Gate
	for _, n := range names {
		n = strings.TrimSpace(n)
		switch {
		case n == "":
			continue
		case n == ForceAll:
			return slices.Clone(Gates), nil
		case slices.Contains(Gates, Gate(n)):
			out = append(out, Gate(n))
		default:
			return nil, fmt.Errorf("%w: force: unknown gate %q (gates: %s, or %s)", ErrBadConfig, n, gateList(), ForceAll)
		}
	}
	return out, nil
}

func gateList() string {
	s := make([]string, len(Gates))
	for i, g := range Gates {
		s[i] = string(g)
	}
	return strings.Join(s, ", ")
}

// gateRefusal is one gate that refused.
type gateRefusal struct {
	gate Gate
	why  string
}

func (r gateRefusal) String() string { return fmt.Sprintf("gate %s: %s", r.gate, r.why) }

// checkGatesLocked runs every gate for a migrate of name and returns the
// refusals, forced or not, in check order; lag is the time lag the
// time-lag gate read (zero when unknown). cp.mu is held.
func (cp *ControlPlane) checkGatesLocked(name string) (refusals []gateRefusal, lag time.Duration) {
	limit := cp.cfg.timeout / 4
	lag, err := cp.cfg.repl.Lag(name)
	switch {
	case err != nil:
		refusals = append(refusals, gateRefusal{GateTimeLag, fmt.Sprintf("time lag unknown: %v", err)})
	case lag > limit:
		refusals = append(refusals, gateRefusal{GateTimeLag,
			fmt.Sprintf("time lag %v is above cutover timeout/4 = %v", lag.Round(time.Millisecond), limit)})
	}
	for _, g := range cp.gateChecks {
		if why := g.check(name); why != "" {
			refusals = append(refusals, gateRefusal{g.gate, why})
		}
	}
	return refusals, lag
}

// gateCheck is a gate other than the time lag: check says why it refuses
// a migrate of topic, or "" when it passes.
type gateCheck struct {
	gate  Gate
	check func(topic string) string
}

// splitForced splits refusals into those forced past and those that stand.
func splitForced(refusals []gateRefusal, force []Gate) (forced, stand []gateRefusal) {
	for _, r := range refusals {
		if slices.Contains(force, r.gate) {
			forced = append(forced, r)
		} else {
			stand = append(stand, r)
		}
	}
	return forced, stand
}

func joinRefusals(rs []gateRefusal) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, "; ")
}

// forceList is the --force value that forces past rs.
func forceList(rs []gateRefusal) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r.gate)
	}
	return strings.Join(s, ",")
}
