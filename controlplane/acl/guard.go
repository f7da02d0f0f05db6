package acl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Guard is the destination write guard for a destination with an
// authorizer: it keeps writers other than the replicator off D.T with
// Kafka ACLs until the topic's cutover (docs/design.md §11).
//
// Kafka's authorizer has no "everyone except P": a DENY matching a
// principal wins over any ALLOW, and DENY User:* matches every principal,
// the replicator's too (superusers aside). Protect(T) therefore works in
// two steps, both on the literal resource Topic:T:
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
// An ALLOW granted after Protect ran is only denied by the next Protect:
// the control plane runs Protect again for every REJECT and PROXY topic
// every GuardResync. Protect creates only ACLs that do not exist yet and
// records each one it created in Owned before creating it; Lift deletes
// exactly those, so an operator's own DENY and ALLOW ACLs on T survive it.
// Superusers bypass ACLs and are not guarded. The admin client needs ALTER
// and DESCRIBE on the cluster.
type Guard struct {
	Admin *kadm.Client
	// Replicator is the replicator's principal, e.g. "User:baton"
	// ("User:" is added when missing). User:ANONYMOUS is refused: on a
	// destination with an authorizer it is every PLAINTEXT client.
	Replicator string
	// Owned keeps the ACLs Protect created, by topic (default: in
	// memory, lost on restart; the control plane passes its etcd store).
	Owned Ledger

	mem memLedger // Owned's default
}

// anonymous is what Kafka calls a client without SASL or TLS client auth.
const anonymous = "User:ANONYMOUS"

func (g *Guard) principal() string {
	if strings.Contains(g.Replicator, ":") {
		return g.Replicator
	}
	return "User:" + g.Replicator
}

// Validate refuses a replicator principal the guard cannot tell from
// producers: none, User:ANONYMOUS (every client without SASL or TLS client
// auth has it) and User:* (every principal).
func (g *Guard) Validate() error {
	switch p := g.principal(); p {
	case "User:":
		return fmt.Errorf("%w: none named, and the guard exempts only the replicator's principal from its DENY ACLs; "+
			"name the principal the destination gives the replicator (with a TLS client certificate, the one its "+
			"principal mapping makes of the certificate)", ErrGuardPrincipal)
	case anonymous, "User:*":
		return fmt.Errorf("%w: %q: on a destination with an authorizer that is "+
			"every client without SASL or TLS client auth (or every client at all), so exempting it guards nothing; "+
			"connect the replicator with SASL or mTLS and name its principal", ErrGuardPrincipal, p)
	}
	return nil
}

// AnonymousWhy and AnonymousRemedy are DetectGuard's Unguarded for an
// anonymous replicator on a destination with an authorizer.
const (
	AnonymousWhy = "the replicator reaches the destination without SASL or a TLS client certificate, as User:ANONYMOUS, " +
		"the principal of every such client: an ACL cannot let it write a topic and keep the other anonymous clients " +
		"out, so the destination is not write-protected against them"
	AnonymousRemedy = "To have Baton deny such writes, give the destination an authenticated listener (SASL or mTLS), " +
		"connect the replicator through it (--destination-sasl-*, or --destination-tls-cert) and set " +
		"--replicator-principal to the principal it has there"
)

func (g *Guard) ledger() Ledger {
	if g.Owned != nil {
		return g.Owned
	}
	return &g.mem
}

// Protect denies writes to topic on the destination except the
// replicator's. Idempotent.
func (g *Guard) Protect(ctx context.Context, topic string) error {
	if err := g.Validate(); err != nil {
		return err
	}
	repl := g.principal()
	writers, err := g.writers(ctx, topic)
	if err != nil {
		return fmt.Errorf("%w: listing writers of %s: %v", ErrGuard, topic, err)
	}
	want := []Owned{{Principal: repl, Allow: true}}
	for _, p := range writers {
		switch {
		case p == repl:
		case p == "User:*":
			return fmt.Errorf("%w: an ALLOW ACL lets User:* write %s; a Kafka DENY cannot exempt the replicator "+
				"from a wildcard, so narrow that ACL to named principals", ErrGuard, topic)
		default:
			want = append(want, Owned{Principal: p})
		}
	}
	existing, err := g.existing(ctx, topic)
	if err != nil {
		return fmt.Errorf("%w: listing the ACLs on %s: %v", ErrGuard, topic, err)
	}
	owned, err := g.ledger().GuardACLs(ctx, topic)
	if err != nil {
		return fmt.Errorf("%w: reading the guard's record of %s: %v", ErrGuard, topic, err)
	}
	var create []Owned
	for _, a := range want {
		if !slices.Contains(existing, a) {
			create = append(create, a)
		}
	}
	if len(create) == 0 {
		return nil
	}
	// Recorded first: a crash between the two leaves a record of an ACL
	// that may not exist (Lift deletes nothing then), never an ACL the
	// guard created but forgot.
	for _, a := range create {
		if !slices.Contains(owned, a) {
			owned = append(owned, a)
		}
	}
	if err := g.ledger().PutGuardACLs(ctx, topic, owned); err != nil {
		return fmt.Errorf("%w: recording the guard's ACLs on %s: %v", ErrGuard, topic, err)
	}
	for _, a := range create {
		if err := createACLs(ctx, g.Admin, a.builder(topic)); err != nil {
			return fmt.Errorf("%w: %s write to %s for %s: %v", ErrGuard, map[bool]string{true: "allowing", false: "denying"}[a.Allow],
				topic, a.Principal, err)
		}
	}
	return nil
}

