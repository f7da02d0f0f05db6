package worker_test

import (
	"context"
	"fmt"
	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/replicator/worker"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/replicator"
)

func waitHolds(t *testing.T, n *node, topic string, p int32, want bool) {
	t.Helper()
	wait.For(t, 30*time.Second, n.id+" holds "+topic, func() string {
		if n.holds(topic, p) != want {
			return "not yet"
		}
		return ""
	})
}

// TestTopicGivenBackAndRegained: a worker that gives back every partition
// of a topic (its share shrank when another worker joined) forgets the
// topic; when a partition comes back, the copy resumes from what D holds,
// not from the worker's old position: nothing lands twice on D.
func TestTopicGivenBackAndRegained(t *testing.T) {
	t.Parallel()
	const x, y = "x", "y"
	e := startEnv(t, x, 1)
	if _, err := e.sadm.CreateTopic(context.Background(), 1, 1, nil, y); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.Start(y); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "y read", func() string {
		if _, err := e.pool.Progress(y); err != nil {
			return err.Error()
		}
		return ""
	})
	// y first in Schedule order: a gives x back when b joins.
	if err := e.pool.SetMigrating(y, true); err != nil {
		t.Fatal(err)
	}
	a := startNode(t, "a", e.pool, e.src, e.dst)
	waitHolds(t, a, x, 0, true)
	waitHolds(t, a, y, 0, true)
	produce(t, e.src, x, 10, "first ")
	e.waitDst(t, x, 0, 10)
	e.settle(t, x, 0)

	b := startNode(t, "b", e.pool, e.src, e.dst)
	waitHolds(t, b, x, 0, true)
	if !a.holds(y, 0) || a.holds(x, 0) {
		t.Fatalf("want a on y only")
	}
	produce(t, e.src, x, 10, "second ")
	e.waitDst(t, x, 0, 20)
	e.settle(t, x, 0)

	b.kill()
	waitHolds(t, a, x, 0, true)
	got := e.settle(t, x, 0)
	rep, err := replicator.Verify(context.Background(), e.src, e.dst, x, replicator.DefaultOffsetMapTopic)
	if err != nil {
		t.Fatal(err)
	}
	if d := diverged(a, x); got != 20 || d != "" || len(rep.Mismatches) > 0 {
		t.Errorf("destination end %d (source 20); verify: %d mismatches (first: %v); a reports diverged: %q",
			got, len(rep.Mismatches), first(rep.Mismatches), d)
	}
}

func topicConfig(t *testing.T, adm *kadm.Client, topic, key string) string {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rc.Configs {
		if c.Key == key && c.Value != nil {
			return *c.Value
		}
	}
	return ""
}

