package agent

import (
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/headroom"
	"github.com/baton-kafka/baton/filter/hold"
	"github.com/baton-kafka/baton/filter/latency"
	"github.com/baton-kafka/baton/filter/leasegate"
	"github.com/baton-kafka/baton/filter/route"
	"github.com/baton-kafka/baton/filter/txnguard"
	"github.com/baton-kafka/baton/migration"
)

// The agent's filter chain, in request order (responses run it in
// reverse). This is the one place it is declared:
//
//  1. the listener's filters (the Filters option), in the order given:
//     they see every request before anything of the agent's holds or
//     answers it, and every answer last, so a metrics filter counts what
//     the client saw;
//  2. sasl, when clients authenticate (ClientSecurity): it answers
//     SaslHandshake and SaslAuthenticate, and closes a connection that
//     sends anything else but ApiVersions before it authenticated, or
//     after its session ended;
//  3. leasegate, with a control plane only: holds writes to the source
//     other than produce until the agent holds a lease, and refuses them
//     after the hold max the way the router answers a request the
//     clusters could not (errorResponse), else by closing the connection;
//  4. headroom, observing only: per client id and topic of a PROXY topic
//     with headroom on and a destination latency, whether the producer's
//     pipeline (its most bytes in flight, from the byte counters) carries
//     its rate at that latency (Little's law), while records already queue
//     in the client; a finding when not (headroomTopics). Before the holds
//     and latency, so on the response side it runs after them: a held or
//     delayed request counts in flight as the producer sees it;
//  5. hold, the produce hold: holds a produce while one of its topics is
//     MIGRATING in hold mode, or bound for the source without a lease, up
//     to the topic's hold max from arrival (holdTopics);
//  6. authcheck: for a produce bound for the source of a PROXY topic
//     with the auth check on, whether the principal the destination will
//     see after the cutover may WRITE the topic there, from a cache of the
//     destination's ACLs (never a round trip); a finding when not, and
//     with auth_enforce its parts answered TOPIC_AUTHORIZATION_FAILED.
//     After hold, so it sees the route the produce is sent by, not one
//     from before a wait; before route, which counts in flight only what
//     it sends and sends no part already answered;
//  7. latency, on the response side only: holds the response of a produce
//     forwarded to the source of a PROXY topic with latency emulation on
//     until the destination's measured latency has passed since the
//     request arrived (emulateTopics). After the holds, so their waits
//     count inside the target; before route, so that on the response side
//     it runs after route and pidmap (a partition's pins and gaps are
//     settled before it holds the answer) and before the listener's
//     filters (a metrics filter counts the latency the client saw);
//  8. route: where each partition of a produce goes, looked up after the
//     hold (source under a lease and counted in flight, destination, or
//     answered retriable), and the connection's partition order (a
//     partition's next request follows its outstanding ones; none overtakes
//     a failed batch's resend);
//  9. txnguard: a transaction lives on the source's coordinator, so a
//     transactional produce's partitions routed to the destination
//     (COMPLETE) are refused TOPIC_AUTHORIZATION_FAILED, and so is an
//     AddPartitionsToTxn naming a COMPLETE topic (the other partitions
//     OPERATION_NOT_ATTEMPTED); one naming a MIGRATING topic is answered
//     CONCURRENT_TRANSACTIONS, which clients retry. After route, which
//     has decided each partition's cluster; it answers only parts bound
//     for the destination, never counted in flight;
//  10. pidmap: destination producer ids and sequences for idempotent batches
//     routed to the destination, and answers for retries of batches the
//     source already holds;
//  11. the router, the chain's Handler: it answers what the agent owns and
//     forwards the rest; a produce's partitions go where route and pidmap
//     planned, to each partition's leader.
func (a *Agent) chain() []filter.Factory {
	fs := append([]filter.Factory(nil), a.cfg.filters...)
	if a.auth != nil {
		fs = append(fs, a.auth)
	}
	if a.cp != nil {
		fs = append(fs, a.leaseGate())
	}
	fs = append(fs, a.headroomCheck(), a.produceHold())
	if a.authCheck != nil { // nil only in tests that build an Agent by hand
		fs = append(fs, a.authCheck)
	}
	return append(fs, a.latencyEmulation(), a.produceRoute(), a.txnGuard(), a.pidmap)
}

