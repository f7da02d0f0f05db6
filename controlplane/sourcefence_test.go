package controlplane

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/baton-kafka/baton/controlplane/acl"
	"github.com/baton-kafka/baton/controlplane/acl/acltest"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
)

// The control plane's source-fence tests run on a kfake source with an
// authorizer (acltest.Cluster) and an acl.Fence recording in etcd.

// allGates forces every gate a cutover may be forced past: the tests'
// direct producer (app) is a forgotten producer to bypass detection.
var allGates = []Gate{GateTimeLag, GateForgottenProducer, GateHeadroom, GateDestinationAuth}

// migrateForced starts a cutover of topic past every gate that can be
// forced, retrying while one that cannot refuses.
func migrateForced(t *testing.T, ctx context.Context, p *plane, topic string) {
	t.Helper()
	eventually(t, ctx, "a cutover of "+topic+" starts", func() bool {
		_, err := p.cp.Migrate(ctx, topic, "test", allGates...)
		if err != nil && !errors.Is(err, ErrGateRefused) {
			t.Fatal(err)
		}
		return err == nil
	})
}

// startFencedKafka is a kafkaEnv whose source has an authorizer
// (acltest.Cluster): the replicator and the end-offset reads are the
// superuser admin's, and prod produces as app, whom the fence stops.
func startFencedKafka(t *testing.T, ctx context.Context, topics ...string) (*kafkaEnv, *kgo.Client) {
	t.Helper()
	src := acltest.Cluster(t)
	dst, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dst.Close)
	admin := plain.Auth{User: "admin", Pass: "admin-pw"}.AsMechanism()
	r, err := replicator.New(replicator.Source(src.Addrs()...), replicator.Destination(dst.Addrs()...),
		replicator.SourceClientOpts(kgo.SASL(admin)),
		replicator.SampleInterval(50*time.Millisecond), replicator.MaxBackoff(200*time.Millisecond), replicator.Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })
	admCl := acltest.Client(t, src, "admin", "admin-pw")
	acltest.CreateTopics(t, ctx, kadm.NewClient(admCl), topics...)
	prod := acltest.Client(t, src, "app", "app-pw")
	return &kafkaEnv{src: src, dst: dst, repl: &replication.ReplicatorAdapter{R: r, Source: kadm.NewClient(admCl)}, prod: prod}, admCl
}

// startFencedPlane is a control plane on an etcd in dir whose source fence
// records in that etcd's fence ledger.
func startFencedPlane(t *testing.T, ctx context.Context, dir string, k *kafkaEnv, admCl *kgo.Client, opts ...Opt) *plane {
	t.Helper()
	st, err := OpenEmbedded(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	return startPlaneStore(t, ctx, st, "", k, append([]Opt{WithSourceFence(&acl.Fence{Client: admCl, Owned: st.FenceLedger()})}, opts...)...)
}

func (a *standIn) sourceFenced(topic string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.routes[topic].GetSourceFenced()
}

func countKind(t *testing.T, ctx context.Context, p *plane, topic, kind string) int {
	t.Helper()
	n := 0
	for _, k := range kinds(t, ctx, p, topic) {
		if k == kind {
			n++
		}
	}
	return n
}

// endOffset sums topic's end offsets on a cluster without SASL.
func endOffset(t *testing.T, ctx context.Context, c *embedded.Cluster, topic string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// With a source fence, a topic's routes say so from AddTopic on, and its
// cutover fences the source after the agents drained and before it reads
// the source's end offsets; COMPLETE keeps the fence up (a producer
// writing the source directly is refused). Without one, nothing of it.
func TestSourceFenceCutover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	t.Parallel()
	for _, tc := range []struct {
		name   string
		fenced bool
	}{
		{"with a source fence", true},
		{"without one", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			const topic = "orders"
			k, admCl := startFencedKafka(t, ctx, topic)
			var p *plane
			if tc.fenced {
				p = startFencedPlane(t, ctx, t.TempDir(), k, admCl)
			} else {
				p = startPlane(t, ctx, t.TempDir(), "", k)
			}
			a := startAgent(t, ctx, p.addr, "a")
			k.produce(t, ctx, topic, 10)
			added, err := p.cp.AddTopic(ctx, TopicSpec{Name: topic}, "test")
			if err != nil {
				t.Fatal(err)
			}
			if added.FenceAtCutover != tc.fenced {
				t.Fatalf("FenceAtCutover = %v, want %v", added.FenceAtCutover, tc.fenced)
			}
			waitLeases(t, ctx, p, a)
			if got := a.sourceFenced(topic); got != tc.fenced {
				t.Fatalf("the agent's route says source_fenced=%v, want %v", got, tc.fenced)
			}
			acltest.WantWrites(t, k.src, "app", topic, "in PROXY")
			migrateForced(t, ctx, p, topic)
			top := waitState(t, ctx, p, topic, migration.Complete)
			if tc.fenced {
				wantEvents(t, ctx, p, topic, EventInitiated, EventDrained, EventSourceFenced, EventEndOffsets,
					EventLagZero, EventReplStopped, EventCompleted)
				if !top.SourceFenceUp {
					t.Error("COMPLETE with SourceFenceUp false")
				}
				acltest.WantRefused(t, k.src, "app", topic, "once COMPLETE")
				if !a.sourceFenced(topic) {
					t.Error("the COMPLETE route dropped source_fenced")
				}
				// Removed and added again: the new PROXY topic's restore
				// lifts the fence its COMPLETE cutover left up.
				if _, err := p.cp.SetState(ctx, topic, migration.Unmanaged, "test"); err != nil {
					t.Fatal(err)
				}
				readded, err := p.cp.AddTopic(ctx, TopicSpec{Name: topic}, "test")
				if err != nil {
					t.Fatal(err)
				}
				if !readded.SourceFenceUp {
					t.Error("re-added with the last cutover's fence up, and SourceFenceUp false: nobody lifts it")
				}
				eventually(t, ctx, "the re-added topic's fence lifted", func() bool { return acltest.CanWrite(t, k.src, "app", topic) == nil })
			} else {
				if n := countKind(t, ctx, p, topic, EventSourceFenced); n != 0 {
					t.Errorf("%d source_fenced events without a fence", n)
				}
				acltest.WantWrites(t, k.src, "app", topic, "once COMPLETE without a fence")
			}
			if n := endOffset(t, ctx, k.dst, topic); n < 10 {
				t.Errorf("the destination holds %d records, want the 10 (or 11) written before the cutover", n)
			}
		})
	}
}

