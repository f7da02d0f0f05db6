// Package leasegate owns the lease gate: a request filter that holds a
// write bound for the source cluster while the agent holds no lease from
// the control plane, lets it on once the agent holds one, and refuses it
// when no lease came within HoldMax of its arrival. Without a lease the
// control plane may have moved a topic on without this agent, so the
// source must not see its writes (the one-writer rule).
//
// The gate holds with the filter package's Waker: a held request holds the
// requests behind it on its connection, and nothing the client sent later
// reaches the source before it. It gates the writes SourceWrite names;
// produce is not one of them: whether a produce needs the lease depends on
// its topics' routes, so the produce hold (filter/hold) waits for it.
package leasegate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/migration"
)

// Sentinel errors.
var (
	// ErrNoLease refuses a write to the source that waited HoldMax for a
	// lease and got none.
	ErrNoLease = errors.New("leasegate: no lease from the control plane")
	// ErrBadConfig refuses a Config, naming the field at fault.
	ErrBadConfig = errors.New("leasegate: bad config")
)

// Lease is the agent's lease, as the gate asks about it.
type Lease interface {
	// Valid reports whether the agent may write to the source now.
	Valid() bool
	// Renewed returns a channel that MUST be closed (or receive) when
	// Valid may have turned true; a nil channel if it never does. The gate
	// takes it before asking Valid, so a renewal between the two still
	// wakes it.
	Renewed() <-chan struct{}
}

// Config configures the gate.
type Config struct {
	// Lease is required.
	Lease Lease
	// HoldMax bounds a write's wait, from its Exchange.Received;
	// zero means migration.DefaultHoldMax.
	HoldMax time.Duration
	// Gated says which requests need the lease; nil means SourceWrite.
	Gated func(x *filter.Exchange) bool
	// Refuse answers a write that waited HoldMax in vain: it MUST set
	// x.Resp (a retriable Kafka error the client knows) or x.Err (close
	// the connection). err wraps ErrNoLease. Nil sets x.Err = err.
	Refuse func(x *filter.Exchange, err error)
	// Held, if set, counts held requests.
	Held filter.Gauge
}

// Factory builds a gate per connection.
type Factory struct{ cfg Config }

var (
	_ filter.Factory       = (*Factory)(nil)
	_ filter.RequestFilter = (*gate)(nil)
)

// New returns the gate's factory.
func New(cfg Config) (*Factory, error) {
	if cfg.Lease == nil {
		return nil, fmt.Errorf("%w: Lease is required", ErrBadConfig)
	}
	if cfg.HoldMax <= 0 {
		cfg.HoldMax = migration.DefaultHoldMax
	}
	if cfg.Gated == nil {
		cfg.Gated = SourceWrite
	}
	if cfg.Refuse == nil {
		cfg.Refuse = func(x *filter.Exchange, err error) { x.Err = err }
	}
	return &Factory{cfg: cfg}, nil
}

// Name implements filter.Factory.
func (*Factory) Name() string { return "leasegate" }

// New implements filter.Factory.
func (f *Factory) New(filter.ConnInfo) any { return &gate{cfg: &f.cfg} }

type gate struct{ cfg *Config }

// OnRequest lets x on while the lease is valid or x needs none, holds it
// until the lease is renewed or its HoldMax passes, and refuses it then.
// Woken, it decides again: a lease renewed just too late still lets x on.
func (g *gate) OnRequest(_ context.Context, x *filter.Exchange) filter.Status {
	if !g.cfg.Gated(x) {
		return filter.Continue
	}
	renewed := g.cfg.Lease.Renewed()
	if g.cfg.Lease.Valid() {
		return filter.Continue
	}
	if x.Received.IsZero() {
		// The hold is counted from arrival; one not stamped arrives now.
		x.Received = time.Now()
	}
	deadline := x.Received.Add(g.cfg.HoldMax)
	if !time.Now().Before(deadline) {
		g.cfg.Refuse(x, fmt.Errorf("%w: %s waited %v", ErrNoLease, kmsg.NameForKey(x.Header.APIKey), g.cfg.HoldMax))
		return filter.StopIteration
	}
	w := x.Hold()
	w.WakeAt(deadline)
	w.WakeOn(renewed)
	if g.cfg.Held != nil {
		g.cfg.Held.Inc()
		w.OnDone(g.cfg.Held.Dec)
	}
	return filter.Hold
}

// SourceWrite says whether x changes state on the cluster it is sent to,
// other than produce: such a request goes to the source only under a
// lease. Reads (Fetch, ListOffsets, Metadata, Describe*, group membership)
// need none: they cannot break the one-writer rule. An idempotent
// producer's InitProducerId writes nothing and needs none either; a
// transactional one fences and aborts, and does. A request the agent did
// not decode (x.Req nil) is the router's to refuse.
func SourceWrite(x *filter.Exchange) bool {
	if x.Req == nil {
		return false
	}
	switch x.Header.APIKey {
	case 22: // InitProducerId
		ip, ok := x.Req.(*kmsg.InitProducerIDRequest)
		return ok && ip.TransactionalID != nil
	case 8, // OffsetCommit
		19, // CreateTopics
		20, // DeleteTopics
		21, // DeleteRecords
		24, // AddPartitionsToTxn
		25, // AddOffsetsToTxn
		26, // EndTxn: writes transaction markers
		28, // TxnOffsetCommit
		30, // CreateAcls
		31, // DeleteAcls
		33, // AlterConfigs
		34, // AlterReplicaLogDirs
		37, // CreatePartitions
		42, // DeleteGroups
		43, // ElectLeaders
		44, // IncrementalAlterConfigs
		45, // AlterPartitionReassignments
		47, // OffsetDelete
		49, // AlterClientQuotas
		51, // AlterUserScramCredentials
		57: // UpdateFeatures
		return true
	}
	return false
}