// txnGuard is the agent's txnguard filter on its route table: refusals
// counted per topic, the first of each transactional id said at WARN.
func (a *Agent) txnGuard() filter.Factory {
	f, err := txnguard.New(txnguard.Config{Table: a.routes, Log: a.log, Gated: a.advertisedFor,
		Refused: func(topic string) { a.metrics.txnRefused.WithLabelValues(topic).Inc() }})
	if err != nil {
		panic(err) // Table is always set: a bug here, not a config error
	}
	return f
}

// HeadroomWindow sets how long the headroom check (filter/headroom)
// measures a producer before it judges (default headroom.DefaultWindow,
// 10 s).
func HeadroomWindow(d time.Duration) Opt { return optFunc(func(c *config) { c.headroomWindow = d }) }

// headroomCheck is the agent's headroom filter: its routes' switches and
// destination latency, its byte counters' in-flight bytes, and its
// findings.
func (a *Agent) headroomCheck() filter.Factory {
	f, err := headroom.New(headroom.Config{
		Topics: headroomTopics{a.routes},
		Window: a.cfg.headroomWindow,
		Report: func(w headroom.Warning) {
			a.metrics.headroom.WithLabelValues(w.Topic, w.ClientID).Inc()
			if a.findings != nil { // nil only in tests that build an Agent by hand
				a.findings.open(migration.FindingHeadroom, w.Topic, "", w.ClientID, w.String())
			}
		},
		InFlight: func(c filter.ConnInfo) (int64, bool) {
			st, ok := a.ConnStat(c.ID)
			return int64(st.Stats.InFlight), ok
		},
	})
	if err != nil {
		panic(err) // the window is checked in New: a bug here, not a config error
	}
	return f
}

// HeadroomWarnings is how many windows the headroom check (filter/headroom)
// found clientID's producer short on topic.
func (a *Agent) HeadroomWarnings(clientID, topic string) uint64 {
	var m dto.Metric
	if err := a.metrics.headroom.WithLabelValues(topic, clientID).Write(&m); err != nil {
		return 0
	}
	return uint64(m.GetCounter().GetValue())
}

// headroomTopics is what the headroom filter asks the agent: a topic's
// producers are judged while it is in PROXY with headroom on and a
// measured destination latency (its p50).
type headroomTopics struct{ t *RouteTable }

var _ headroom.Topics = headroomTopics{}

// Destination implements headroom.Topics.
func (h headroomTopics) Destination(topic string) (time.Duration, bool) {
	r := h.t.Lookup(topic)
	if r.State != migration.Proxy || !r.Headroom || r.Latency == nil || r.Latency.P50 <= 0 {
		return 0, false
	}
	return r.Latency.P50, true
}

// latencyEmulation is the agent's latency filter on its route table.
func (a *Agent) latencyEmulation() filter.Factory {
	f, err := latency.New(latency.Config{Topics: emulateTopics{a.routes}, Added: a.metrics.emulated})
	if err != nil {
		panic(err) // Topics is always set: a bug here, not a config error
	}
	return f
}

// emulateTopics is what the latency filter asks the agent: a produce to a
// topic is held to the destination's latency while the topic is in PROXY,
// its route has latency emulation on (the control plane clears the switch
// for agents its target leaves out) and carries a measured profile.
type emulateTopics struct{ t *RouteTable }

var _ latency.Topics = emulateTopics{}

// Emulate implements latency.Topics.
func (e emulateTopics) Emulate(topic string) (latency.Profile, bool) {
	r := e.t.Lookup(topic)
	if r.State != migration.Proxy || !r.LatencyEmulation || r.Latency == nil {
		return latency.Profile{}, false
	}
	return *r.Latency, true
}

