package acl

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/baton-kafka/baton/controlplane/acl/acltest"
)

// pausedLedger is a leader's view of the shared fence ledger: its writes
// succeed while it leads; once armed, the next successful write is
// followed by a pause (a GC pause, a frozen VM) until released, and once
// deposed its writes fail with errNotLeader, as its fenced etcd writes do.
type pausedLedger struct {
	shared  *testLedger
	deposed atomic.Bool

	mu      sync.Mutex
	gate    chan struct{}
	entered chan struct{}
}

func (p *pausedLedger) arm() (entered <-chan struct{}, release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gate, p.entered = make(chan struct{}), make(chan struct{})
	gate := p.gate
	var once sync.Once
	return p.entered, func() { once.Do(func() { close(gate) }) }
}

func (p *pausedLedger) GuardACLs(ctx context.Context, topic string) ([]Owned, error) {
	return p.shared.GuardACLs(ctx, topic)
}

func (p *pausedLedger) PutGuardACLs(ctx context.Context, topic string, acls []Owned) error {
	if p.deposed.Load() {
		return errNotLeader
	}
	if err := p.shared.PutGuardACLs(ctx, topic, acls); err != nil {
		return err
	}
	p.mu.Lock()
	gate, entered := p.gate, p.entered
	p.gate, p.entered = nil, nil
	p.mu.Unlock()
	if gate != nil {
		close(entered)
		<-gate // paused right after its write committed
	}
	return nil
}

// The fence's ledger write fences a deposed leader only up to the write:
// a leader that pauses right after its record committed and wakes
// deposed still sends the Kafka ACL call that followed it, which etcd
// cannot fence. design.md §6.1: "A deposed leader fails the record
// (ErrNotLeader) and creates nothing", and "a deposed leader lifts
// nothing its successor put up".
func TestFenceLeaderPausedAfterItsRecord(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	for _, tc := range []pausedCase{
		{
			name:  "a paused lift takes down the successor's fence",
			setup: func(t *testing.T, ctx context.Context, f *Fence) { mustFence(t, ctx, f, topic) },
			old:   func(ctx context.Context, f *Fence) error { return f.Lift(ctx, topic) },
			succ: func(t *testing.T, ctx context.Context, f *Fence) {
				// It rolls the old leader's cutover back (lifts), then cuts
				// over again: its own fence, enforced.
				if err := f.Lift(ctx, topic); err != nil {
					t.Fatal(err)
				}
				mustFence(t, ctx, f, topic)
			},
			check: func(t *testing.T, ctx context.Context, adm *kadm.Client, shared *testLedger, succ *Fence) {
				if ok, behind, err := succ.Enforced(ctx, topic); err != nil || !ok {
					t.Errorf("the successor's fence, mid-cutover, after the deposed leader woke: enforced=%v (%s, %v); "+
						"the source takes writes again while the successor's cutover reads its end offsets", ok, behind, err)
				}
			},
		},
		{
			name: "a paused fence is left up with no record",
			old:  func(ctx context.Context, f *Fence) error { return f.Fence(ctx, topic) },
			succ: func(t *testing.T, ctx context.Context, f *Fence) {
				// It rolls the old leader's cutover back: lifts what the
				// ledger holds (nothing is on the source yet).
				if err := f.Lift(ctx, topic); err != nil {
					t.Fatal(err)
				}
			},
			check: func(t *testing.T, ctx context.Context, adm *kadm.Client, shared *testLedger, succ *Fence) {
				if n, rec := acltest.FenceACLs(t, ctx, adm, topic), shared.record(topic); n > 0 && len(rec) == 0 {
					t.Errorf("%d fence ACLs on the source of a rolled-back (PROXY) topic, and no record of them: "+
						"nobody lifts them, every producer of it is refused", n)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runPaused(t, topic, tc)
		})
	}
}

// pausedCase is one case of TestFenceLeaderPausedAfterItsRecord.
type pausedCase struct {
	name string
	// old is the paused leader's call; succ what its successor does while
	// it sleeps.
	old  func(ctx context.Context, f *Fence) error
	succ func(t *testing.T, ctx context.Context, f *Fence)
	// setup runs with the old leader's fence before it is armed.
	setup func(t *testing.T, ctx context.Context, f *Fence)
	check func(t *testing.T, ctx context.Context, adm *kadm.Client, shared *testLedger, succ *Fence)
}

// runPaused runs tc: the old leader's call paused right after its record,
// deposed meanwhile, its successor acting on topic, then the check.
func runPaused(t *testing.T, topic string, tc pausedCase) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src := acltest.Cluster(t)
	admCl := acltest.Client(t, src, "admin", "admin-pw")
	adm := kadm.NewClient(admCl)
	acltest.CreateTopics(t, ctx, adm, topic)
	shared := &testLedger{}
	oldLed := &pausedLedger{shared: shared}
	const term = 200 * time.Millisecond
	old := &Fence{Client: admCl, Owned: oldLed, Term: term}
	if tc.setup != nil {
		tc.setup(t, ctx, old)
	}
	entered, release := oldLed.arm()
	defer release()
	oldDone := make(chan error, 1)
	go func() { oldDone <- tc.old(ctx, old) }()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the old leader never wrote its record")
	}
	// Asleep past its TTL: deposed; the successor takes over.
	oldLed.deposed.Store(true)
	succ := &Fence{Client: acltest.Client(t, src, "admin", "admin-pw"), Owned: shared}
	tc.succ(t, ctx, succ)
	time.Sleep(2 * term) // the pause outlasts a term, as a successor's election needs it to
	release()
	err := <-oldDone
	t.Logf("the old leader's call returned %v; ledger %v", err, slices.Clone(shared.record(topic)))
	tc.check(t, ctx, adm, shared, succ)
}

func mustFence(t *testing.T, ctx context.Context, f *Fence, topic string) {
	t.Helper()
	if err := f.Fence(ctx, topic); err != nil {
		t.Fatal(err)
	}
	if ok, behind, err := f.Enforced(ctx, topic); err != nil || !ok {
		t.Fatalf("fence not enforced: %v %s %v", ok, behind, err)
	}
}
