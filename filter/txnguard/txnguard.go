// Package txnguard owns what the agent does with a transactional write
// whose topic is not on the source (docs/design.md §9, "Transactional
// producers"): a transaction lives on the source's transaction coordinator
// (InitProducerId, AddPartitionsToTxn, EndTxn all go there), so its data
// must too. A transaction is either entirely on the source or refused,
// never split across the clusters.
//
//   - A transactional produce (one with a transactional id, or a batch
//     with the transactional bit) whose partition routes to the
//     destination (COMPLETE) is answered TOPIC_AUTHORIZATION_FAILED for
//     that partition, unsent. Its other partitions go on as routed.
//   - AddPartitionsToTxn (v0 to v3, the client's versions) naming a
//     COMPLETE topic is answered without being forwarded: the COMPLETE
//     partitions TOPIC_AUTHORIZATION_FAILED and the others
//     OPERATION_NOT_ATTEMPTED, as Kafka answers a request it refuses in
//     part. One naming a MIGRATING topic (and none COMPLETE) is answered
//     CONCURRENT_TRANSACTIONS for the MIGRATING partitions (the others
//     OPERATION_NOT_ATTEMPTED): clients retry it, and by then the
//     cutover has ended, one way or the other. So no transaction adds a
//     partition on the source while its cutover runs, and none writes a
//     marker there after COMPLETE.
//
// TOPIC_AUTHORIZATION_FAILED because it is not retriable: the client
// fails the transaction (an abortable error in Java, librdkafka and
// franz-go) and shows it, where a retriable code would retry silently
// until a timeout. The first refusal of each transactional id is said at
// WARN with what to do (Config.Log).
//
// The filter comes after filter/route in the chain, which has decided each
// produce partition's cluster by then; it answers only parts routed to the
// destination, which route does not count in flight, so it never ends a
// count the Handler owns.
package txnguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/internal/recordbatch"
)

// Sentinel errors. Every message starts with "txnguard: ".
var (
	// ErrBadConfig refuses a Config, naming the field at fault.
	ErrBadConfig = errors.New("txnguard: bad config")
)

// Codes the filter answers with.
var (
	// Refused is the code of a transactional write to a COMPLETE topic.
	Refused = kerr.TopicAuthorizationFailed.Code
	// Later is the code of AddPartitionsToTxn for a MIGRATING topic:
	// retriable, as while a transaction of the same id completes.
	Later = kerr.ConcurrentTransactions.Code
	// NotAttempted is the code of the partitions of a request refused in
	// part that were not refused themselves.
	NotAttempted = kerr.OperationNotAttempted.Code
)

// Table says where a topic's writes go now.
type Table interface {
	// Target returns filter.Source, filter.Destination (COMPLETE) or
	// filter.Nowhere (MIGRATING). It MUST be safe for concurrent use.
	Target(topic string) filter.Cluster
}

// DefaultRemember is how many transactional ids the filter remembers
// having warned about (Config.Remember).
const DefaultRemember = 10000

// Config configures the filter.
type Config struct {
	// Table is required.
	Table Table
	// Log gets one WARN per transactional id refused (default:
	// discarded).
	Log *slog.Logger
	// Remember bounds the transactional ids warned about that are
	// remembered, oldest forgotten first (default DefaultRemember): one
	// forgotten and refused again is warned about again.
	Remember int
	// Refused, if set, is called once per topic of each request refused
	// in part or whole.
	Refused func(topic string)
	// Gated, if set, says which requests the filter looks at; the others
	// go on (the agent leaves out versions it never advertised, which its
	// Handler refuses).
	Gated func(x *filter.Exchange) bool
}

// Factory builds the filter per connection and keeps, agent-wide, the
// transactional ids already warned about.
type Factory struct {
	cfg Config

	mu     sync.Mutex
	warned map[string]struct{}
	order  []string // warned, oldest first: a ring of cfg.Remember
	next   int
}

var (
	_ filter.Factory       = (*Factory)(nil)
	_ filter.RequestFilter = (*conn)(nil)
)

