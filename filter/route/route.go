// Package route owns where each partition of a produce request goes: the
// source, the destination, or nowhere (answered with a retriable error),
// decided as the request goes on to be sent, after every wait of the
// filters before it; and, per client connection, the order a direct
// connection to the brokers would keep between a partition's pipelined
// requests.
//
// # Where
//
// Per topic of the request, from the Table: the destination (COMPLETE);
// the source (PROXY, REJECT, unmanaged) while the Lease allows; nowhere
// otherwise (MIGRATING, or the source without a lease: the produce hold
// before this filter has already waited as long as it may). A topic bound
// for the source is counted in flight before its route is confirmed by a
// second lookup, so a heartbeat that reports the topic stopped counts this
// request too (the cutover's drain); the Handler MUST end that count.
//
// # In order
//
// A client keeps several produce requests in flight on a broker connection
// (Java and librdkafka 5, franz-go 5 when idempotent), and an idempotent
// producer's in-flight batches of one partition carry consecutive
// sequences. Directly, those requests all reach the broker the client took
// for leader when it sent them: when leadership moves, all of them fail
// alike and the client resends them in order. The agent resolves leaders
// per request, so a leader change between two pipelined requests would send
// the later one to the new leader while the earlier one is still at the
// old: the new leader sees a sequence gap (OUT_OF_ORDER_SEQUENCE_NUMBER,
// fatal for librdkafka at the head of the line), and a non-idempotent
// producer's later batch is written ahead of the earlier one. So, per
// client connection:
//
//   - While a partition has requests outstanding, the next one goes where
//     they went (Part.Via: the same broker, over the same upstream
//     connection), and the old leader turns it away as it would have
//     directly. If that upstream connection died, the outstanding requests
//     are in doubt and the next one is refused, unsent, until they are
//     answered: sent on a fresh connection it would overtake their resend.
//   - Once the connection was answered a retriable error for an idempotent
//     batch (or the batch was refused unsent), that producer session's
//     later batches for the partition, sent before the client read the
//     answer, are refused NOT_LEADER_OR_FOLLOWER without forwarding until
//     the failed one is resent (a gap): directly they would have met the
//     old leader too, while the new leader, or the destination at the
//     instant of COMPLETE, would take them ahead of the failed one.
//
// Outstanding requests and gaps are checked, and updated, under one lock:
// a request either sees an earlier one still outstanding (and follows it)
// or sees its answer (and the gap it opened). What the Handler decided at
// dispatch (where it sent each part, what it refused unsent) is folded in
// when the connection's next produce arrives, or on the response side if
// that comes first.
//
// Filters after this one MUST NOT hold or stop a produce: its in-flight
// count is the Handler's to end.
package route

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/internal/recordbatch"
)

// Sentinel errors.
var (
	// ErrBadConfig refuses a Config, naming the field at fault.
	ErrBadConfig = errors.New("route: bad config")
)

// Retriable is the code of a part refused unsent: every client of the
// matrix retries NOT_LEADER_OR_FOLLOWER as "not persisted", refreshing its
// metadata first.
var Retriable = kerr.NotLeaderForPartition.Code

// Table says where a topic's writes go now.
type Table interface {
	// Target returns filter.Source, filter.Destination, or filter.Nowhere
	// (MIGRATING). It MUST be safe for concurrent use.
	Target(topic string) filter.Cluster
}

// Lease says whether the agent may write topic to the source now. It
// MUST be safe for concurrent use.
type Lease interface {
	MayWrite(topic string) bool
}

// Counter counts produce requests in flight to the source, per topic.
type Counter interface {
	Add(topic string, delta int)
}

// Config configures the filter.
type Config struct {
	// Table is required.
	Table Table
	// Lease, if set, gates writes to the source; nil: always valid
	// (static routes, no control plane).
	Lease Lease
	// InFlight, if set, counts each topic bound for the source once per
	// request; the Handler MUST end the count (see the package doc).
	InFlight Counter
	// Gated, if set, says which produce requests the filter routes; the
	// others go on unrouted (the agent leaves out versions it never
	// advertised, which its Handler refuses by closing the connection).
	Gated func(x *filter.Exchange) bool
}

// Factory builds the filter per connection.
type Factory struct{ cfg Config }

var (
	_ filter.Factory        = (*Factory)(nil)
	_ filter.RequestFilter  = (*conn)(nil)
	_ filter.ResponseFilter = (*conn)(nil)
)

// New returns the filter's factory.
func New(cfg Config) (*Factory, error) {
	if cfg.Table == nil {
		return nil, fmt.Errorf("%w: Table is required", ErrBadConfig)
	}
	return &Factory{cfg: cfg}, nil
}

