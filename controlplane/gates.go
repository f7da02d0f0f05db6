package controlplane

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/baton-kafka/baton/controlplane/shadow"
	"github.com/baton-kafka/baton/controlplane/txngate"
	"github.com/baton-kafka/baton/migration"
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
	// GateTransactionalProducer refuses while a transactional producer
	// writes the source topic (a transaction open on it, or a write within
	// the gate window): a transaction cannot span the clusters, so after
	// the cutover the agents refuse its writes to the topic.
	GateTransactionalProducer Gate = "transactional-producer"
	// GateHeadroom refuses while a headroom warning is open for the topic:
	// a producer that cannot sustain its rate at the destination's latency.
	GateHeadroom Gate = "headroom"
	// GateDestinationAuth refuses while a principal seen in PROXY lacks
	// WRITE on the destination topic: it would be refused after the
	// cutover, which cannot be undone.
	GateDestinationAuth Gate = "destination-auth"
)

// Gates lists every gate, in check order.
var Gates = []Gate{GateTimeLag, GateForgottenProducer, GateTransactionalProducer, GateHeadroom, GateDestinationAuth}

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

// checkGates runs the gates after the time lag for a migrate of name and
// returns their refusals, forced or not, in check order. They read state
// under locks of their own (and may ask the source, within ctx): cp.mu
// MUST NOT be held.
func (cp *ControlPlane) checkGates(ctx context.Context, name string) (refusals []gateRefusal) {
	for _, g := range cp.gateChecks {
		if why := g.check(ctx, name); why != "" {
			refusals = append(refusals, gateRefusal{g.gate, why})
		}
	}
	return refusals
}

// lagUnknown starts the time-lag gate's refusal of a topic whose time lag
// is not measured (RefusedForUnknownLag).
const lagUnknown = "time lag unknown"

// RefusedForUnknownLag reports whether a migrate's refusal reason (a
// wave's, an ErrGateRefused's) names the time-lag gate refusing because
// the topic's lag was not measured yet: a refusal that passes once it is
// (a topic just added, replication restarting after another cutover).
func RefusedForUnknownLag(reason string) bool {
	return strings.Contains(reason, gateRefusal{GateTimeLag, lagUnknown}.String())
}

// checkLagLocked is the time-lag gate: it returns its refusal, if any, and
// the lag it read (zero when unknown). cp.mu is held.
func (cp *ControlPlane) checkLagLocked(name string) (refusals []gateRefusal, lag time.Duration) {
	limit := cp.cfg.timeout / 4
	lag, err := cp.cfg.repl.Lag(name)
	switch {
	case err != nil:
		refusals = append(refusals, gateRefusal{GateTimeLag, fmt.Sprintf("%s: %v", lagUnknown, err)})
	case lag > limit:
		refusals = append(refusals, gateRefusal{GateTimeLag,
			fmt.Sprintf("time lag %v is above cutover timeout/4 = %v", lag.Round(time.Millisecond), limit)})
	}
	return refusals, lag
}

// gateCheck is a gate other than the time lag: check says why it refuses
// a migrate of topic, or "" when it passes.
type gateCheck struct {
	gate  Gate
	check func(ctx context.Context, topic string) string
}

// DefaultForgottenProducerWindow is how recently a forgotten producer must
// have been seen on a topic for the forgotten-producer gate to refuse its
// cutover.
const DefaultForgottenProducerWindow = time.Hour

// ForgottenProducerWindow sets how recently a forgotten producer must have
// been seen on a topic for the forgotten-producer gate to refuse its
// cutover (default DefaultForgottenProducerWindow; 0 turns the gate off).
func ForgottenProducerWindow(d time.Duration) Opt {
	return optFunc(func(c *config) { c.forgottenWindow = d })
}

// WithTransactions sets how the control plane reads the source's
// transactional producers (default none: no transactional-producer gate,
// and a rollback does not name open transactions). baton controlplane
// sets txngate.Source on the source's admin client.
func WithTransactions(r txngate.Reader) Opt { return optFunc(func(c *config) { c.txns = r }) }

// TransactionalProducerWindow sets how recently a transactional producer
// must have written a topic for the transactional-producer gate to refuse
// its cutover when no transaction is open (default txngate.DefaultWindow;
// 0 turns the gate off).
func TransactionalProducerWindow(d time.Duration) Opt {
	return optFunc(func(c *config) { c.txnWindow = d })
}

// gates are the control plane's gates after the time lag, in check order.
func (cp *ControlPlane) gates() []gateCheck {
	var gs []gateCheck
	if w := cp.cfg.forgottenWindow; w > 0 {
		gs = append(gs, gateCheck{GateForgottenProducer, func(_ context.Context, topic string) string {
			at, what, ok := cp.shadow.LastBypass(topic)
			if !ok || cp.now().Sub(at) > w {
				return ""
			}
			return fmt.Sprintf("a producer wrote the source directly, not through an agent, %v ago (within %v): %s; "+
				"move it behind an agent first, or its writes after the cutover are lost",
				cp.now().Sub(at).Round(time.Second), w, what)
		}})
	}
	if cp.txns.On() {
		gs = append(gs, gateCheck{GateTransactionalProducer, cp.txns.Check})
	}
	gs = append(gs,
		gateCheck{GateHeadroom, func(_ context.Context, topic string) string {
			if sh, ok := cp.shadowOf(topic); ok && !sh.Headroom {
				return "" // switched off: agents' findings age out on their own
			}
			return findingsText(cp.shadow.OpenFindings(topic, migration.FindingHeadroom, 0), "open headroom warning",
				"raise the setting named on each producer (or resize the destination) and let the warning close")
		}},
		gateCheck{GateDestinationAuth, func(_ context.Context, topic string) string {
			if sh, ok := cp.shadowOf(topic); ok && !sh.AuthCheck && !sh.AuthEnforce {
				return "" // switched off (how false reports are silenced)
			}
			return findingsText(cp.shadow.OpenFindings(topic, migration.FindingAuthMissing, 0), "principal without WRITE on the destination topic",
				"add the ACL named on the destination, or the producer is refused after the cutover")
		}})
	return gs
}

// shadowOf is topic's shadow switches now: a finding of a check switched
// off refuses nothing, though agents send it until it ages out.
func (cp *ControlPlane) shadowOf(topic string) (Shadow, bool) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	t, ok := cp.topics[topic]
	if !ok {
		return Shadow{}, false
	}
	return t.Shadow, true
}

// findingsText says why a gate refuses for open findings fs, "" if none:
// how many, the first few in full, and what to do.
func findingsText(fs []shadow.Finding, what, todo string) string {
	if len(fs) == 0 {
		return ""
	}
	const shown = 3
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", len(fs), what)
	if len(fs) > 1 {
		b.WriteString("s")
	}
	b.WriteString(" (")
	for i, f := range fs[:min(len(fs), shown)] {
		if i > 0 {
			b.WriteString("; ")
		}
		who := f.Principal
		if who == "" {
			who = "client " + f.ClientID
		}
		fmt.Fprintf(&b, "%s, last seen %s: %s", who, f.LastSeen.UTC().Format(time.RFC3339), f.Detail)
	}
	if len(fs) > shown {
		fmt.Fprintf(&b, "; and %d more: baton topic status", len(fs)-shown)
	}
	b.WriteString("): ")
	b.WriteString(todo)
	return b.String()
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