// New returns the filter's factory.
func New(cfg Config) (*Factory, error) {
	switch {
	case cfg.Table == nil:
		return nil, fmt.Errorf("%w: Table is required", ErrBadConfig)
	case cfg.Remember < 0:
		return nil, fmt.Errorf("%w: Remember %d is negative", ErrBadConfig, cfg.Remember)
	}
	if cfg.Remember == 0 {
		cfg.Remember = DefaultRemember
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Factory{cfg: cfg, warned: map[string]struct{}{}}, nil
}

// Name implements filter.Factory.
func (*Factory) Name() string { return "txnguard" }

// New implements filter.Factory.
func (f *Factory) New(filter.ConnInfo) any { return &conn{f: f} }

type conn struct{ f *Factory }

// OnRequest implements filter.RequestFilter.
func (c *conn) OnRequest(_ context.Context, x *filter.Exchange) filter.Status {
	if c.f.cfg.Gated != nil && !c.f.cfg.Gated(x) {
		return filter.Continue
	}
	switch req := x.Req.(type) {
	case *kmsg.ProduceRequest:
		c.produce(x, req)
	case *kmsg.AddPartitionsToTxnRequest:
		if req.Version <= 3 { // v4+ is broker to broker, never advertised
			return c.addPartitions(x, req)
		}
	}
	return filter.Continue
}

// produce answers the transactional parts routed to the destination.
func (c *conn) produce(x *filter.Exchange, req *kmsg.ProduceRequest) {
	txnID := ""
	if req.TransactionID != nil {
		txnID = *req.TransactionID
	}
	parts := x.Parts()
	var refused []string
	for i := range parts {
		p := &parts[i]
		if p.Answered || p.To != filter.Destination || (txnID == "" && !recordbatch.Transactional(p.Records)) {
			continue
		}
		p.Answer(Refused)
		if !slices.Contains(refused, p.Topic) {
			refused = append(refused, p.Topic)
		}
	}
	if len(refused) > 0 {
		c.f.refused(txnID, clientID(x), "Produce", refused)
	}
}

// addPartitions answers an AddPartitionsToTxn naming a COMPLETE or a
// MIGRATING topic; the others go on to the source's coordinator.
func (c *conn) addPartitions(x *filter.Exchange, req *kmsg.AddPartitionsToTxnRequest) filter.Status {
	var complete, migrating []string
	for _, t := range req.Topics {
		switch c.f.cfg.Table.Target(t.Topic) {
		case filter.Destination:
			complete = append(complete, t.Topic)
		case filter.Nowhere:
			migrating = append(migrating, t.Topic)
		}
	}
	if len(complete) == 0 && len(migrating) == 0 {
		return filter.Continue
	}
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	for _, t := range req.Topics {
		code := NotAttempted
		switch {
		case slices.Contains(complete, t.Topic):
			code = Refused
		case len(complete) == 0 && slices.Contains(migrating, t.Topic):
			code = Later
		}
		rt := kmsg.NewAddPartitionsToTxnResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	x.Resp = resp
	if len(complete) > 0 {
		c.f.refused(req.TransactionalID, clientID(x), "AddPartitionsToTxn", complete)
	}
	return filter.StopIteration
}

func clientID(x *filter.Exchange) string {
	if x.Header.ClientID != nil {
		return *x.Header.ClientID
	}
	return ""
}

// refused counts a refusal and says it at WARN the first time for txnID.
func (f *Factory) refused(txnID, client, api string, topics []string) {
	if f.cfg.Refused != nil {
		for _, t := range topics {
			f.cfg.Refused(t)
		}
	}
	if !f.firstTime(txnID) {
		return
	}
	f.cfg.Log.Warn("refused a transactional producer's write to a COMPLETE topic with TOPIC_AUTHORIZATION_FAILED: "+
		"its transactions live on the source's transaction coordinator and cannot span the clusters; "+
		"restart the producer with bootstrap.servers set to the destination's brokers (it then gets its producer id "+
		"there), or keep the topic on the source (its transactions go on through the agent while the topic is in PROXY)",
		"transactional_id", txnID, "topics", topics, "client_id", client, "request", api)
}

// firstTime reports whether txnID was not warned about yet (among the
// last Remember), and remembers it.
func (f *Factory) firstTime(txnID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.warned[txnID]; ok {
		return false
	}
	if len(f.order) < f.cfg.Remember {
		f.order = append(f.order, txnID)
	} else {
		delete(f.warned, f.order[f.next])
		f.order[f.next] = txnID
		f.next = (f.next + 1) % len(f.order)
	}
	f.warned[txnID] = struct{}{}
	return true
}
