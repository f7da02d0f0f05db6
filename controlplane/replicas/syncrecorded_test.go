package replicas

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/migration"
)

// countGate blocks the clock's caller once: the n-th call whose stack
// holds frame, until released.
type countGate struct {
	frame    []byte
	n        int64
	calls    atomic.Int64
	once     sync.Once
	blocked  chan struct{}
	released chan struct{}
}

func newCountGate(frame string, n int64) *countGate {
	return &countGate{frame: []byte(frame), n: n, blocked: make(chan struct{}), released: make(chan struct{})}
}

func (g *countGate) hit() {
	buf := make([]byte, 16<<10)
	if m := runtime.Stack(buf, false); bytes.Contains(buf[:m], g.frame) && g.calls.Add(1) == g.n {
		g.once.Do(func() { close(g.blocked) })
		<-g.released
	}
}

// TestSyncRecordedCoversEveryGrant: the leader's watch of agent records
// starts at the revision New read them at. If more than 1000 revisions of
// records were written in between (etcd's watchBatchMaxRevs), etcd sends
// the catching-up watch its events in batches, each response's header
// revision the store's current one, the later events still to come.
// Records.watch takes that header as "every revision up to it delivered"
// (watched), so Sync returns while a follower's grant that
// committed before it is not taken yet: a drain then would not wait for
// the agent it granted.
func TestSyncRecordedCoversEveryGrant(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := startKafka(t, ctx)
	ls, fs := replicaStores(t, ctx)
	f, _ := startFollower(t, ctx, fs, k, "F")

	const fillers = 1001
	// New's second clock read is right after it read the records; the
	// watch's record number fillers+1 is the follower's grant of "late".
	inNew := newCountGate("controlplane.New(", 2)
	inTake := newCountGate("replicas.takeRecorded(", fillers+1)
	var armed atomic.Bool
	clock := func() time.Time {
		inNew.hit()
		if armed.Load() {
			inTake.hit()
		}
		return time.Now()
	}
	t.Cleanup(func() {
		for _, g := range []*countGate{inNew, inTake} {
			select {
			case <-g.released:
			default:
				close(g.released)
			}
		}
	})
	type started struct {
		cp  *controlplane.ControlPlane
		err error
	}
	newDone := make(chan started, 1)
	recs := NewRecords(ls, quiet)
	go func() {
		cp, err := controlplane.New(ctx, leaderOpts(k, ls, recs, controlplane.ReplicaID("L"), controlplane.Clock(clock))...)
		newDone <- started{cp, err}
	}()
	select {
	case <-inNew.blocked:
	case <-ctx.Done():
		t.Fatal("New never read the clock")
	}
	// Records written after New read them, before its watch starts: other
	// agents' refused reports (a transaction, and a revision, each), then
	// a grant.
	for i := range fillers {
		a := controlplane.Agent{Node: fmt.Sprintf("filler-%d", i), Replica: "F", Refused: "test"}
		if err := fs.RecordReports(ctx, []controlplane.Agent{a}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := f.Heartbeat(ctx, &batonv1.HeartbeatRequest{NodeId: "late", AckedVersion: f.Version()})
	if err != nil || !resp.GetGranted() {
		t.Fatalf("the follower's grant: %v, %v", resp, err)
	}
	lateRev, err := fs.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	close(inNew.released)
	s := <-newDone
	if s.err != nil {
		t.Fatal(s.err)
	}
	cp := s.cp
	t.Cleanup(cp.Close)
	t.Cleanup(func() {
		select {
		case <-inTake.released:
		default:
			close(inTake.released)
		}
	})
	select { // the watch delivers late's grant, and it is not merged yet
	case <-inTake.blocked:
	case <-ctx.Done():
		t.Fatal("the leader's watch never delivered late's grant")
	}
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	err = recs.Sync(sctx)
	recs.mu.Lock()
	seen := recs.watched
	recs.mu.Unlock()
	known := slices.ContainsFunc(cp.Agents(), func(a controlplane.AgentView) bool { return a.Node == "late" })
	if err == nil && !known {
		t.Fatalf("Sync returned (watched %d >= grant's revision %d) while the follower's grant of late, committed before, "+
			"is not taken: the leader does not know late, and a drain would not wait for it", seen, lateRev)
	}
}

// TestSyncRecordedWithAnEventFollower: Records.Sync asks the watch
// stream of its context's metadata for progress; every watch the leader's
// etcd client makes with WithRequireLeader shares that stream, among them
// Follow's (the HTTP API's `baton events --follow`), which starts at the
// revision after the current one. etcd answers a progress request only
// when every watch of the stream is synced and at or past its start
// revision, so while nothing is written the request goes unanswered and
// Sync (a cutover's drain) waits, up to the cutover's deadline.
func TestSyncRecordedWithAnEventFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := startKafka(t, ctx)
	etcd, err := controlplane.OpenEmbedded(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = etcd.Close() })
	ls, err := controlplane.OpenEtcd(ctx, etcd.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	p := startPlaneStore(t, ctx, ls, k, controlplane.ReplicaID("L"))
	// A write the record watch does not deliver (MIGRATING, an event):
	// the watch is idle behind etcd's revision.
	if _, err := p.cp.AddTopic(ctx, controlplane.TopicSpec{Name: "quiet", State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	fctx, fcancel := context.WithCancel(ctx)
	defer fcancel()
	if _, err := p.cp.Follow(fctx, "quiet", 0); err != nil { // an operator follows the events
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	start := time.Now()
	if err := p.records.Sync(sctx); err != nil {
		t.Fatalf("Sync: %v after %v (%d progress requests unanswered): an idle record watch on the stream of an "+
			"events follower is never asked for its progress successfully", err, time.Since(start).Round(time.Millisecond), p.records.syncWaits.Load())
	}
}