// Changed implements latency.Topics.
func (e emulateTopics) Changed() <-chan struct{} { return e.t.Changed() }

// advertisedFor says whether the agent advertised x's version: the router
// closes the connection of any other at once, so no filter holds or plans
// it first.
func (a *Agent) advertisedFor(x *filter.Exchange) bool {
	return a.advertises(x.Header.APIKey, x.Header.APIVersion)
}

// produceHold is the agent's produce hold (see holdTopics).
func (a *Agent) produceHold() filter.Factory {
	f, err := hold.New(hold.Config{Topics: holdTopics{a}, Gated: a.advertisedFor, Held: a.metrics.held})
	if err != nil {
		panic(err) // Topics is always set: a bug here, not a config error
	}
	return f
}

// produceRoute is the agent's route filter: its route table, its lease, and
// its in-flight counts, which the router ends (see settleInflight).
func (a *Agent) produceRoute() filter.Factory {
	cfg := route.Config{Table: a.routes, InFlight: &a.inflight, Gated: a.advertisedFor}
	if a.cp != nil {
		cfg.Lease = sourceLease{a}
	}
	f, err := route.New(cfg)
	if err != nil {
		panic(err) // Table is always set: a bug here, not a config error
	}
	return f
}

// holdTopics is what the produce hold asks the agent: a produce to a
// topic waits while the topic is MIGRATING in hold mode, and while it is
// bound for the source and the agent holds no lease.
type holdTopics struct{ a *Agent }

var _ hold.Topics = holdTopics{}

// Wait implements hold.Topics.
func (h holdTopics) Wait(topic string) (bool, time.Duration) {
	r := h.a.routes.Lookup(topic)
	switch r.Target() {
	case filter.Nowhere:
		return r.Mode == migration.Hold, r.HoldMax
	case filter.Source:
		return !h.a.mayForward(r), r.HoldMax
	}
	return false, 0
}

// Changed implements hold.Topics: a route change, and a lease renewal.
func (h holdTopics) Changed() []<-chan struct{} {
	if h.a.cp == nil {
		return []<-chan struct{}{h.a.routes.Changed()}
	}
	return []<-chan struct{}{h.a.routes.Changed(), h.a.cp.keeper.Renewed()}
}

// leaseGate is the agent's leasegate: the keeper's lease, the advertised
// versions only (the router closes the connection of any other at once),
// and the router's retriable answers.
func (a *Agent) leaseGate() filter.Factory {
	f, err := leasegate.New(leasegate.Config{
		Lease:   agentLease{a},
		HoldMax: migration.DefaultHoldMax,
		Gated: func(x *filter.Exchange) bool {
			return leasegate.SourceWrite(x) && a.advertisedFor(x)
		},
		Refuse: func(x *filter.Exchange, err error) {
			if resp, ok := a.errorResponse(x.Req); ok {
				a.log.Debug("answered with a retriable error: no lease", "request", kmsg.NameForKey(x.Header.APIKey), "err", err)
				x.Resp = resp
				return
			}
			x.Err = err
		},
		Held: a.metrics.held,
	})
	if err != nil {
		panic(err) // the Lease is always set: a bug here, not a config error
	}
	return f
}

// agentLease is the control plane's lease as leasegate and route ask
// about it.
type agentLease struct{ a *Agent }

var _ leasegate.Lease = agentLease{}

func (l agentLease) Valid() bool              { return l.a.leaseValid() }
func (l agentLease) Renewed() <-chan struct{} { return l.a.cp.keeper.Renewed() }

// sourceLease is what route asks per topic: may a produce for it go to
// the source now (Agent.mayForward).
type sourceLease struct{ a *Agent }

var _ route.Lease = sourceLease{}

func (l sourceLease) MayWrite(topic string) bool {
	// The route is looked up only without a lease: not on every produce.
	return l.a.leaseValid() || l.a.mayForward(l.a.routes.Lookup(topic))
}
