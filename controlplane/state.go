// Package controlplane owns Baton's control plane: the per-topic state
// machine (docs/design.md §3), the cutover orchestrator (§6), the
// Lease service agents heartbeat to. It keeps topic states, versions,
// agents' lease grants and the audit event log across restarts in a Store
// (package controlplane/store's: on etcd, or in memory for tests). It drives the replicator through the small Replication
// interface (its drivers are package controlplane/replication's), the
// destination write guard through WriteGuard and the source fence through
// SourceFence (their implementations on Kafka ACLs are package
// controlplane/acl's); it pushes routes to agents through an xds.Server.
// The HTTP API the `baton` CLI speaks is package httpapi, which imports
// this one. Replicas on one etcd (leader election, followers, the
// process's lifecycle) are package replicas, which imports this one too:
// a leader learns the leases followers grant through Records and
// MergeRecords.
//
// Safety rules it keeps:
//
//   - A lease is only granted to an agent that applied the current config
//     version, so an agent that lost contact comes back blocking what must
//     be blocked.
//   - A cutover waits for every agent that may still forward: each has
//     either reported the MIGRATING version with the topic stopped and zero
//     in flight, or stayed silent past its last lease grant + lease +
//     forward deadline.
//   - Every wait of a cutover shares one deadline (start + cutover
//     timeout); missing it rolls the topic back to PROXY. COMPLETE is
//     written only after replication of the topic stopped at the source's
//     end offsets, and is one-way.
//   - A control plane that stops mid-cutover leaves the topic MIGRATING in
//     etcd. The next start (or the replica elected after it) stores
//     COMPLETE when every step but that one was done (stored step
//     StepDone) and the attempt's deadline has not passed; any other it
//     rolls back to PROXY (restarting replication). Both before serving
//     anything.
//   - A rollback never waits for the destination: PROXY is written first
//     and the write guard restored in the background, with retries; a
//     cutover is refused until it is back.
package controlplane

import (
	"errors"
	"fmt"
	"strings"

	"github.com/baton-kafka/baton/controlplane/store"
	"github.com/baton-kafka/baton/controlplane/txngate"
	"github.com/baton-kafka/baton/migration"
)

// Errors. Wrapped errors name the rule or the topic.
var (
	// ErrBadConfig is returned for options or requests out of range.
	ErrBadConfig = errors.New("controlplane: bad config")
	// ErrUnknownTopic: the topic is not managed.
	ErrUnknownTopic = errors.New("controlplane: unknown topic")
	// ErrTopicExists: add of a topic already managed.
	ErrTopicExists = errors.New("controlplane: topic already managed")
	// ErrIllegalTransition: the state machine refuses the transition; the
	// message names the rule.
	ErrIllegalTransition = errors.New("controlplane: illegal transition")
	// ErrCutoverRunning: a second migrate while one runs, or a change of
	// state (REJECT, PROXY, a removal) of a topic mid-cutover.
	ErrCutoverRunning = errors.New("controlplane: a cutover is already running for the topic")
	// ErrNeedsForce: a removal that would send a COMPLETE topic's producers
	// back to the source, asked without force; the message says why.
	ErrNeedsForce = errors.New("controlplane: refused without force")
	// ErrGateRefused: Migrate refused to start a cutover. Either cutover
	// gates refused (any of Gates; force passes them), or a refusal that
	// guards correctness, which nothing forces past: a diverged
	// destination, a write guard still being restored, the last cutover's
	// source fence still being lifted, or a source fence the topic's
	// routes promised that this control plane cannot put up. The message
	// names each refusal and why.
	ErrGateRefused = errors.New("controlplane: cutover gate refused")
	// ErrClosed: the control plane is shutting down.
	ErrClosed = errors.New("controlplane: closed")
	// ErrStoreUnavailable: a MemStore set unavailable refused a write.
	ErrStoreUnavailable = store.ErrStoreUnavailable
	// ErrDataDirLocked: another process runs an embedded etcd on the
	// data directory; the message names it.
	ErrDataDirLocked = store.ErrDataDirLocked
	// ErrNoSourceFence: a topic's routes told agents its source is fenced
	// at the cutover, and this control plane runs without a source fence.
	ErrNoSourceFence = errors.New("controlplane: no source fence")
	// ErrNotLeader: this control plane's leader term ended (another
	// replica was elected): it wrote nothing and must stop.
	ErrNotLeader = store.ErrNotLeader
	// ErrVersionMoved: a follower's lease grant was not recorded, because
	// the config version changed since the follower read it; the agent
	// must apply the new routes first.
	ErrVersionMoved = store.ErrVersionMoved
	// ErrDecided: a cutover attempt's COMPLETE or rollback committed
	// already; the write that got it wrote nothing.
	ErrDecided = store.ErrDecided
	// ErrTransactions: the source's transactional producers of a topic
	// could not be read (DescribeProducers, ListTransactions,
	// DescribeTransactions); the message says which and why. It is
	// txngate.ErrRead.
	ErrTransactions = txngate.ErrRead
)