// Name implements filter.Factory.
func (*Factory) Name() string { return "route" }

// New implements filter.Factory.
func (f *Factory) New(filter.ConnInfo) any { return &conn{cfg: &f.cfg} }

// key is one partition.
type key struct {
	topic     string
	partition int32
}

// pin is where a connection's outstanding requests for one partition went.
type pin struct {
	via filter.Via
	n   int // parts outstanding there
}

// gap is the first batch of a producer session the connection was told
// failed with a retriable error, and has not resent yet.
type gap struct {
	pid   int64
	epoch int16
	seq   int32
}

// conn is the filter of one client connection. Its request and response
// sides share the pins and gaps, under mu.
type conn struct {
	cfg *Config

	mu   sync.Mutex
	pins map[key]*pin
	gaps map[key]gap
	// last is the connection's latest routed produce until its dispatch
	// decisions are folded in (fold).
	last *filter.Exchange
	// held are the pins each folded produce holds, until its response
	// side: in request order, which is the order responses run in, so
	// the oldest is the next to end.
	held []heldPins
}

// heldPins are one produce's pins.
type heldPins struct {
	x    *filter.Exchange
	pins []pinned
}

type pinned struct {
	k  key
	pn *pin
}

// OnRequest implements filter.RequestFilter.
func (c *conn) OnRequest(_ context.Context, x *filter.Exchange) filter.Status {
	parts := x.Parts()
	if parts == nil || (c.cfg.Gated != nil && !c.cfg.Gated(x)) {
		return filter.Continue
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last != nil {
		c.fold(c.last)
	}
	c.last = x
	c.refuseAfterGaps(parts)
	c.route(parts)
	c.follow(parts)
	return filter.Continue
}

// refuseAfterGaps answers the batches that follow a gap; a batch at or
// before the gap (the resend), or of another producer session, closes it.
func (c *conn) refuseAfterGaps(parts []filter.Part) {
	if len(c.gaps) == 0 {
		return
	}
	for i := range parts {
		p := &parts[i]
		k := key{p.Topic, p.Partition}
		g, ok := c.gaps[k]
		if !ok || p.Answered {
			continue
		}
		b, idem := batchSeq(p.Records)
		if idem && b.pid == g.pid && b.epoch == g.epoch && seqAfter(b.seq, g.seq) {
			p.Answer(Retriable)
			continue
		}
		delete(c.gaps, k)
	}
}

// route sets each unanswered part's cluster, one lookup per topic. What
// an earlier filter planned for To or Via is not trusted, and an answered
// part goes nowhere: only this filter counts a topic in flight, and the
// Handler ends a count for every topic with a part bound for the source.
func (c *conn) route(parts []filter.Part) {
	type routed struct {
		topic string
		to    filter.Cluster
	}
	var buf [4]routed
	seen := buf[:0]
	for i := range parts {
		p := &parts[i]
		p.To, p.Via = filter.Nowhere, nil
		if p.Answered {
			continue
		}
		found := false
		for _, r := range seen {
			if r.topic == p.Topic {
				p.To, found = r.to, true
				break
			}
		}
		if !found {
			p.To = c.target(p.Topic)
			seen = append(seen, routed{p.Topic, p.To})
		}
		if p.To == filter.Nowhere {
			p.Answer(Retriable)
		}
	}
}

// target is where topic's writes go now. A source-bound answer comes
// counted in flight: counted before a confirming lookup, so a route change
// the count missed is one this lookup sees.
func (c *conn) target(topic string) filter.Cluster {
	switch c.cfg.Table.Target(topic) {
	case filter.Destination:
		return filter.Destination
	case filter.Source:
		if c.cfg.Lease != nil && !c.cfg.Lease.MayWrite(topic) {
			return filter.Nowhere
		}
		if c.cfg.InFlight == nil {
			return filter.Source
		}
		c.cfg.InFlight.Add(topic, 1)
		to := c.cfg.Table.Target(topic)
		if to != filter.Source {
			c.cfg.InFlight.Add(topic, -1)
		}
		return to
	}
	return filter.Nowhere
}

// follow sends each routed part where the connection's outstanding
// requests for its partition went, or refuses it when their upstream
// connection died. A pin on the other cluster (the topic moved) is not
// followed.
func (c *conn) follow(parts []filter.Part) {
	if len(c.pins) == 0 {
		return
	}
	for i := range parts {
		p := &parts[i]
		if p.Answered {
			continue
		}
		pn := c.pins[key{p.Topic, p.Partition}]
		if pn == nil || pn.via.Cluster() != p.To {
			continue
		}
		if pn.via.Dead() {
			p.Answer(Retriable)
			continue
		}
		p.Via = pn.via
	}
}

// fold takes in what the Handler decided at dispatch for x: a gap at each
// idempotent batch it refused unsent, and a pin where it sent each part.
// Called with mu held, once per produce.
func (c *conn) fold(x *filter.Exchange) {
	c.last = nil
	parts := x.Parts()
	var held []pinned
	for i := range parts {
		p := &parts[i]
		k := key{p.Topic, p.Partition}
		switch {
		case p.Answered:
			c.noteOutcome(k, p.Records, p.Code, false)
		case p.Via != nil:
			pn := c.pins[k]
			if pn == nil || pn.via != p.Via {
				// None was outstanding, or the part went elsewhere (the
				// topic moved clusters, or the old connection was
				// refused): a new pin.
				pn = &pin{via: p.Via}
				if c.pins == nil {
					c.pins = map[key]*pin{}
				}
				c.pins[k] = pn
			}
			pn.n++
			if held == nil {
				held = make([]pinned, 0, len(parts)-i)
			}
			held = append(held, pinned{k, pn})
		}
	}
	if held != nil {
		c.held = append(c.held, heldPins{x, held})
	}
}

// OnResponse implements filter.ResponseFilter: the answer's gaps, then the
// request's pins end, under one lock, so the connection's next request sees
// either the request outstanding or its gaps.
func (c *conn) OnResponse(_ context.Context, x *filter.Exchange) filter.Status {
	parts := x.Parts()
	if parts == nil {
		return filter.Continue
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == x {
		c.fold(x)
	}
	if resp, ok := x.Resp.(*kmsg.ProduceResponse); ok && x.Err == nil {
		i := 0
		for _, t := range resp.Topics {
			for _, rp := range t.Partitions {
				if i < len(parts) {
					c.noteOutcome(key{parts[i].Topic, parts[i].Partition}, parts[i].Records, rp.ErrorCode, true)
				}
				i++
			}
		}
	}
	for i, h := range c.held {
		if h.x != x {
			continue // not the oldest only if an exchange folded earlier never ran its response side
		}
		for _, p := range h.pins {
			p.pn.n--
			if p.pn.n == 0 && c.pins[p.k] == p.pn {
				delete(c.pins, p.k)
			}
		}
		c.held[i] = heldPins{}
		c.held = append(c.held[:i], c.held[i+1:]...)
		break
	}
	return filter.Continue
}

// noteOutcome records what one idempotent batch's outcome says about its
// partition's gap: a retriable code opens a gap at the batch, unless an
// earlier batch of the same session has one. Not only NOT_LEADER_OR_FOLLOWER:
// a batch the source refused with NOT_ENOUGH_REPLICAS while a later one is
// held through MIGRATING would otherwise let the later one open the
// destination's stream ahead of it.
//
// With answered (a broker's answer, not a refusal at dispatch), a success
// of a later batch of the gap's session closes the gap: the broker takes an
// idempotent session's batches only in sequence order, so it holds the
// failed batch too (written, its answer late), and the client knows it.
// librdkafka then reports the failed batch's messages delivered
// ("implicitly acked", offset unknown) and never resends them: a gap left
// open would refuse every later batch of the session until its message
// timeout.
func (c *conn) noteOutcome(k key, records []byte, code int16, answered bool) {
	if code == 0 && (!answered || len(c.gaps) == 0) {
		return
	}
	if code != 0 && !kerr.IsRetriable(kerr.ErrorForCode(code)) {
		return
	}
	b, ok := batchSeq(records)
	if !ok {
		return
	}
	g, had := c.gaps[k]
	sameSession := had && g.pid == b.pid && g.epoch == b.epoch
	switch {
	case code == 0:
		if sameSession && seqAfter(b.seq, g.seq) {
			delete(c.gaps, k)
		}
	case !sameSession || seqAfter(g.seq, b.seq):
		if c.gaps == nil {
			c.gaps = map[key]gap{}
		}
		c.gaps[k] = b
	}
}

// batchSeq returns the producer session and base sequence of the first
// record batch in recs; ok is false for a batch without a producer id.
func batchSeq(recs []byte) (g gap, ok bool) {
	p, ok := recordbatch.ReadProducer(recs)
	if !ok {
		return gap{}, false
	}
	g = gap{pid: p.ID, epoch: p.Epoch, seq: p.BaseSeq}
	return g, g.pid >= 0
}

// seqAfter reports whether producer sequence a comes after b. Kafka's
// sequences run from 0 to math.MaxInt32 and wrap to 0, so a batch just
// past the wrap comes after one just before it; a and b are taken to be
// less than 2^30 apart (a client has at most a few batches in flight).
func seqAfter(a, b int32) bool {
	d := (int64(a) - int64(b)) & math.MaxInt32
	return d != 0 && d < 1<<30
}
