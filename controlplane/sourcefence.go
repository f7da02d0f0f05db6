package controlplane

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/migration"
)

// SourceFence keeps every producer off a topic on the source from a
// cutover on (docs/design.md §6.1). With it up, the cutover no longer
// depends on agents' leases to know the source's log is final: what
// reaches the source after it is refused, whoever sends it.
type SourceFence interface {
	// Fence denies writes to topic on the source. Idempotent.
	Fence(ctx context.Context, topic string) error
	// Enforced reports whether every source broker enforces the fence on
	// topic now; when not, behind says which brokers do not yet.
	Enforced(ctx context.Context, topic string) (ok bool, behind string, err error)
	// Lift removes what Fence created, and nothing else.
	Lift(ctx context.Context, topic string) error
}

// NoFence is the SourceFence of a source without an authorizer (or with
// --source-fence=none): the agents' leases alone end writes to the source
// before a cutover reads its end offsets.
type NoFence struct{}

var (
	_ SourceFence = NoFence{}
	_ SourceFence = (*ACLFence)(nil)
)

// Fence implements SourceFence: with nothing to fence with, it refuses.
func (NoFence) Fence(context.Context, string) error { return ErrNoSourceFence }

// Enforced implements SourceFence.
func (NoFence) Enforced(context.Context, string) (bool, string, error) {
	return false, "", ErrNoSourceFence
}

// Lift implements SourceFence.
func (NoFence) Lift(context.Context, string) error { return nil }

// fenceACL is the one ACL the fence creates on the literal resource
// Topic:T: DENY WRITE for every principal from any host. Kafka's DENY wins
// over every ALLOW, so it stops every producer at once; it does not stop
// superusers (super.users), whom no ACL binds. The replicator only reads
// the source, so nobody needs an exemption.
var fenceACL = OwnedACL{Principal: "User:*"}

// ACLFence is the SourceFence for a source with an authorizer: a DENY
// WRITE ACL on S.T for User:*, recorded in Owned before it is created, so
// that Lift deletes exactly what Fence created (an operator's own DENY on
// T survives a rollback). Recording first also fences a deposed leader:
// its etcd write fails (ErrNotLeader), so it creates nothing.
//
// Enforced asks each source broker in turn for the topic's ACLs
// (DescribeAcls, sent to that broker): a broker answers from the ACLs its
// authorizer holds, the ones it authorizes produce requests with, so a
// broker that shows the DENY refuses every produce it handles after that
// answer. The admin client needs ALTER and DESCRIBE on the cluster.
type ACLFence struct {
	Client *kgo.Client
	// Owned keeps what Fence created, by topic (default: in memory, lost
	// on restart; the control plane passes its etcd store's fence ledger).
	Owned GuardLedger
	// Term bounds the time from the start of a ledger write to the ACL
	// change it records: a leader paused longer may have been deposed
	// meanwhile (its successor acting on the source), so the change is
	// abandoned and retried, and the retry's fenced write fails if it was.
	// Default one second; the control plane passes its leader TTL.
	Term time.Duration

	mem memLedger // Owned's default
}

func (f *ACLFence) ledger() GuardLedger {
	if f.Owned != nil {
		return f.Owned
	}
	return &f.mem
}

// recordInTerm stores topic's record and fails if that took longer than
// Term: etcd fences the write, not the ACL call after it, so a leader
// paused between the two must not make the call (see Term). What is left
// is a pause between this check and the request leaving.
func (f *ACLFence) recordInTerm(ctx context.Context, topic string, acls []OwnedACL) error {
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
			"meanwhile, so it changes no ACL on it; retried", took.Round(time.Millisecond), term)
	}
	return nil
}

