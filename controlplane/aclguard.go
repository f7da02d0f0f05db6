package controlplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// WriteGuard keeps writers other than the replicator off D.T until COMPLETE
// (docs/design.md §11).
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

var _ WriteGuard = NoGuard{}

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

// ACLGuard is the WriteGuard for a destination with an authorizer: it
// keeps writers other than the replicator off D.T with Kafka ACLs.
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
type ACLGuard struct {
	Admin *kadm.Client
	// Replicator is the replicator's principal, e.g. "User:baton"
	// ("User:" is added when missing). User:ANONYMOUS is refused: on a
	// destination with an authorizer it is every PLAINTEXT client.
	Replicator string
	// Owned keeps the ACLs Protect created, by topic (default: in
	// memory, lost on restart; the control plane passes its etcd store).
	Owned GuardLedger

	mem memLedger // Owned's default
}

// OwnedACL is one ACL the guard created: on the literal resource Topic:T,
// operation WRITE, any host; ALLOW for the replicator or DENY for a writer.
type OwnedACL struct {
	Principal string `json:"principal"`
	Allow     bool   `json:"allow"`
}

// GuardLedger stores the ACLs the guard created, by topic.
type GuardLedger interface {
	// GuardACLs returns what was recorded for topic (none: nil).
	GuardACLs(ctx context.Context, topic string) ([]OwnedACL, error)
	// PutGuardACLs replaces topic's record; none removes it.
	PutGuardACLs(ctx context.Context, topic string, acls []OwnedACL) error
}

var _ WriteGuard = (*ACLGuard)(nil)

// memLedger is a GuardLedger in memory: the guard's and the fence's when
// they are given none (lost on restart).
type memLedger struct {
	mu sync.Mutex
	m  map[string][]OwnedACL
}

var _ GuardLedger = (*memLedger)(nil)

// GuardACLs implements GuardLedger.
func (l *memLedger) GuardACLs(_ context.Context, topic string) ([]OwnedACL, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.m[topic]), nil
}

// PutGuardACLs implements GuardLedger.
func (l *memLedger) PutGuardACLs(_ context.Context, topic string, acls []OwnedACL) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(acls) == 0 {
		delete(l.m, topic)
		return nil
	}
	if l.m == nil {
		l.m = map[string][]OwnedACL{}
	}
	l.m[topic] = slices.Clone(acls)
	return nil
}

// anonymous is what Kafka calls a client without SASL or TLS client auth.
const anonymous = "User:ANONYMOUS"

func (g *ACLGuard) principal() string {
	if strings.Contains(g.Replicator, ":") {
		return g.Replicator
	}
	return "User:" + g.Replicator
}

// Validate refuses a replicator principal the guard cannot tell from
// producers: none, User:ANONYMOUS (every client without SASL or TLS client
// auth has it) and User:* (every principal).
func (g *ACLGuard) Validate() error {
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

// anonymousWhy and anonymousRemedy are DetectGuard's NoGuard for an
// anonymous replicator on a destination with an authorizer.
const (
	anonymousWhy = "the replicator reaches the destination without SASL or a TLS client certificate, as User:ANONYMOUS, " +
		"the principal of every such client: an ACL cannot let it write a topic and keep the other anonymous clients " +
		"out, so the destination is not write-protected against them"
	anonymousRemedy = "To have Baton deny such writes, give the destination an authenticated listener (SASL or mTLS), " +
		"connect the replicator through it (--destination-sasl-*, or --destination-tls-cert) and set " +
		"--replicator-principal to the principal it has there"
)

func (g *ACLGuard) ledger() GuardLedger {
	if g.Owned != nil {
		return g.Owned
	}
	return &g.mem
}

// Protect implements WriteGuard.
func (g *ACLGuard) Protect(ctx context.Context, topic string) error {
	if err := g.Validate(); err != nil {
		return err
	}
	repl := g.principal()
	writers, err := g.writers(ctx, topic)
	if err != nil {
		return fmt.Errorf("%w: listing writers of %s: %v", ErrGuard, topic, err)
	}
	want := []OwnedACL{{Principal: repl, Allow: true}}
	for _, p := range writers {
		switch {
		case p == repl:
		case p == "User:*":
			return fmt.Errorf("%w: an ALLOW ACL lets User:* write %s; a Kafka DENY cannot exempt the replicator "+
				"from a wildcard, so narrow that ACL to named principals", ErrGuard, topic)
		default:
			want = append(want, OwnedACL{Principal: p})
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
	var create []OwnedACL
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
// OwnedACLs (host-specific ones are not the guard's and are left alone).
func (g *ACLGuard) existing(ctx context.Context, topic string) ([]OwnedACL, error) {
	var out []OwnedACL
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
					out = append(out, OwnedACL{Principal: a.Principal, Allow: allow})
				}
			}
		}
	}
	return out, nil
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

// Lift implements WriteGuard: it deletes the ACLs Protect recorded as
// created, and nothing else.
func (g *ACLGuard) Lift(ctx context.Context, topic string) error {
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

// builder is a's ACL on the literal resource Topic:topic: WRITE from any
// host ("*"), ALLOW or DENY for a's principal. The guard and the fence
// create, describe and delete their ACLs through it, so what Lift deletes
// is exactly what Protect or Fence created: a host-specific ACL of the
// same principal is an operator's and is left alone.
func (a OwnedACL) builder(topic string) *kadm.ACLBuilder {
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
func deleteOwnedACLs(ctx context.Context, adm *kadm.Client, topic string, acls []OwnedACL) error {
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

// DetectGuard picks the write guard for a destination: an ACLGuard for
// replicator (a principal, "User:" added when missing) when the
// destination has an authorizer, NoGuard when it answers DescribeACLs with
// SECURITY_DISABLED (no authorizer: nothing to enforce the guard with; the
// agents alone keep producers off D.T before COMPLETE). A replicator that
// is User:ANONYMOUS cannot be told from the other anonymous clients by any
// ACL: on a destination with an authorizer that is NoGuard too, whose Why
// and Remedy say so (a destination where every client is anonymous still
// runs; an explicit ACLGuard refuses it, see Validate). Any other error, an
// authorization failure of the admin's principal or an unusable principal
// (none, User:*) included, is returned: a guard that silently does nothing
// is worse than a refused start.
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
		return NoGuard{Why: "the destination has no authorizer (DescribeACLs answers SECURITY_DISABLED)"}, nil
	case err != nil:
		return nil, fmt.Errorf("%w: asking the destination whether it has an authorizer (DescribeACLs): %v", ErrGuard, err)
	}
	g := &ACLGuard{Admin: adm, Replicator: replicator}
	if g.principal() == anonymous {
		return NoGuard{Why: anonymousWhy, Remedy: anonymousRemedy}, nil
	}
	if err := g.Validate(); err != nil {
		return nil, err
	}
	return g, nil
}
