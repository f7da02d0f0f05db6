package agent

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/twmb/franz-go/pkg/kerr"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/latency"
	"github.com/baton-kafka/baton/filter/pidmap"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/xds"
)

// ControlPlane makes the agent take its routes over xDS and hold a lease
// from a Baton control plane on conn, as node (see xds.NodeMeta), instead
// of static routes. Then the agent forwards to the source only while its
// lease is valid (docs/design.md §5); without one, writes are answered with
// the retriable error, except produce to topics the source fences at the
// cutover (see ForwardWithoutLease).
func ControlPlane(conn grpc.ClientConnInterface, node *core.Node) Opt {
	return optFunc(func(c *config) { c.cpConn, c.cpNode = conn, node })
}

// ForwardWithoutLease says whether the agent keeps forwarding produce for
// REJECT and PROXY topics whose routes say the source fences them at the
// cutover (source_fenced) while it holds no lease: a control plane out of
// reach then stalls no producer of those topics (docs/design.md §6.1).
// Default true; false makes every write to the source wait for the lease.
// Other writes to the source (offset commits, transactions) always wait.
func ForwardWithoutLease(on bool) Opt {
	return optFunc(func(c *config) { c.noLeaseForward = on })
}

// cpLink is the agent's side of the control plane: the xDS subscription,
// the lease, and what the heartbeats report.
type cpLink struct {
	client  *xds.Client
	keeper  *xds.LeaseKeeper
	applied atomic.Uint64 // TopicRoute version applied to the route table
	// routed: the agent applied routes from the control plane at least
	// once (/readyz).
	routed atomic.Bool
	// unleased: a produce went to the source without a lease since the
	// lease was last seen valid (mayForward logs the first).
	unleased atomic.Bool
}

// settled is called when a topic's last forwarded produce settles: a topic
// the agent has stopped forwarding (MIGRATING) is then drained, and the
// control plane hears it from a heartbeat now rather than at the next
// renewal, up to a third of a lease later: the cutover waits on it. The
// keeper sends it after the heartbeat in flight, if any (xds.LeaseKeeper.Kick):
// a report sent alongside it could arrive first and be overwritten by the
// older one.
func (a *Agent) settled(topic string) {
	if a.cp != nil && a.routes.Lookup(topic).Target() != filter.Source {
		a.cp.keeper.Kick()
	}
}

func (a *Agent) newCPLink() (*cpLink, error) {
	l := &cpLink{}
	var err error
	l.client, err = xds.NewClient(a.cfg.cpConn, a.cfg.cpNode, xds.OnRoutes(a.applyRoutes), xds.ClientLogger(a.log))
	if err != nil {
		return nil, fmt.Errorf("%w: control plane: %w", ErrBadConfig, err)
	}
	l.keeper, err = xds.NewLeaseKeeper(a.cfg.cpConn, a.cfg.cpNode, a.leaseReport, xds.ClientLogger(a.log),
		xds.OnDelivered(a.writes.delivered), xds.LeaseFindings(a.findings.report))
	if err != nil {
		return nil, fmt.Errorf("%w: control plane: %w", ErrBadConfig, err)
	}
	return l, nil
}

// leaseGauge is baton_agent_lease_remaining_seconds: how long the lease
// the agent holds has to run, by its own clock (the one it forwards by),
// read at each scrape; 0 while it holds none (before the first grant, or
// after one ran out unrenewed). A gauge rather than a count of expiries:
// an agent whose control plane is out of reach still serves /metrics, and
// its 0 says so from the lease's end until a renewal.
func (l *cpLink) leaseGauge() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "baton_agent_lease_remaining_seconds",
		Help: "Seconds until the agent's lease from the control plane runs out; 0 while it holds none.",
	}, func() float64 {
		until := l.keeper.ValidUntil()
		if until.IsZero() {
			return 0
		}
		return max(time.Until(until).Seconds(), 0)
	})
}

func (l *cpLink) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = l.client.Run(ctx) }()
	go func() { defer wg.Done(); _ = l.keeper.Run(ctx) }()
	wg.Wait()
}