// A cutover rolled back after it fenced the source ends with the fence
// lifted: producers may write the topic on the source again.
func TestSourceFenceLiftedOnRollback(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	t.Parallel()
	for _, tc := range []struct {
		name    string
		opts    []Opt
		abort   bool
		because string
	}{
		{"aborted after source_fenced", nil, true, EventAborted},
		{"timed out after source_fenced", []Opt{CutoverTimeout(4 * time.Second)}, false, EventTimedOut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			const topic = "orders"
			k, admCl := startFencedKafka(t, ctx, topic)
			p := startFencedPlane(t, ctx, t.TempDir(), k, admCl, tc.opts...)
			a := startAgent(t, ctx, p.addr, "a")
			k.produce(t, ctx, topic, 10)
			if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: topic}, "test"); err != nil {
				t.Fatal(err)
			}
			waitLeases(t, ctx, p, a)
			eventually(t, ctx, "replication caught up", func() bool { l, err := k.repl.Lag(topic); return err == nil && l == 0 })
			// Replication stops short of the end offsets: the cutover
			// waits after fencing the source until aborted or timed out.
			if err := k.repl.R.Pause(topic); err != nil {
				t.Fatal(err)
			}
			k.produce(t, ctx, topic, 5)
			migrateForced(t, ctx, p, topic)
			wantEvents(t, ctx, p, topic, EventSourceFenced)
			acltest.WantRefused(t, k.src, "app", topic, "mid-cutover, fenced")
			if tc.abort {
				if got, err := p.cp.Abort(ctx, topic, "operator", "test"); err != nil || got.State != migration.Proxy {
					t.Fatalf("abort: %v, %v", got.State, err)
				}
			}
			waitState(t, ctx, p, topic, migration.Proxy)
			wantEvents(t, ctx, p, topic, EventSourceFenced, tc.because, EventRolledBack, EventSourceFenceLifted)
			wait.For(t, 20*time.Second, "SourceFenceUp cleared", func() string {
				if top, _ := p.cp.Topic(topic); top.SourceFenceUp {
					return "still up"
				}
				return ""
			})
			acltest.WantWrites(t, k.src, "app", topic, "after the rollback")
			if n := acltest.FenceACLs(t, ctx, kadm.NewClient(admCl), topic); n != 0 {
				t.Errorf("%d fence ACLs left after the rollback", n)
			}
			if rec, err := p.store.FenceLedger().GuardACLs(ctx, topic); err != nil || len(rec) != 0 {
				t.Errorf("the fence ledger still holds %v (%v)", rec, err)
			}
			if !a.sourceFenced(topic) {
				t.Error("the rolled-back route dropped source_fenced: agents cut off keep the one they have")
			}
		})
	}
}

