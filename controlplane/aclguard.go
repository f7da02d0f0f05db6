package controlplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// ACLGuard is the WriteGuard for a destination with an authorizer: it
// keeps writers other than the replicator off D.T with Kafka ACLs.
//
// Kafka's authorizer has no "everyone except P": a DENY matching a
// principal wins over any ALLOW, so DENY User:* WRITE would lock out the
// replicator too. Protect(T) therefore works in two steps, both on the
// literal resource Topic:T:
//
//  1. ALLOW WRITE for the replicator's principal. With the authorizer's
//     default deny this lets the replicator in; with
//     allow.everyone.if.no.acl.found=true it also ends "no ACL on T, so
//     everyone may", since T now has one.
//  2. DENY WRITE for every other principal that an existing ALLOW of WRITE
//     or ALL grants T (literal T, literal "*", or a prefix of T), found
//     with DescribeACLs. An ALLOW for the wildcard principal User:* cannot
//     be narrowed this way: Protect refuses it with ErrGuard.
//
// Lift(T) deletes every DENY WRITE on literal T (any principal, any host)
// and the replicator's ALLOW WRITE on literal T: while Baton manages T the
// guard owns those ACLs, and Lift does not depend on what Protect saw, so
// it works after a restart. Superusers bypass ACLs and are not guarded.
// The admin client needs ALTER and DESCRIBE on the cluster.
type ACLGuard struct {
	Admin *kadm.Client
	// Replicator is the replicator's principal, e.g. "User:baton"
	// ("User:" is added when missing).
	Replicator string
}

var _ WriteGuard = (*ACLGuard)(nil)

func (g *ACLGuard) principal() string {
	if strings.Contains(g.Replicator, ":") {
		return g.Replicator
	}
	return "User:" + g.Replicator
}

// Protect implements WriteGuard.
func (g *ACLGuard) Protect(ctx context.Context, topic string) error {
	repl := g.principal()
	allow := kadm.NewACLs().Topics(topic).Allow(repl).Operations(kadm.OpWrite).
		ResourcePatternType(kadm.ACLPatternLiteral)
	if err := createACLs(ctx, g.Admin, allow); err != nil {
		return fmt.Errorf("%w: allowing %s to write %s: %v", ErrGuard, repl, topic, err)
	}
	writers, err := g.writers(ctx, topic)
	if err != nil {
		return fmt.Errorf("%w: listing writers of %s: %v", ErrGuard, topic, err)
	}
	var deny []string
	for _, p := range writers {
		switch {
		case p == repl:
		case p == "User:*":
			return fmt.Errorf("%w: an ALLOW ACL lets User:* write %s; a Kafka DENY cannot exempt the replicator "+
				"from a wildcard, so narrow that ACL to named principals", ErrGuard, topic)
		default:
			deny = append(deny, p)
		}
	}
	if len(deny) == 0 {
		return nil
	}
	b := kadm.NewACLs().Topics(topic).Deny(deny...).Operations(kadm.OpWrite).
		ResourcePatternType(kadm.ACLPatternLiteral)
	if err := createACLs(ctx, g.Admin, b); err != nil {
		return fmt.Errorf("%w: denying writes to %s: %v", ErrGuard, topic, err)
	}
	return nil
}

// writers returns the principals an ALLOW ACL grants WRITE (or ALL) on
// topic, sorted.
func (g *ACLGuard) writers(ctx context.Context, topic string) ([]string, error) {
	// Every topic ALLOW, filtered here: the MATCH pattern filter is not
	// implemented alike by every broker.
	b := kadm.NewACLs().Topics().Allow().AllowHosts().Operations(kadm.OpAny).
		ResourcePatternType(kadm.ACLPatternAny)
	res, err := g.Admin.DescribeACLs(ctx, b)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range res {
		if r.Err != nil {
			return nil, fmt.Errorf("%v %s", r.Err, r.ErrMessage)
		}
		for _, a := range r.Described {
			if a.Operation != kadm.OpWrite && a.Operation != kadm.OpAll {
				continue
			}
			match := false
			switch a.Pattern {
			case kadm.ACLPatternLiteral:
				match = a.Name == topic || a.Name == "*"
			case kadm.ACLPatternPrefixed:
				match = strings.HasPrefix(topic, a.Name)
			default:
			}
			if match && !slices.Contains(out, a.Principal) {
				out = append(out, a.Principal)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// Lift implements WriteGuard.
func (g *ACLGuard) Lift(ctx context.Context, topic string) error {
	for _, b := range []*kadm.ACLBuilder{
		kadm.NewACLs().Topics(topic).Deny().DenyHosts().Operations(kadm.OpWrite).
			ResourcePatternType(kadm.ACLPatternLiteral),
		kadm.NewACLs().Topics(topic).Allow(g.principal()).AllowHosts().Operations(kadm.OpWrite).
			ResourcePatternType(kadm.ACLPatternLiteral),
	} {
		res, err := g.Admin.DeleteACLs(ctx, b)
		if err == nil {
			for _, r := range res {
				if r.Err != nil {
					err = fmt.Errorf("%v %s", r.Err, r.ErrMessage)
					break
				}
			}
		}
		if err != nil {
			return fmt.Errorf("%w: lifting the guard of %s: %v", ErrGuard, topic, err)
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

// DetectGuard picks the write guard for a destination: an ACLGuard for
// replicator (a principal, "User:" added when missing) when the
// destination has an authorizer, NoGuard when it answers DescribeACLs with
// SECURITY_DISABLED (no authorizer: nothing to enforce the guard with; the
// agents alone keep producers off D.T before COMPLETE). Any other error,
// an authorization failure of the admin's principal included, is returned:
// a guard that silently does nothing is worse than a refused start.
func DetectGuard(ctx context.Context, adm *kadm.Client, replicator string) (WriteGuard, error) {
	b := kadm.NewACLs().Topics("__baton_guard_probe").Allow().AllowHosts().
		Operations(kadm.OpAny).ResourcePatternType(kadm.ACLPatternLiteral)
	res, err := adm.DescribeACLs(ctx, b)
	if err == nil {
		for _, r := range res {
			if r.Err != nil {
				err = r.Err
				break
			}
		}
	}
	switch {
	case errors.Is(err, kerr.SecurityDisabled):
		return NoGuard{}, nil
	case err != nil:
		return nil, fmt.Errorf("%w: asking the destination whether it has an authorizer (DescribeACLs): %v", ErrGuard, err)
	case replicator == "":
		return nil, fmt.Errorf("%w: the destination has an authorizer, so the guard needs the replicator's principal", ErrGuard)
	}
	return &ACLGuard{Admin: adm, Replicator: replicator}, nil
}