// existing returns the WRITE ACLs on literal topic for any host, as
// Owneds (host-specific ones are not the guard's and are left alone).
func (g *Guard) existing(ctx context.Context, topic string) ([]Owned, error) {
	var out []Owned
	for _, allow := range []bool{true, false} {
		b := kadm.NewACLs().Topics(topic).Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)
		if allow {
			b = b.Allow().AllowHosts()
		} else {
			b = b.Deny().DenyHosts()
		}
		res, err := g.Admin.DescribeACLs(ctx, b)
		if err != nil {
			return nil, err
		}
		for _, r := range res {
			if r.Err != nil {
				return nil, fmt.Errorf("%v %s", r.Err, r.ErrMessage)
			}
			for _, a := range r.Described {
				if a.Name == topic && a.Pattern == kadm.ACLPatternLiteral && a.Operation == kadm.OpWrite && a.Host == "*" &&
					a.Permission == kmsg.ACLPermissionTypeAllow == allow {
					out = append(out, Owned{Principal: a.Principal, Allow: allow})
				}
			}
		}
	}
	return out, nil
}

// writers returns the principals an ALLOW ACL grants WRITE (or ALL) on
// topic, sorted.
func (g *Guard) writers(ctx context.Context, topic string) ([]string, error) {
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

// Lift allows producers to write topic on the destination: it deletes
// the ACLs Protect recorded as created, and nothing else.
func (g *Guard) Lift(ctx context.Context, topic string) error {
	owned, err := g.ledger().GuardACLs(ctx, topic)
	if err != nil {
		return fmt.Errorf("%w: reading the guard's record of %s: %v", ErrGuard, topic, err)
	}
	if err := deleteOwnedACLs(ctx, g.Admin, topic, owned); err != nil {
		return fmt.Errorf("%w: lifting the guard of %s: %v", ErrGuard, topic, err)
	}
	if err := g.ledger().PutGuardACLs(ctx, topic, nil); err != nil {
		return fmt.Errorf("%w: clearing the guard's record of %s: %v", ErrGuard, topic, err)
	}
	return nil
}

// Unguarded is DetectGuard's answer for a destination whose ACLs cannot
// guard it: Why, and Remedy, what would give a guard ("": the caller's
// own advice). The control plane runs without a guard then, and warns.
type Unguarded struct {
	Why    string
	Remedy string
}

// DetectGuard picks the write guard for a destination: a Guard for
// replicator (a principal, "User:" added when missing) when the
// destination has an authorizer, an Unguarded when it answers DescribeACLs
// with SECURITY_DISABLED (no authorizer: nothing to enforce the guard
// with; the agents alone keep producers off D.T before COMPLETE). A
// replicator that is User:ANONYMOUS cannot be told from the other
// anonymous clients by any ACL: on a destination with an authorizer that
// is an Unguarded too, whose Why and Remedy say so (a destination where
// every client is anonymous still runs; an explicit Guard refuses it, see
// Validate). Any other error, an authorization failure of the admin's
// principal or an unusable principal (none, User:*) included, is
// returned: a guard that silently does nothing is worse than a refused
// start. Without an error, exactly one of the Guard and the Unguarded is
// non-nil.
func DetectGuard(ctx context.Context, adm *kadm.Client, replicator string) (*Guard, *Unguarded, error) {
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
		return nil, &Unguarded{Why: "the destination has no authorizer (DescribeACLs answers SECURITY_DISABLED)"}, nil
	case err != nil:
		return nil, nil, fmt.Errorf("%w: asking the destination whether it has an authorizer (DescribeACLs): %v", ErrGuard, err)
	}
	g := &Guard{Admin: adm, Replicator: replicator}
	if g.principal() == anonymous {
		return nil, &Unguarded{Why: AnonymousWhy, Remedy: AnonymousRemedy}, nil
	}
	if err := g.Validate(); err != nil {
		return nil, nil, err
	}
	return g, nil, nil
}