// Rule is one named rule of the state machine.
type Rule struct {
	Name string
	Why  string
}

// The rules Transition refuses by.
var (
	RuleCompleteOneWay     = Rule{"complete-is-one-way", "COMPLETE is one-way: the destination took writes the source never saw"}
	RuleMigrateFromProxy   = Rule{"migrate-from-proxy-only", "a cutover starts from PROXY only: agents must be proxying the topic under lease first"}
	RuleCompleteByCutover  = Rule{"complete-by-cutover-only", "COMPLETE is reached only through a cutover, from MIGRATING"}
	RuleMigratingExits     = Rule{"migrating-exits-to-complete-or-proxy", "MIGRATING ends in COMPLETE or rolls back to PROXY; abort first"}
	RuleAddAsRejectOrProxy = Rule{"add-as-reject-or-proxy", "a topic is added in REJECT or PROXY"}
	RuleNoSelfTransition   = Rule{"no-self-transition", "the topic is already in that state"}
)

// Transition checks one state change; migration.Unmanaged as from means "not managed
// yet" (an add), as to a removal. It returns nil or an error wrapping
// ErrIllegalTransition that names the rule and what from allows.
func Transition(from, to migration.State) error {
	r, ok := refusal(from, to)
	if !ok {
		return fmt.Errorf("%w: %s -> %s: unknown state", ErrIllegalTransition, from, to)
	}
	if r == nil {
		return nil
	}
	return fmt.Errorf("%w: %s -> %s: rule %q: %s; %s", ErrIllegalTransition, from, to, r.Name, r.Why, allowedText(from))
}

// Allowed lists the states from may change to (migration.Unmanaged: a
// removal), in the order of the states.
func Allowed(from migration.State) []migration.State {
	var out []migration.State
	for _, to := range []migration.State{migration.Reject, migration.Proxy, migration.Migrating, migration.Complete, migration.Unmanaged} {
		if r, ok := refusal(from, to); ok && r == nil {
			out = append(out, to)
		}
	}
	return out
}

// allowedText says what Allowed(from) holds, for a refusal.
func allowedText(from migration.State) string {
	what := "from " + from.String()
	if from == migration.Unmanaged {
		what = "a topic not managed"
	}
	var names []string
	for _, to := range Allowed(from) {
		if to == migration.Unmanaged {
			names = append(names, "removed")
		} else {
			names = append(names, to.String())
		}
	}
	if len(names) == 0 {
		return what + " nothing is allowed"
	}
	return what + " the state machine allows: " + strings.Join(names, ", ")
}

// refusal is the rule refusing from -> to (nil: allowed); false for a
// state it does not know.
func refusal(from, to migration.State) (*Rule, bool) {
	if from == to {
		return &RuleNoSelfTransition, true
	}
	switch from {
	case migration.Unmanaged:
		if to == migration.Reject || to == migration.Proxy {
			return nil, true
		}
		return &RuleAddAsRejectOrProxy, true
	case migration.Reject:
		switch to {
		case migration.Proxy, migration.Unmanaged:
			return nil, true
		case migration.Migrating:
			return &RuleMigrateFromProxy, true
		case migration.Complete:
			return &RuleCompleteByCutover, true
		}
	case migration.Proxy:
		switch to {
		case migration.Reject, migration.Migrating, migration.Unmanaged:
			return nil, true
		case migration.Complete:
			return &RuleCompleteByCutover, true
		}
	case migration.Migrating:
		switch to {
		case migration.Complete, migration.Proxy:
			return nil, true
		default:
			return &RuleMigratingExits, true
		}
	case migration.Complete:
		if to == migration.Unmanaged {
			return nil, true
		}
		return &RuleCompleteOneWay, true
	}
	return nil, false
}
