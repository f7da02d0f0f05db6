package acl

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/controlplane/acl/acltest"
	"github.com/baton-kafka/baton/internal/embedded"
)

// The source fence's tests run on a kfake source with an authorizer:
// acltest.Cluster ("admin" a superuser, "app" and "repl" allowed to write
// every topic, "other" nothing), here standing for the source.

// errNotLeader stands for the control plane's store refusing a deposed
// leader's write.
var errNotLeader = errors.New("test: not the leader")

// testLedger is the in-memory ledger whose writes fail with putErr
// (errNotLeader: a deposed leader's etcd writes), counting them.
type testLedger struct {
	memLedger
	mu     sync.Mutex
	putErr error
	puts   int
}

func (l *testLedger) PutGuardACLs(ctx context.Context, topic string, acls []Owned) error {
	l.mu.Lock()
	l.puts++
	err := l.putErr
	l.mu.Unlock()
	if err != nil {
		return err
	}
	return l.memLedger.PutGuardACLs(ctx, topic, acls)
}

func (l *testLedger) record(topic string) []Owned {
	r, _ := l.GuardACLs(context.Background(), topic)
	return r
}

// deposedLedger reads the shared ledger, as a deposed leader still can,
// and fails every write with errNotLeader, as its fenced etcd writes do.
type deposedLedger struct{ l *testLedger }

func (d deposedLedger) GuardACLs(ctx context.Context, topic string) ([]Owned, error) {
	return d.l.GuardACLs(ctx, topic)
}

func (deposedLedger) PutGuardACLs(context.Context, string, []Owned) error { return errNotLeader }

// Fence denies every principal but superusers writes to the topic (the
// producer's ALLOW notwithstanding), is idempotent, is enforced once up
// and only then, and Lift gives the writes back.
func TestFenceFencesAndLifts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	src := acltest.Cluster(t)
	admCl := acltest.Client(t, src, "admin", "admin-pw")
	adm := kadm.NewClient(admCl)
	acltest.CreateTopics(t, ctx, adm, "orders", "payments")
	led := &testLedger{}
	f := &Fence{Client: admCl, Owned: led}

	if ok, behind, err := f.Enforced(ctx, "orders"); err != nil || ok || !strings.Contains(behind, "broker") {
		t.Fatalf("Enforced before Fence = %v, %q, %v; want false naming the broker behind", ok, behind, err)
	}
	acltest.WantWrites(t, src, "app", "orders", "before Fence")

	for i := range 3 { // idempotent
		if err := f.Fence(ctx, "orders"); err != nil {
			t.Fatalf("Fence #%d: %v", i+1, err)
		}
	}
	if n := acltest.FenceACLs(t, ctx, adm, "orders"); n != 1 {
		t.Errorf("%d fence ACLs after three Fences, want 1", n)
	}
	if got := led.record("orders"); !slices.Equal(got, []Owned{fenceACL}) {
		t.Errorf("ledger after Fence: %v, want the fence ACL", got)
	}
	if ok, behind, err := f.Enforced(ctx, "orders"); err != nil || !ok {
		t.Fatalf("Enforced after Fence = %v, %q, %v; want true", ok, behind, err)
	}
	for _, u := range []string{"app", "repl"} {
		acltest.WantRefused(t, src, u, "orders", "while fenced")
	}
	// Superusers are not bound by ACLs (documented): the fence cannot stop them.
	acltest.WantWrites(t, src, "admin", "orders", "while fenced (a superuser)")
	acltest.WantWrites(t, src, "app", "payments", "(not fenced)")
	if ok, _, err := f.Enforced(ctx, "payments"); err != nil || ok {
		t.Errorf("Enforced for a topic never fenced = %v, %v; want false", ok, err)
	}

	if err := f.Lift(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	acltest.WantWrites(t, src, "app", "orders", "after Lift")
	if n := acltest.FenceACLs(t, ctx, adm, "orders"); n != 0 {
		t.Errorf("%d fence ACLs after Lift, want 0", n)
	}
	if got := led.record("orders"); got != nil {
		t.Errorf("ledger after Lift: %v, want it cleared", got)
	}
	if ok, _, err := f.Enforced(ctx, "orders"); err != nil || ok {
		t.Errorf("Enforced after Lift = %v, %v; want false", ok, err)
	}
	if err := f.Lift(ctx, "orders"); err != nil { // nothing left to lift
		t.Fatal(err)
	}
}