// A control plane started without a source fence on a store whose topics'
// routes promised one keeps the promise in the routes and refuses their
// cutover, naming the missing fence; a topic it adds itself promises none.
func TestSourceFenceMissingRefusesMigrate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	k, admCl := startFencedKafka(t, ctx, "promised", "fresh")
	dir := t.TempDir()
	p := startFencedPlane(t, ctx, dir, k, admCl)
	if top, err := p.cp.AddTopic(ctx, TopicSpec{Name: "promised"}, "test"); err != nil || !top.FenceAtCutover {
		t.Fatalf("AddTopic with a fence: %+v, %v", top, err)
	}
	p.stop()

	p = startPlane(t, ctx, dir, "", k) // NoFence
	a := startAgent(t, ctx, p.addr, "a")
	if top, err := p.cp.Topic("promised"); err != nil || !top.FenceAtCutover {
		t.Fatalf("after a restart without a fence: %+v, %v; want FenceAtCutover kept", top, err)
	}
	if top, err := p.cp.AddTopic(ctx, TopicSpec{Name: "fresh"}, "test"); err != nil || top.FenceAtCutover {
		t.Fatalf("AddTopic without a fence: FenceAtCutover %v, %v", top.FenceAtCutover, err)
	}
	waitLeases(t, ctx, p, a)
	if !a.sourceFenced("promised") || a.sourceFenced("fresh") {
		t.Errorf("routes: promised source_fenced=%v, fresh=%v; want true, false", a.sourceFenced("promised"), a.sourceFenced("fresh"))
	}
	eventually(t, ctx, "the gate can measure the lag", func() bool { _, err := k.repl.Lag("promised"); return err == nil })
	// Forcing every gate does not force this: it is no gate's to force.
	_, err := p.cp.Migrate(ctx, "promised", "test", allGates...)
	if !errors.Is(err, ErrGateRefused) || !strings.Contains(err.Error(), "source fence") {
		t.Fatalf("migrate without the promised fence: %v, want ErrGateRefused naming the source fence", err)
	}
	if top, _ := p.cp.Topic("promised"); top.State != migration.Proxy || top.Attempts != 0 {
		t.Errorf("after the refusal: %v, %d attempts", top.State, top.Attempts)
	}
	wantEvents(t, ctx, p, "promised", EventGateRefused)
}

// gatedLedger is a fence ledger whose reads, once armed, wait until
// released: an etcd slow to answer the lift's read of the record.
type gatedLedger struct {
	acl.Ledger
	mu      sync.Mutex
	gate    chan struct{}
	entered chan struct{}
}

func (g *gatedLedger) arm() (entered <-chan struct{}, release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gate := make(chan struct{})
	g.gate, g.entered = gate, make(chan struct{}, 1)
	var once sync.Once
	return g.entered, func() {
		once.Do(func() {
			g.mu.Lock()
			g.gate = nil
			g.mu.Unlock()
			close(gate)
		})
	}
}