func setConfig(t *testing.T, adm *kadm.Client, topic, key, v string) {
	t.Helper()
	resps, err := adm.AlterTopicConfigs(context.Background(), []kadm.AlterConfig{{Op: kadm.SetConfig, Name: key, Value: &v}}, topic)
	if err == nil {
		var resp kadm.AlterConfigsResponse
		if resp, err = resps.On(topic, nil); err == nil {
			err = resp.Err
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestGivenBackTopicLeftAfterCutover: a worker that gave back every
// partition of a topic no longer manages it, so after the cutover's Stop
// (which asks only the holders) nothing of it is written to D any more:
// the source's configs are not mirrored over what operators set on D.
func TestGivenBackTopicLeftAfterCutover(t *testing.T) {
	t.Parallel()
	const x, y = "x", "y"
	e := startEnv(t, x, 1)
	setConfig(t, e.sadm, x, "retention.ms", "86400000")
	if _, err := e.sadm.CreateTopic(context.Background(), 1, 1, nil, y); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.Start(y); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "y read", func() string {
		if _, err := e.pool.Progress(y); err != nil {
			return err.Error()
		}
		return ""
	})
	if err := e.pool.SetMigrating(y, true); err != nil {
		t.Fatal(err)
	}
	cs := replicator.ConfigSyncInterval(100 * time.Millisecond)
	a := startNode(t, "a", e.pool, e.src, e.dst, cs)
	waitHolds(t, a, x, 0, true)
	waitHolds(t, a, y, 0, true)
	produce(t, e.src, x, 10, "first ")
	e.waitDst(t, x, 0, 10)
	b := startNode(t, "b", e.pool, e.src, e.dst, cs)
	waitHolds(t, b, x, 0, true)

	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := e.pool.Stop(sctx, x); err != nil {
		t.Fatal(err)
	}
	// After the cutover an operator tunes D's copy, which producers now own.
	setConfig(t, e.dadm, x, "retention.ms", "3600000")
	var managed []string
	wait.For(t, 30*time.Second, "no worker managing x after the cutover", func() string {
		managed = managed[:0]
		for _, n := range []*node{a, b} {
			for _, ts := range n.r.Status() {
				managed = append(managed, n.id+":"+ts.Topic)
			}
		}
		if slices.Contains(managed, "a:"+x) || slices.Contains(managed, "b:"+x) {
			return fmt.Sprintf("managed: %v", managed)
		}
		return ""
	})
	if got := topicConfig(t, e.dadm, x, "retention.ms"); got != "3600000" {
		t.Errorf("after a successful Stop, D's retention.ms was reset to %s by a worker still managing %s (a manages %v)", got, x, managed)
	}
}

// failListOffsets makes the destination answer ListOffsets on topic with
// OFFSET_NOT_AVAILABLE (a leader election on D) while on is set, and
// counts the requests it answered so.
func failListOffsets(c *embedded.Cluster, topic string, on *atomic.Bool) *atomic.Int64 {
	var refused atomic.Int64
	c.Kfake().ControlKey(int16(kmsg.ListOffsets), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.Kfake().KeepControl()
		req := kreq.(*kmsg.ListOffsetsRequest)
		if !on.Load() || len(req.Topics) != 1 || req.Topics[0].Topic != topic {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.OffsetNotAvailable.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		refused.Add(1)
		return resp, nil, true
	})
	return &refused
}

// TestTakeoverMapReadError: a failed read of the offset map topic's end
// offset (a transient partition error) during a takeover is an error to
// retry, not an empty map: a mapped partition resumes at the right source
// offset and nothing is copied twice.
func TestTakeoverMapReadError(t *testing.T) {
	t.Parallel()
	const topic = "txn"
	e := startEnv(t, topic, 1)
	var failing atomic.Bool
	refused := failListOffsets(e.dstCluster, replicator.DefaultOffsetMapTopic, &failing)
	a := startNode(t, "a", e.pool, e.src, e.dst)
	waitHolds(t, a, topic, 0, true)
	b := startNode(t, "b", e.pool, e.src, e.dst)
	produceTxns(t, e.src, topic, 3, 10)
	e.waitDst(t, topic, 0, 30)
	e.settle(t, topic, 0)

	failing.Store(true) // D's map topic leader moves while b takes over
	a.kill()
	waitHolds(t, b, topic, 0, true)
	wait.For(t, 30*time.Second, "b's set-up to read the offset map while it fails", func() string {
		if n := refused.Load(); n < 2 {
			return fmt.Sprintf("%d reads refused", n)
		}
		return ""
	})
	failing.Store(false)
	produce(t, e.src, topic, 5, "plain ")
	got := e.settle(t, topic, 0)
	rep, err := replicator.Verify(context.Background(), e.src, e.dst, topic, replicator.DefaultOffsetMapTopic)
	if err != nil {
		t.Fatal(err)
	}
	if got != 35 || len(rep.Mismatches) > 0 {
		t.Errorf("destination holds %d records, want the 35 committed on the source; verify: %d mismatches (first: %v); b diverged: %q",
			got, len(rep.Mismatches), first(rep.Mismatches), diverged(b, topic))
	}
}

// TestStopRefusesARegainedPartitionNotSetUp: a worker that regained a
// partition but has not set it up again (its set-up fails) does not answer
// a Stop with the position it had before the partition moved away, and the
// pool's Stop fails instead of returning it.
func TestStopRefusesARegainedPartitionNotSetUp(t *testing.T) {
	t.Parallel()
	const topic = "x"
	e := startEnv(t, topic, 1)
	var failing atomic.Bool
	failListOffsets(e.dstCluster, topic, &failing)
	a := startNode(t, "a", e.pool, e.src, e.dst)
	waitHolds(t, a, topic, 0, true)
	b := startNode(t, "b", e.pool, e.src, e.dst)
	produce(t, e.src, topic, 10, "first ")
	e.waitDst(t, topic, 0, 10)
	e.settle(t, topic, 0)

	a.link.down.Store(true)
	waitHolds(t, b, topic, 0, true)
	produce(t, e.src, topic, 10, "second ")
	e.waitDst(t, topic, 0, 20)
	e.settle(t, topic, 0)

	failing.Store(true) // a's set-up of the regained partition cannot read D's end
	b.kill()            // a gets the partition once b's lease + flight ran out
	a.link.down.Store(false)
	waitHolds(t, a, topic, 0, true)

	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	final, _, err := e.pool.Stop(sctx, topic)
	failing.Store(false)
	if err == nil && final[0] != 20 {
		t.Errorf("WorkerPool.Stop succeeded with next source offset %d for %s/0; the destination holds source offsets 0..%d (first not copied: 20)",
			final[0], topic, e.end(t, e.dadm, topic, 0)-1)
	}
}

// holdLink is a swLink that can hold one request back (a network that
// delivers it late) and hand it to whichever control plane is current when
// released; the worker has given up on it by then (Unavailable).
type holdLink struct {
	swLink
	hold    atomic.Bool
	held    chan struct{} // closed when a request is being held
	release chan struct{}
}

func (l *holdLink) Work(ctx context.Context, in *batonv1.WorkRequest, o ...grpc.CallOption) (*batonv1.WorkResponse, error) {
	if l.hold.CompareAndSwap(true, false) {
		close(l.held)
		<-l.release
		_, _ = l.pool.Load().Work(context.Background(), in)
		return nil, status.Error(codes.Unavailable, "answer lost (test)")
	}
	return l.swLink.Work(ctx, in, o...)
}

// TestNewLeaderDropsADelayedClaim: a claim that was true when the worker
// sent it but reaches a new leader late (after the old leader gave the
// partition to another worker) holds the partition only while the worker
// keeps claiming it: its next request, which does not, is not leased it
// while the other worker's lease from the old leader runs.
func TestNewLeaderDropsADelayedClaim(t *testing.T) {
	t.Parallel()
	const (
		topic  = "t"
		lease  = 3 * time.Second
		flight = 500 * time.Millisecond
	)
	e := startEnv(t, topic, 1)
	newPool := func() *replication.WorkerPool {
		p, err := replication.NewWorkerPool(e.sadm, lease, flight, 0, slog.Default())
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(topic); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go p.Run(ctx)
		return p
	}
	old := newPool()
	l1 := &holdLink{held: make(chan struct{}), release: make(chan struct{})}
	l1.pool.Store(old)
	w1, err := worker.New("w1", l1, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	w1.Copier = fakeCopier{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w1.Run(ctx) }()
	t.Cleanup(func() { close(l1.release); cancel(); <-done })
	holds := func(w *worker.Worker) bool { _, ok := w.MayWrite(topic, 0); return ok }
	wait.For(t, 30*time.Second, "w1 holds t/0", func() string {
		if !holds(w1) {
			return "not yet"
		}
		return ""
	})
	w2, l2 := startFakeWorker(t, "w2", old)
	l1.hold.Store(true) // w1's next renewal, claiming t/0, is held in the network
	<-l1.held
	wait.For(t, 30*time.Second, "w2 holds t/0", func() string {
		if !holds(w2) {
			return "not yet"
		}
		return ""
	})
	// The old leader dies; w2 has not reached the new one yet.
	cur := newPool()
	l2.down.Store(true)
	l2.pool.Store(cur)
	wait.For(t, 10*time.Second, "the new leader read t's partitions", func() string {
		if _, err := cur.Progress(topic); err != nil {
			return err.Error()
		}
		return ""
	})
	l1.pool.Store(cur)
	l1.release <- struct{}{} // w1's old claim reaches the new leader
	neverBoth(t, w1, w2, topic, "the new leader adopted it for w1 on a claim delivered late, while w2's lease from the old leader runs")
}
