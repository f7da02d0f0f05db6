package agent

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/hold"
	"github.com/baton-kafka/baton/filter/leasegate"
	"github.com/baton-kafka/baton/migration"
)

// The agent's filter chain, in request order (responses run it in
// reverse). This is the one place it is declared:
//
//  1. the listener's filters (the Filters option), in the order given:
//     they see every request before anything of the agent's holds or
//     answers it, and every answer last, so a metrics filter counts what
//     the client saw;
//  2. leasegate, with a control plane only: holds writes to the source
//     other than produce until the agent holds a lease, and refuses them
//     after the hold max the way the router answers a request the
//     clusters could not (errorResponse), else by closing the connection;
//  3. hold, the produce hold: holds a produce while one of its topics is
//     MIGRATING in hold mode, or bound for the source without a lease, up
//     to the topic's hold max from arrival (holdTopics);
//  4. the router, the chain's Handler: it answers what the agent owns and
//     forwards the rest. For produce it looks each topic's route up as it
//     sends, after the hold (routeWrite), and answers what still cannot
//     be written with the retriable error.
func (a *Agent) chain() []filter.Factory {
	fs := append([]filter.Factory(nil), a.cfg.filters...)
	if a.cp != nil {
		fs = append(fs, a.leaseGate())
	}
	return append(fs, a.produceHold())
}

// produceHold is the agent's produce hold (see holdTopics).
func (a *Agent) produceHold() filter.Factory {
	f, err := hold.New(hold.Config{
		Topics: holdTopics{a},
		Gated:  func(x *filter.Exchange) bool { return a.advertises(x.Header.APIKey, x.Header.APIVersion) },
		Held:   a.metrics.held,
	})
	if err != nil {
		panic(err) // Topics is always set: a bug here, not a config error
	}
	return f
}

// leaseGate is the agent's leasegate: the keeper's lease, the advertised
// versions only (the router closes the connection of any other at once),
// and the router's retriable answers.
func (a *Agent) leaseGate() filter.Factory {
	f, err := leasegate.New(leasegate.Config{
		Lease:   agentLease{a},
		HoldMax: migration.DefaultHoldMax,
		Gated: func(x *filter.Exchange) bool {
			return leasegate.SourceWrite(x) && a.advertises(x.Header.APIKey, x.Header.APIVersion)
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

// agentLease is the control plane's lease as leasegate asks about it.
type agentLease struct{ a *Agent }

var _ leasegate.Lease = agentLease{}

func (l agentLease) Valid() bool              { return l.a.leaseValid() }
func (l agentLease) Renewed() <-chan struct{} { return l.a.cp.keeper.Renewed() }