func (g *gatedLedger) GuardACLs(ctx context.Context, topic string) ([]acl.Owned, error) {
	g.mu.Lock()
	gate, entered := g.gate, g.entered
	g.mu.Unlock()
	if gate != nil {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.Ledger.GuardACLs(ctx, topic)
}

// The lift of a rolled-back cutover's fence runs in the background (the
// guard restore loop): it must not take down the fence of the next
// cutover, which the operator may start while the lift is on its way (a
// restore that has not failed yet does not hold the gate). Here the lift
// is slow (its read of the fence's record); the next cutover drains its
// agents meanwhile. Its source end offsets are final only if the fence
// stays up through COMPLETE.
func TestSourceFenceNotLiftedUnderTheNextCutover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const topic = "orders"
	k, admCl := startFencedKafka(t, ctx, topic)
	st, err := OpenEmbedded(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	led := &gatedLedger{Ledger: st.FenceLedger()}
	p := startPlaneStore(t, ctx, st, "", k, WithSourceFence(&acl.Fence{Client: admCl, Owned: led}))
	a := startAgent(t, ctx, p.addr, "a")
	k.produce(t, ctx, topic, 10)

	// Attempt 1 fences the source, then is aborted: the lift of its fence
	// is held reading the fence's record.
	fenceInCutover(t, ctx, p, k, topic, a)
	entered, release := led.arm()
	defer release()
	if got, err := p.cp.Abort(ctx, topic, "operator", "test"); err != nil || got.State != migration.Proxy {
		t.Fatalf("abort: %v, %v", got.State, err)
	}
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the lift after the rollback never read the fence's record")
	}

	// Attempt 2 (the rollback restarted replication), while the lift is
	// on its way: either refused (the gate waits for the lift), or started,
	// in which case it drains its agents and may fence the source.
	eventually(t, ctx, "replication caught up again", func() bool { l, err := k.repl.Lag(topic); return err == nil && l == 0 })
	var refusal error
	started := wait.Until(5*time.Second, func() string {
		if _, refusal = p.cp.Migrate(ctx, topic, "test", allGates...); refusal != nil {
			if !errors.Is(refusal, ErrGateRefused) {
				t.Fatal(refusal)
			}
			return refusal.Error()
		}
		return ""
	}) == ""
	if started {
		wait.For(t, 20*time.Second, "attempt 2 drained its agents", func() string {
			if n := countKind(t, ctx, p, topic, EventDrained); n < 2 {
				return fmt.Sprintf("%d drained events", n)
			}
			return ""
		})
		// Let attempt 2 fence the source, if it goes ahead of the lift.
		wait.Until(3*time.Second, func() string {
			if countKind(t, ctx, p, topic, EventSourceFenced) < 2 {
				return "not yet"
			}
			return ""
		})
	} else {
		t.Logf("attempt 2 refused while the lift is on its way: %v", refusal)
	}
	release() // the lift of attempt 1's fence goes on
	if !started {
		migrateForced(t, ctx, p, topic)
	}
	waitState(t, ctx, p, topic, migration.Complete)
	wait.For(t, 20*time.Second, "the restore is done", func() string {
		if _, ok := p.cp.keeper.Pending(topic); ok {
			return "still queued"
		}
		return ""
	})
	wantEvents(t, ctx, p, topic, EventSourceFenced, EventAborted, EventRolledBack, EventDrained, EventSourceFenced,
		EventEndOffsets, EventCompleted)
	if n := acltest.FenceACLs(t, ctx, kadm.NewClient(admCl), topic); n != 1 {
		t.Errorf("COMPLETE with %d fence ACLs on the source: the rollback's lift took down the fence attempt 2 "+
			"read the source's end offsets under; events: %v", n, eventLines(t, ctx, p, topic))
	}
	acltest.WantRefused(t, k.src, "app", topic, "once COMPLETE")
	if top, _ := p.cp.Topic(topic); !top.SourceFenceUp {
		t.Error("COMPLETE with SourceFenceUp false")
	}
}

// failingLedger is a fence ledger whose reads fail while failing is set:
// the lift after a rollback cannot read the fence's record (etcd or the
// source's admin out of reach, as far as the lift goes).
type failingLedger struct {
	acl.Ledger
	failing atomic.Bool
}

func (l *failingLedger) GuardACLs(ctx context.Context, topic string) ([]acl.Owned, error) {
	if l.failing.Load() {
		return nil, errors.New("test: the fence's record cannot be read")
	}
	return l.Ledger.GuardACLs(ctx, topic)
}

// fenceInCutover adds topic (unless the test did) and runs a cutover of it
// until it fenced the source, with replication paused so that the cutover
// stays there.
func fenceInCutover(t *testing.T, ctx context.Context, p *plane, k *kafkaEnv, topic string, a *standIn) {
	t.Helper()
	if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: topic}, "test"); err != nil && !errors.Is(err, ErrTopicExists) {
		t.Fatal(err)
	}
	waitLeases(t, ctx, p, a)
	eventually(t, ctx, "replication caught up", func() bool { l, err := k.repl.Lag(topic); return err == nil && l == 0 })
	if err := k.repl.R.Pause(topic); err != nil {
		t.Fatal(err)
	}
	k.produce(t, ctx, topic, 5)
	migrateForced(t, ctx, p, topic)
	wantEvents(t, ctx, p, topic, EventSourceFenced)
}

// rollBackFenced runs fenceInCutover and aborts the cutover.
func rollBackFenced(t *testing.T, ctx context.Context, p *plane, k *kafkaEnv, topic string, a *standIn) {
	t.Helper()
	fenceInCutover(t, ctx, p, k, topic, a)
	if got, err := p.cp.Abort(ctx, topic, "operator", "test"); err != nil || got.State != migration.Proxy {
		t.Fatalf("abort: %v, %v", got.State, err)
	}
}

