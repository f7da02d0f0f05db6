package controlplane

import (
	"context"

	"github.com/baton-kafka/baton/controlplane/acl"
)

// WriteGuard keeps writers other than the replicator off D.T until COMPLETE
// (docs/design.md §11). Its implementation on Kafka ACLs is acl.Guard.
type WriteGuard interface {
	// Protect denies writes to topic on the destination except the
	// replicator's. Idempotent.
	Protect(ctx context.Context, topic string) error
	// Lift allows producers to write topic on the destination.
	Lift(ctx context.Context, topic string) error
}

// NoGuard is the WriteGuard that guards nothing: for a destination
// without an authorizer, one whose every client (the replicator too) is
// User:ANONYMOUS, or a guard turned off. The agents (which never route a
// topic to D before COMPLETE) are then the only guard: a producer that
// bypasses them can write D.T early, and the replicator then reports
// ErrDestinationDiverged. The control plane says so at start, at WARN,
// with Why and Remedy.
type NoGuard struct {
	// Why there is no guard (default: "the destination has no
	// authorizer, or the guard is off (--write-guard=none)").
	Why string
	// Remedy is what would give one (default: enable an authorizer on
	// the destination, with SASL for the replicator).
	Remedy string
}

var (
	_ WriteGuard = NoGuard{}
	_ WriteGuard = (*acl.Guard)(nil)
)

// Protect implements WriteGuard.
func (NoGuard) Protect(context.Context, string) error { return nil }

// Lift implements WriteGuard.
func (NoGuard) Lift(context.Context, string) error { return nil }

// warning is what the control plane logs at start without a guard: why,
// what it means, and what to do.
func (g NoGuard) warning() string {
	why, remedy := g.Why, g.Remedy
	if why == "" {
		why = "the destination has no authorizer, or the guard is off (--write-guard=none)"
	}
	if remedy == "" {
		remedy = "Enable an authorizer on the destination (with SASL for the replicator) to have Baton deny such writes"
	}
	return "the destination write guard protects nothing: " + why + ". Only the agents keep producers off a topic on " +
		"the destination before its cutover; a client writing the destination directly diverges it, and its cutover is " +
		"then refused. " + remedy
}
