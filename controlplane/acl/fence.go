package acl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fenceACL is the one ACL the fence creates on the literal resource
// Topic:T: DENY WRITE for every principal from any host. Kafka's DENY wins
// over every ALLOW, so it stops every producer at once; it does not stop
// superusers (super.users), whom no ACL binds. The replicator only reads
// the source, so nobody needs an exemption.
var fenceACL = Owned{Principal: "User:*"}

// Fence is the source fence for a source with an authorizer: from a
// topic's cutover on it keeps every producer off the topic on the source
// (docs/design.md §6.1) with a DENY WRITE ACL on S.T for User:*, recorded
// in Owned before it is created, so that Lift deletes exactly what Fence
// created (an operator's own DENY on T survives a rollback). Recording
// first also fences a deposed leader: its etcd write fails (the control
// plane's store refuses it), so it creates nothing.
//
// Enforced asks each source broker in turn for the topic's ACLs
// (DescribeAcls, sent to that broker): a broker answers from the ACLs its
// authorizer holds, the ones it authorizes produce requests with, so a
// broker that shows the DENY refuses every produce it handles after that
// answer. The admin client needs ALTER and DESCRIBE on the cluster.
type Fence struct {
	Client *kgo.Client
	// Owned keeps what Fence created, by topic (default: in memory, lost
	// on restart; the control plane passes its etcd store's fence ledger).
	Owned Ledger
	// Term bounds the time from the start of a ledger write to the ACL
	// change it records: a leader paused longer may have been deposed
	// meanwhile (its successor acting on the source), so the change is
	// abandoned: Fence's caller fails its step (a cutover rolls back), and
	// a Lift is retried, its fenced write failing if it was deposed.
	// Default one second; the control plane passes its leader TTL.
	Term time.Duration

	mem memLedger // Owned's default
}

func (f *Fence) ledger() Ledger {
	if f.Owned != nil {
		return f.Owned
	}
	return &f.mem
}

// recordInTerm stores topic's record and fails if that took longer than
// Term: etcd fences the write, not the ACL call after it, so a leader
// paused between the two must not make the call (see Term). What is left
// is a pause between this check and the request leaving.
func (f *Fence) recordInTerm(ctx context.Context, topic string, acls []Owned) error {
	term := f.Term
	if term <= 0 {
		term = time.Second
	}
	start := time.Now()
	if err := f.ledger().PutGuardACLs(ctx, topic, acls); err != nil {
		return err
	}
	if took := time.Since(start); took > term {
		return fmt.Errorf("the record took %v, longer than a leader term (%v): this replica may have been deposed "+
			"meanwhile, so it changes no ACL on it", took.Round(time.Millisecond), term)
	}
	return nil
}

// Fence denies writes to topic on the source. Idempotent.
func (f *Fence) Fence(ctx context.Context, topic string) error {
	adm := kadm.NewClient(f.Client)
	res, err := adm.DescribeACLs(ctx, fenceACL.builder(topic))
	if err == nil {
		err = describeErr(res)
	}
	if err != nil {
		return fmt.Errorf("%w: listing the ACLs on %s: %v", ErrFence, topic, err)
	}
	if hasFenceACL(res, topic) {
		return nil // ours (recorded) or the operator's (left alone by Lift)
	}
	if err := f.recordInTerm(ctx, topic, []Owned{fenceACL}); err != nil {
		return fmt.Errorf("%w: recording the fence of %s: %v", ErrFence, topic, err)
	}
	if err := createACLs(ctx, adm, fenceACL.builder(topic)); err != nil {
		return fmt.Errorf("%w: denying writes to %s on the source: %v", ErrFence, topic, err)
	}
	return nil
}

func hasFenceACL(res kadm.DescribeACLsResults, topic string) bool {
	for _, r := range res {
		for _, a := range r.Described {
			if a.Name == topic && a.Pattern == kadm.ACLPatternLiteral && a.Operation == kadm.OpWrite &&
				a.Permission == kmsg.ACLPermissionTypeDeny && a.Principal == fenceACL.Principal && a.Host == "*" {
				return true
			}
		}
	}
	return false
}