// Lift deletes only what Fence created: an operator's own DENY WRITE for
// User:* on the topic, there before the fence, is not recorded by Fence
// and survives Lift, with either ledger.
func TestFenceLiftKeepsTheOperatorsDeny(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		led  *testLedger // nil: the in-memory default
	}{
		{"in-memory record", nil},
		{"ledger", &testLedger{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			src := acltest.Cluster(t)
			admCl := acltest.Client(t, src, "admin", "admin-pw")
			adm := kadm.NewClient(admCl)
			acltest.CreateTopics(t, ctx, adm, "orders")
			if err := createACLs(ctx, adm, fenceACL.builder("orders")); err != nil { // the operator's
				t.Fatal(err)
			}
			f := &Fence{Client: admCl}
			if tc.led != nil {
				f.Owned = tc.led
			}
			if err := f.Fence(ctx, "orders"); err != nil {
				t.Fatal(err)
			}
			if owned, err := f.ledger().GuardACLs(ctx, "orders"); err != nil || len(owned) != 0 {
				t.Fatalf("Fence recorded %v (%v) over the operator's own DENY; want nothing", owned, err)
			}
			if ok, _, err := f.Enforced(ctx, "orders"); err != nil || !ok {
				t.Fatalf("Enforced with the operator's DENY = %v, %v; want true", ok, err)
			}
			if err := f.Lift(ctx, "orders"); err != nil {
				t.Fatal(err)
			}
			if n := acltest.FenceACLs(t, ctx, adm, "orders"); n != 1 {
				t.Errorf("Lift deleted the operator's own DENY WRITE for User:* (%d left)", n)
			}
			acltest.WantRefused(t, src, "app", "orders", "after Lift, under the operator's DENY")
		})
	}
}

// Fence records the ACL before creating it: when the record cannot be
// written (a deposed leader's etcd write fails with errNotLeader, or etcd
// is down), no ACL is created.
func TestFenceCreatesNothingUnrecorded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"not the leader", errNotLeader},
		{"etcd unreachable", context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			src := acltest.Cluster(t)
			admCl := acltest.Client(t, src, "admin", "admin-pw")
			adm := kadm.NewClient(admCl)
			acltest.CreateTopics(t, ctx, adm, "orders")
			led := &testLedger{putErr: tc.err}
			f := &Fence{Client: admCl, Owned: led}
			if err := f.Fence(ctx, "orders"); !errors.Is(err, ErrFence) {
				t.Fatalf("Fence with a failing ledger: %v, want ErrFence", err)
			}
			if led.puts == 0 {
				t.Error("Fence never tried to record the ACL")
			}
			if n := acltest.FenceACLs(t, ctx, adm, "orders"); n != 0 {
				t.Fatalf("Fence created %d ACLs it could not record", n)
			}
			if ok, _, err := f.Enforced(ctx, "orders"); err != nil || ok {
				t.Errorf("Enforced = %v, %v; want false", ok, err)
			}
			acltest.WantWrites(t, src, "app", "orders", "after a Fence that could not record")
		})
	}
}

// A deposed leader lifts nothing: the ledger it still reads holds the new
// leader's fence, but its writes fail (errNotLeader). Its Lift must leave
// that fence up, or a cutover the new leader runs on it reads the source's
// end offsets while the source takes writes again.
func TestFenceDeposedLeaderLiftsNothing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	src := acltest.Cluster(t)
	admCl := acltest.Client(t, src, "admin", "admin-pw")
	adm := kadm.NewClient(admCl)
	acltest.CreateTopics(t, ctx, adm, "orders")
	shared := &testLedger{}
	leader := &Fence{Client: admCl, Owned: shared}
	if err := leader.Fence(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	deposed := &Fence{Client: acltest.Client(t, src, "admin", "admin-pw"), Owned: deposedLedger{shared}}
	if err := deposed.Lift(ctx, "orders"); err == nil {
		t.Error("a deposed leader's Lift succeeded")
	}
	if n := acltest.FenceACLs(t, ctx, adm, "orders"); n != 1 {
		t.Fatalf("a deposed leader's Lift deleted the leader's fence (%d fence ACLs left)", n)
	}
	acltest.WantRefused(t, src, "app", "orders", "after a deposed leader's Lift")
	if got := shared.record("orders"); !slices.Equal(got, []Owned{fenceACL}) {
		t.Errorf("the leader's record: %v", got)
	}
}

func TestDetectFence(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	src := acltest.Cluster(t)
	// A source without an authorizer: Apache Kafka answers DescribeAcls
	// with SECURITY_DISABLED (kfake, which answers it anyway, is told to).
	noAuth, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(noAuth.Close)
	kc := noAuth.Kfake()
	kc.ControlKey(int16(kmsg.DescribeACLs), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		resp := req.ResponseKind().(*kmsg.DescribeACLsResponse)
		resp.Version = req.GetVersion()
		resp.ErrorCode = kerr.SecurityDisabled.Code
		resp.ErrorMessage = kmsg.StringPtr("No Authorizer is configured.")
		return resp, nil, true
	})
	plainCl, err := kgo.NewClient(kgo.SeedBrokers(noAuth.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plainCl.Close)

	for _, tc := range []struct {
		name string
		cl   *kgo.Client
		want string // "acl", "none" or "error"
	}{
		{"authorizer", acltest.Client(t, src, "admin", "admin-pw"), "acl"},
		{"admin may not describe ACLs", acltest.Client(t, src, "other", "other-pw"), "error"},
		{"no authorizer (SECURITY_DISABLED)", plainCl, "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := DetectFence(ctx, tc.cl)
			got := "error"
			switch {
			case err != nil:
			case f != nil:
				got = "acl"
				if f.Client != tc.cl {
					t.Error("the Fence does not use the client it was detected with")
				}
			default:
				got = "none"
			}
			if got != tc.want {
				t.Fatalf("DetectFence = %T, %v; want %s", f, err, tc.want)
			}
			if tc.want == "error" && !errors.Is(err, ErrFence) {
				t.Fatalf("error %v is not ErrFence", err)
			}
		})
	}
}