// restoreSettled queues topic's restore (the guard loop's resync would)
// and waits until it succeeded.
func restoreSettled(t *testing.T, p *plane, topic string) {
	t.Helper()
	p.cp.keeper.Restore(topic, false)
	wait.For(t, 20*time.Second, topic+"'s restore done", func() string {
		if g, ok := p.cp.keeper.Pending(topic); ok {
			return fmt.Sprintf("queued, %d failures, last %s", g.Failures, g.LastErr)
		}
		return ""
	})
}

// A topic removed while its rolled-back cutover's fence is still up (the
// lift failing so far) and added again is a PROXY topic like any other:
// once the control plane's restores settle, producers write it on the
// source. The removal must not leave the fence behind with nobody to lift
// it (the re-added topic's SourceFenceUp is false, so no restore lifts it,
// and agents answer every produce to it retriable, for good).
func TestSourceFenceNotLeftBehindByRemoval(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const topic = "orders"
	k, admCl := startFencedKafka(t, ctx, topic)
	st, err := OpenEmbedded(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	led := &failingLedger{Ledger: st.FenceLedger()}
	p := startPlaneStore(t, ctx, st, "", k, WithSourceFence(&acl.Fence{Client: admCl, Owned: led}))
	a := startAgent(t, ctx, p.addr, "a")
	k.produce(t, ctx, topic, 10)
	if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: topic}, "test"); err != nil {
		t.Fatal(err)
	}
	led.failing.Store(true) // the rollback's lift cannot read its record
	rollBackFenced(t, ctx, p, k, topic, a)
	wantEvents(t, ctx, p, topic, EventRolledBack, EventGuardRestoreFailed)
	acltest.WantRefused(t, k.src, "app", topic, "while the lift fails")

	_, rmErr := p.cp.SetState(ctx, topic, migration.Unmanaged, "operator")
	led.failing.Store(false)
	if rmErr != nil {
		// Refused while the fence is up: once it is lifted, the removal goes.
		t.Logf("removal refused while fenced: %v", rmErr)
		wait.For(t, 30*time.Second, "the fence lifted", func() string {
			if top, _ := p.cp.Topic(topic); top.SourceFenceUp {
				return "SourceFenceUp"
			}
			return ""
		})
		if _, err := p.cp.SetState(ctx, topic, migration.Unmanaged, "operator"); err != nil {
			t.Fatalf("removal once the fence is lifted: %v", err)
		}
	}
	if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: topic}, "test"); err != nil {
		t.Fatal(err)
	}
	restoreSettled(t, p, topic)
	if n := acltest.FenceACLs(t, ctx, kadm.NewClient(admCl), topic); n != 0 {
		t.Errorf("the re-added PROXY topic is fenced on the source (%d fence ACLs) with nobody to lift it; events: %v",
			n, eventLines(t, ctx, p, topic))
	}
	acltest.WantWrites(t, k.src, "app", topic, "once the re-added topic's restores settled")
}

// Routes that said source_fenced stay with agents cut off from the control
// plane (they forward the topic without a lease up to UnleasedForward),
// so the promise must outlive the topic's removal: a control plane without
// a fence that removes and adds the topic again must still refuse its
// cutover, or a cut-off agent's produce acked by the source after the end
// offsets is lost. The removed event keeps the promise (acl.Keeper.Adding).
func TestSourceFencePromiseOutlivesRemoval(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const topic = "orders"
	k, admCl := startFencedKafka(t, ctx, topic)
	dir := t.TempDir()
	p := startFencedPlane(t, ctx, dir, k, admCl)
	if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: topic}, "test"); err != nil {
		t.Fatal(err)
	}
	p.stop()

	p = startPlane(t, ctx, dir, "", k) // NoFence
	a := startAgent(t, ctx, p.addr, "a")
	if _, err := p.cp.SetState(ctx, topic, migration.Unmanaged, "operator"); err == nil {
		if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: topic}, "operator"); err != nil {
			t.Fatal(err)
		}
	}
	waitLeases(t, ctx, p, a)
	eventually(t, ctx, "the gate can measure the lag", func() bool { _, err := k.repl.Lag(topic); return err == nil })
	_, err := p.cp.Migrate(ctx, topic, "test", allGates...)
	if err == nil {
		_, _ = p.cp.Abort(ctx, topic, "test", "cleanup")
		t.Fatal("a control plane without a source fence started the cutover of a topic whose routes promised one " +
			"(removed and added again): agents cut off still forward it without a lease")
	}
	if !errors.Is(err, ErrGateRefused) {
		t.Fatalf("migrate: %v", err)
	}
}
