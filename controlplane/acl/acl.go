// Package acl owns the two protections Baton builds from Kafka ACLs: the
// destination write guard (Guard: only the replicator writes a topic on
// the destination until its cutover, docs/design.md §11) and the source
// fence (Fence: no producer writes a topic on the source from its cutover
// on, §6.1). Both record every ACL they create in a Ledger before
// creating it, and create, describe and delete their ACLs through one
// path, so that a Lift deletes exactly what they created and an
// operator's own ACLs survive it.
//
// Keeper is the control plane's side of them: it restores the guard of
// REJECT and PROXY topics in the background with retries (lifting a
// rolled-back cutover's fence on the way), serializes those Protects with
// the cutover's Lift, and says what a topic's routes promise of the fence.
// It keeps its state under its own locks.
//
// This package does not import the control plane. The control plane
// drives Guard and Fence through interfaces it declares (WriteGuard,
// SourceFence), which meet the ones the keeper drives them through
// (Protector, Lifter); the keeper reads and changes the control plane
// through View and Recorder, which the control plane meets with a small
// adapter.
package acl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Errors. Wrapped errors name the topic and the step that failed.
var (
	// ErrGuard: the destination write guard cannot be set up as asked.
	ErrGuard = errors.New("acl: destination write guard")
	// ErrGuardPrincipal: the replicator's principal cannot be told from
	// producers (User:ANONYMOUS); the write guard refuses to run.
	ErrGuardPrincipal = errors.New("acl: destination write guard: unusable replicator principal")
	// ErrFence: the source fence could not be put up, checked or lifted;
	// the message says which and why.
	ErrFence = errors.New("acl: source fence")
)

// Owned is one ACL the guard or the fence created: on the literal
// resource Topic:T, operation WRITE, any host; ALLOW for the replicator or
// DENY for a writer (the fence's: every principal, User:*).
type Owned struct {
	Principal string `json:"principal"`
	Allow     bool   `json:"allow"`
}

// Ledger stores the ACLs the guard or the fence created, by topic.
type Ledger interface {
	// GuardACLs returns what was recorded for topic (none: nil).
	GuardACLs(ctx context.Context, topic string) ([]Owned, error)
	// PutGuardACLs replaces topic's record; none removes it.
	PutGuardACLs(ctx context.Context, topic string, acls []Owned) error
}

// memLedger is a Ledger in memory: the guard's and the fence's when they
// are given none (lost on restart).
type memLedger struct {
	mu sync.Mutex
	m  map[string][]Owned
}

var _ Ledger = (*memLedger)(nil)

// GuardACLs implements Ledger.
func (l *memLedger) GuardACLs(_ context.Context, topic string) ([]Owned, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.m[topic]), nil
}

// PutGuardACLs implements Ledger.
func (l *memLedger) PutGuardACLs(_ context.Context, topic string, acls []Owned) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(acls) == 0 {
		delete(l.m, topic)
		return nil
	}
	if l.m == nil {
		l.m = map[string][]Owned{}
	}
	l.m[topic] = slices.Clone(acls)
	return nil
}

// builder is a's ACL on the literal resource Topic:topic: WRITE from any
// host ("*"), ALLOW or DENY for a's principal. The guard and the fence
// create, describe and delete their ACLs through it, so what Lift deletes
// is exactly what Protect or Fence created: a host-specific ACL of the
// same principal is an operator's and is left alone.
func (a Owned) builder(topic string) *kadm.ACLBuilder {
	b := kadm.NewACLs().Topics(topic).Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)
	if a.Allow {
		return b.Allow(a.Principal).AllowHosts("*")
	}
	return b.Deny(a.Principal).DenyHosts("*")
}

// deleteOwnedACLs deletes acls on topic, each one exactly (builder), and
// stops at the first the cluster refuses: the one delete path of the
// guard's Lift and the fence's, whose callers keep their record of acls
// until it succeeded.
func deleteOwnedACLs(ctx context.Context, adm *kadm.Client, topic string, acls []Owned) error {
	for _, a := range acls {
		res, err := adm.DeleteACLs(ctx, a.builder(topic))
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Err != nil {
				return fmt.Errorf("%v %s", r.Err, r.ErrMessage)
			}
		}
	}
	return nil
}

func createACLs(ctx context.Context, adm *kadm.Client, b *kadm.ACLBuilder) error {
	res, err := adm.CreateACLs(ctx, b)
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Err != nil {
			return fmt.Errorf("%s %v %s", r.Principal, r.Err, r.ErrMessage)
		}
	}
	return nil
}

func describeErr(res kadm.DescribeACLsResults) error {
	for _, r := range res {
		if r.Err != nil {
			return fmt.Errorf("%v %s", r.Err, r.ErrMessage)
		}
	}
	return nil
}