// applyRoutes replaces the route table with what the control plane sent.
// An error NACKs the version.
func (a *Agent) applyRoutes(version uint64, trs []*batonv1.TopicRoute) error {
	routes := make([]Route, 0, len(trs))
	for _, tr := range trs {
		r := Route{Topic: tr.GetTopic(), HoldMax: tr.GetHoldMax().AsDuration(),
			ForwardDeadline: tr.GetForwardDeadline().AsDuration()}
		st, err := migration.FromProto(tr.GetState())
		if err != nil {
			return fmt.Errorf("topic %q: %w", tr.GetTopic(), err)
		}
		r.State, r.Mode = st, migration.HoldModeFromProto(tr.GetMode())
		r.LatencyEmulation = tr.GetShadow().GetLatencyEmulation()
		if l := tr.GetDestinationLatency(); l != nil {
			r.Latency = &latency.Profile{P50: l.GetP50().AsDuration(), P99: l.GetP99().AsDuration()}
		}
		r.AuthEnforce = tr.GetShadow().GetAuthEnforce()
		r.AuthCheck = tr.GetShadow().GetAuthCheck() || r.AuthEnforce
		r.Headroom = tr.GetShadow().GetHeadroom()
		r.SourceFenced = tr.GetSourceFenced()
		if r.copied, err = copiedBatches(tr.GetTopic(), tr.GetSourceBatches()); err != nil {
			return fmt.Errorf("topic %q: %w", tr.GetTopic(), err)
		}
		routes = append(routes, r)
	}
	if err := checkTopicRoutes(routes); err != nil {
		return err
	}
	a.routes.Replace(routes)
	a.cp.applied.Store(version)
	a.cp.routed.Store(true)
	a.log.Info("routes applied", "version", version, "topics", len(routes))
	// Tell the control plane now rather than at the next renewal: a lease
	// is granted only to an agent that applied the newest version. Kick,
	// not a heartbeat of its own: one in flight, its report made before
	// this version was applied, could reach the control plane after it and
	// overwrite it, with nothing to send the version again until the next
	// renewal. The keeper sends it after the one in flight, and again if it
	// fails.
	a.cp.keeper.Kick()
	return nil
}

// leaseReport is what every heartbeat carries: the applied version and,
// per managed topic, forwarded produce requests still in flight, whether
// the agent has stopped forwarding the topic, and the end of what it acked
// per partition, and what it wrote to the source since its last answered
// report (bypass detection, docs/design.md §12).
func (a *Agent) leaseReport() (uint64, []*batonv1.TopicDrain) {
	routes, _ := a.routes.Snapshot()
	writes, truncated := a.writes.report()
	out := make([]*batonv1.TopicDrain, 0, len(routes))
	for _, r := range routes {
		n := a.inflight.count(r.Topic)
		// Read after the count: an answer is noted before it stops
		// counting, so a drained report holds every acked end.
		ends := a.acked.of(r.Topic)
		stopped := r.Target() != filter.Source
		out = append(out, &batonv1.TopicDrain{Topic: r.Topic, InFlight: uint32(n), StoppedForwarding: stopped,
			Drained: stopped && n == 0, AckedEnds: ends, Writes: writes[r.Topic], WritesTruncated: truncated})
	}
	return a.cp.applied.Load(), out
}

// copiedBatches indexes a COMPLETE route's source batches (the last ones of
// each idempotent source producer the replicator copied), refusing values
// no batch can have.
func copiedBatches(topic string, bs []*batonv1.SourceBatch) (*pidmap.Copied, error) {
	if len(bs) == 0 {
		return nil, nil
	}
	m := make(map[pidmap.Batch]int64, len(bs))
	for i, b := range bs {
		switch {
		case b.GetPartition() < 0, b.GetProducerId() < 0, b.GetRecords() < 1, b.GetOffset() < 0,
			b.GetProducerEpoch() < 0 || b.GetProducerEpoch() > math.MaxInt16, b.GetBaseSequence() < 0:
			return nil, fmt.Errorf("source_batches[%d]: partition %d, producer %d epoch %d, sequence %d, %d records at %d: out of range",
				i, b.GetPartition(), b.GetProducerId(), b.GetProducerEpoch(), b.GetBaseSequence(), b.GetRecords(), b.GetOffset())
		}
		m[pidmap.Batch{Topic: topic, Partition: b.GetPartition(), ProducerID: b.GetProducerId(),
			Epoch: int16(b.GetProducerEpoch()), Seq: b.GetBaseSequence(), Records: b.GetRecords()}] = b.GetOffset()
	}
	return pidmap.NewCopied(m), nil
}