// Fence implements SourceFence.
func (f *ACLFence) Fence(ctx context.Context, topic string) error {
	adm := kadm.NewClient(f.Client)
	res, err := adm.DescribeACLs(ctx, fenceACL.builder(topic))
	if err == nil {
		err = describeErr(res)
	}
	if err != nil {
		return fmt.Errorf("%w: listing the ACLs on %s: %v", ErrSourceFence, topic, err)
	}
	if hasFenceACL(res, topic) {
		return nil // ours (recorded) or the operator's (left alone by Lift)
	}
	if err := f.recordInTerm(ctx, topic, []OwnedACL{fenceACL}); err != nil {
		return fmt.Errorf("%w: recording the fence of %s: %v", ErrSourceFence, topic, err)
	}
	if err := createACLs(ctx, adm, fenceACL.builder(topic)); err != nil {
		return fmt.Errorf("%w: denying writes to %s on the source: %v", ErrSourceFence, topic, err)
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

// Enforced implements SourceFence.
func (f *ACLFence) Enforced(ctx context.Context, topic string) (bool, string, error) {
	brokers, err := kadm.NewClient(f.Client).ListBrokers(ctx)
	if err != nil {
		return false, "", fmt.Errorf("%w: listing the source brokers: %v", ErrSourceFence, err)
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
			return false, "", fmt.Errorf("%w: asking source broker %d for the ACLs on %s: %v", ErrSourceFence, id, topic, err)
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
func (f *ACLFence) Recorded(ctx context.Context, topic string) (bool, error) {
	owned, err := f.ledger().GuardACLs(ctx, topic)
	return len(owned) > 0, err
}

// Lift implements SourceFence.
func (f *ACLFence) Lift(ctx context.Context, topic string) error {
	owned, err := f.ledger().GuardACLs(ctx, topic)
	if err != nil {
		return fmt.Errorf("%w: reading the fence's record of %s: %v", ErrSourceFence, topic, err)
	}
	if len(owned) == 0 {
		return nil
	}
	// The record written again before the delete: a deposed leader's write
	// fails (ErrNotLeader), so it lifts no fence its successor put up.
	if err := f.recordInTerm(ctx, topic, owned); err != nil {
		return fmt.Errorf("%w: confirming the fence's record of %s before lifting it: %v", ErrSourceFence, topic, err)
	}
	if err := deleteOwnedACLs(ctx, kadm.NewClient(f.Client), topic, []OwnedACL{fenceACL}); err != nil {
		return fmt.Errorf("%w: lifting the fence of %s on the source: %v", ErrSourceFence, topic, err)
	}
	if err := f.ledger().PutGuardACLs(ctx, topic, nil); err != nil {
		return fmt.Errorf("%w: clearing the fence's record of %s: %v", ErrSourceFence, topic, err)
	}
	return nil
}

// DetectFence picks the source fence: an ACLFence when the source has an
// authorizer, NoFence when it answers DescribeACLs with SECURITY_DISABLED.
// Any other error (the admin's principal may not describe ACLs, the
// source is down) is returned: a start that silently loses the fence
// would let agents forward without a lease on a promise nobody keeps.
func DetectFence(ctx context.Context, cl *kgo.Client) (SourceFence, error) {
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
		return NoFence{}, nil
	case err != nil:
		return nil, fmt.Errorf("%w: asking the source whether it has an authorizer (DescribeACLs): %v", ErrSourceFence, err)
	}
	return &ACLFence{Client: cl}, nil
}

// fenced reports whether the control plane runs with a source fence.
func (cp *ControlPlane) fenced() bool {
	_, none := cp.cfg.fence.(NoFence)
	return !none
}

// promiseFences runs at start. With a source fence, every REJECT and
// PROXY topic's routes say so from now on. Without one, topics whose
// routes already said so keep saying it (agents cut off hold those
// routes), and their cutovers are refused until the fence is back: the
// log says which.
func (cp *ControlPlane) promiseFences(ctx context.Context) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var unkept []string
	for _, name := range slices.Sorted(maps.Keys(cp.topics)) {
		t := cp.topics[name]
		switch {
		case !cp.fenced():
			if t.FenceAtCutover && t.State != migration.Complete {
				unkept = append(unkept, name)
			}
		case !t.FenceAtCutover && (t.State == migration.Reject || t.State == migration.Proxy):
			nt := *t
			nt.FenceAtCutover = true
			if err := cp.commitLocked(ctx, nt, false); err != nil {
				return fmt.Errorf("controlplane: storing %s's source fence: %w", name, err)
			}
		}
	}
	if len(unkept) > 0 {
		cp.log.Warn("these topics' routes tell agents the source is fenced at the cutover, and this control plane runs "+
			"without a source fence: their cutovers are refused until it runs with --source-fence=acl (agents without a "+
			"lease may be forwarding them to the source on that promise)", "topics", unkept)
	}
	return nil
}

// liftFence lifts a rolled-back topic's source fence and records it
// lifted. Without a fence to lift it with, it says what to do instead.
func (cp *ControlPlane) liftFence(ctx context.Context, name string) error {
	if !cp.fenced() {
		return fmt.Errorf("%w: %s is fenced on the source since a cutover that was rolled back, and this control plane "+
			"runs without a source fence: restart it with --source-fence=acl, or delete the DENY WRITE ACL for User:* on "+
			"topic %s on the source", ErrNoSourceFence, name, name)
	}
	if err := cp.cfg.fence.Lift(ctx, name); err != nil {
		return err
	}
	cp.mu.Lock()
	t, ok := cp.topics[name]
	if !ok || !t.SourceFenceUp || (t.State != migration.Reject && t.State != migration.Proxy) {
		cp.mu.Unlock()
		return nil
	}
	nt := *t
	nt.SourceFenceUp = false
	err := cp.store.PutTopic(ctx, nt, cp.version)
	if err == nil {
		cp.topics[name] = &nt
	}
	cp.mu.Unlock()
	if err != nil {
		return err
	}
	cp.event(ctx, Event{Topic: name, Kind: EventSourceFenceLifted, Actor: ActorControlPlane,
		Reason: "producers may write " + name + " on the source again"})
	return nil
}

// fenceRecorder is a SourceFence that can say whether a topic's fence
// is up from an earlier cutover (ACLFence).
type fenceRecorder interface {
	Recorded(ctx context.Context, topic string) (bool, error)
}

// fenceLeftUp reports whether topic, about to be added, is still fenced
// on the source by a cutover of an earlier time it was managed (COMPLETE,
// then removed): the new topic's restore lifts it, as a rollback's would.
func (cp *ControlPlane) fenceLeftUp(ctx context.Context, topic string) (bool, error) {
	r, ok := cp.cfg.fence.(fenceRecorder)
	if !ok {
		return false, nil
	}
	up, err := r.Recorded(ctx, topic)
	if err != nil {
		return false, fmt.Errorf("controlplane: reading %s's source fence record: %w", topic, err)
	}
	return up, nil
}

// fencePromised reports whether topic, about to be added, was removed so
// recently that an agent cut off since may still forward it without a
// lease on its old route's source_fenced: then the new topic keeps the
// promise (and a control plane without a fence refuses its cutover). Read
// from the event log, which outlives restarts and leaders.
func (cp *ControlPlane) fencePromised(ctx context.Context, topic string) (bool, error) {
	if cp.fenced() {
		return true, nil // promised anyway
	}
	evs, err := cp.store.Events(ctx, topic, 0)
	if err != nil {
		return false, fmt.Errorf("controlplane: reading %s's events: %w", topic, err)
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if e := evs[i]; e.Kind == EventRemoved {
			// An agent writes no later than its lease's end (at most a lease
			// after the removal was pushed) + UnleasedForward + F.
			kept := cp.cfg.lease + migration.UnleasedForward + cp.cfg.forward
			return e.FenceAtCutover && cp.now().Before(e.Time.Add(kept)), nil
		}
	}
	return false, nil
}