// Enforced reports whether every source broker enforces the fence on
// topic now; when not, behind says which brokers do not yet.
func (f *Fence) Enforced(ctx context.Context, topic string) (bool, string, error) {
	brokers, err := kadm.NewClient(f.Client).ListBrokers(ctx)
	if err != nil {
		return false, "", fmt.Errorf("%w: listing the source brokers: %v", ErrFence, err)
	}
	req := kmsg.NewPtrDescribeACLsRequest()
	req.ResourceType = kmsg.ACLResourceTypeTopic
	req.ResourceName = kmsg.StringPtr(topic)
	req.ResourcePatternType = kmsg.ACLResourcePatternTypeLiteral
	req.Principal = kmsg.StringPtr(fenceACL.Principal)
	req.Host = kmsg.StringPtr("*")
	req.Operation = kmsg.ACLOperationWrite
	req.PermissionType = kmsg.ACLPermissionTypeDeny
	var behind []string
	ids := brokers.NodeIDs()
	slices.Sort(ids)
	for _, id := range ids {
		r, err := req.RequestWith(ctx, f.Client.Broker(int(id)))
		if err == nil {
			err = kerr.ErrorForCode(r.ErrorCode)
		}
		if err != nil {
			return false, "", fmt.Errorf("%w: asking source broker %d for the ACLs on %s: %v", ErrFence, id, topic, err)
		}
		found := false
		for _, res := range r.Resources {
			for _, a := range res.ACLs {
				found = found || (res.ResourceName == topic && a.Principal == fenceACL.Principal &&
					a.PermissionType == kmsg.ACLPermissionTypeDeny && a.Operation == kmsg.ACLOperationWrite)
			}
		}
		if !found {
			behind = append(behind, fmt.Sprintf("broker %d", id))
		}
	}
	if len(ids) == 0 {
		return false, "no source brokers in the metadata", nil
	}
	if len(behind) > 0 {
		return false, strings.Join(behind, ", ") + " not enforcing the fence yet", nil
	}
	return true, "", nil
}

// Recorded reports whether the ledger holds a fence of topic's: one a
// cutover put up and no rollback lifted (a COMPLETE topic's, kept).
func (f *Fence) Recorded(ctx context.Context, topic string) (bool, error) {
	owned, err := f.ledger().GuardACLs(ctx, topic)
	return len(owned) > 0, err
}

// Lift removes what Fence created, and nothing else.
func (f *Fence) Lift(ctx context.Context, topic string) error {
	owned, err := f.ledger().GuardACLs(ctx, topic)
	if err != nil {
		return fmt.Errorf("%w: reading the fence's record of %s: %v", ErrFence, topic, err)
	}
	if len(owned) == 0 {
		return nil
	}
	// The record written again before the delete: a deposed leader's write
	// fails (the control plane's store refuses it), so it lifts no fence its
	// successor put up.
	if err := f.recordInTerm(ctx, topic, owned); err != nil {
		return fmt.Errorf("%w: confirming the fence's record of %s before lifting it: %v", ErrFence, topic, err)
	}
	if err := deleteOwnedACLs(ctx, kadm.NewClient(f.Client), topic, []Owned{fenceACL}); err != nil {
		return fmt.Errorf("%w: lifting the fence of %s on the source: %v", ErrFence, topic, err)
	}
	if err := f.ledger().PutGuardACLs(ctx, topic, nil); err != nil {
		return fmt.Errorf("%w: clearing the fence's record of %s: %v", ErrFence, topic, err)
	}
	return nil
}

// DetectFence picks the source fence: a Fence when the source has an
// authorizer, none (nil, and no error) when it answers DescribeACLs with
// SECURITY_DISABLED. Any other error (the admin's principal may not
// describe ACLs, the source is down) is returned: a start that silently
// loses the fence would let agents forward without a lease on a promise
// nobody keeps.
func DetectFence(ctx context.Context, cl *kgo.Client) (*Fence, error) {
	b := kadm.NewACLs().Topics("__baton_fence_probe").Deny().DenyHosts().
		Operations(kadm.OpAny).ResourcePatternType(kadm.ACLPatternLiteral)
	res, err := kadm.NewClient(cl).DescribeACLs(ctx, b)
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
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("%w: asking the source whether it has an authorizer (DescribeACLs): %v", ErrFence, err)
	}
	return &Fence{Client: cl}, nil
}