// leaseValid says whether the agent may write to the source now: with
// static routes always; with a control plane while it holds a lease.
// Requests wait for it in the chain (see chain.go): produce in the
// produce hold, other writes in leasegate.
func (a *Agent) leaseValid() bool {
	return a.cp == nil || a.cp.keeper.Valid()
}

// mayForward says whether a produce for r may go to the source now: under
// a lease, or without one for a REJECT or PROXY topic the source fences at
// the cutover (ForwardWithoutLease), up to migration.UnleasedForward after
// the lease ran out. The first produce forwarded without a lease after one
// ran out is logged.
func (a *Agent) mayForward(r Route) bool {
	if a.leaseValid() {
		if a.cp != nil && a.cp.unleased.Load() {
			a.cp.unleased.Store(false)
		}
		return true
	}
	if !a.cfg.noLeaseForward || !r.SourceFenced || (r.State != migration.Reject && r.State != migration.Proxy) {
		return false
	}
	if until := a.cp.keeper.ValidUntil(); until.IsZero() || time.Since(until) >= migration.UnleasedForward {
		if !until.IsZero() && a.cp.unleased.CompareAndSwap(true, false) {
			a.log.Error("no lease from the control plane for the longest an agent forwards without one: produce to the "+
				"source waits for a lease again. Check the control plane is up and reachable", "lease_ran_out", until,
				"bound", migration.UnleasedForward)
		}
		return false
	}
	if a.cp.unleased.CompareAndSwap(false, true) {
		a.log.Warn("no lease from the control plane: forwarding produce for topics the source fences at their cutover "+
			"without one; other writes to the source wait for the lease. Check the control plane is up and reachable",
			"example_topic", r.Topic)
	}
	return true
}

// mayForwardAll says whether mayForward holds for every topic.
func (a *Agent) mayForwardAll(topics []string) bool {
	for _, t := range topics {
		if !a.mayForward(a.routes.Lookup(t)) {
			return false
		}
	}
	return true
}

// sourceFenceRefused turns a TOPIC_AUTHORIZATION_FAILED the source
// answered for a fenced topic into the retriable error: it is the
// cutover's fence (the agent learns the new route when it reaches the
// control plane again), or a producer that lost WRITE on the source, which
// would have been refused before the migration too. Logged once a topic.
func (a *Agent) sourceFenceRefused(topic string, code int16) int16 {
	if code != kerr.TopicAuthorizationFailed.Code || !a.routes.Lookup(topic).SourceFenced {
		return code
	}
	if _, seen := a.fenceSeen.LoadOrStore(topic, true); !seen {
		a.log.Warn("the source refused a write to a topic it fences at the cutover: the cutover's fence is up "+
			"(answered retriable until this agent gets the topic's new route from the control plane), or the "+
			"producer's principal lost WRITE on the source", "topic", topic)
	}
	return retriable
}

// forwardDeadline is F for topics: the smallest of their routes'
// deadlines, as the control plane pushed them, else the control plane's own
// F from the last lease answer, else the agent's option (static routes);
// capped without a valid lease. It ends the in-flight count of a request
// whose answer is lost; the wait for a produce's answer (waitCall) asks it
// for no topic, so that wait is the control plane's F. The control plane's
// silent-agent wait counts with the larger of the two, so an agent never
// keeps a request uncertain longer than the control plane waits for it.
func (a *Agent) forwardDeadline(topics []string) time.Duration {
	f := a.heldForwardDeadline(topics)
	if a.cp != nil && !a.leaseValid() {
		// Forwarded without a lease (a fenced topic): the cutover's wait
		// after the fence counts with at most this.
		f = min(f, migration.UnleasedForwardDeadline)
	}
	return f
}

func (a *Agent) heldForwardDeadline(topics []string) time.Duration {
	f := time.Duration(0)
	for _, t := range topics {
		if d := a.routes.Lookup(t).ForwardDeadline; d > 0 && (f == 0 || d < f) {
			f = d
		}
	}
	if f > 0 {
		return f
	}
	if a.cp != nil {
		if last := a.cp.keeper.Last(); last != nil {
			if d := last.GetForwardDeadline().AsDuration(); d > 0 {
				return d
			}
		}
	}
	return a.cfg.forwardDeadline
}
