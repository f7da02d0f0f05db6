package replication

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
)

// offlinePool is a WorkerPool on a source never asked, started at clk's time, after a leader whose
// takeover margin is takeover, with topic's partitions already read (no
// source is ever asked).
func offlinePool(t *testing.T, lease, flight, takeover time.Duration, clk *poolClock, topic string, partitions int32) *WorkerPool {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	p, err := NewWorkerPool(kadm.NewClient(cl), lease, flight, takeover, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p.now = clk.now
	p.quiet = clk.now().Add(p.quiet.Sub(start)) // the constructor's quiet period, on clk

	if err := p.Start(topic); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	tp := p.topics[topic]
	for i := range partitions {
		tp.parts[i] = &poolPart{}
	}
	tp.partitions = partitions
	p.mu.Unlock()
	return p
}

func holdsIn(resp *batonv1.WorkResponse, topic string, part int32) bool {
	for _, l := range resp.GetLeases() {
		if l.GetTopic() == topic && l.GetPartition() == part {
			return true
		}
	}
	return false
}

// TestWorkerPoolQuietCoversTakeoverMargin: the previous leader may grant
// leases for up to its etcd session's TTL after this one started
// (TakeoverMargin, which agent leases honour too): a new pool gives no
// partition to another worker while a grant the old leader made may run.
func TestWorkerPoolQuietCoversTakeoverMargin(t *testing.T) {
	t.Parallel()
	const (
		lease  = 5 * time.Second // migration.DefaultLease
		flight = 2 * time.Second // migration.DefaultForwardDeadline
	)
	for _, tc := range []struct {
		name string
		ttl  time.Duration // --leader-ttl
	}{
		{"default leader ttl 2s", 2 * time.Second},
		{"leader ttl 10s", 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			t0 := time.Unix(1_000_000, 0)
			oldClk, newClk := &poolClock{t: t0.Add(-time.Hour)}, &poolClock{t: t0}
			old := offlinePool(t, lease, flight, 0, oldClk, "t", 1)
			cur := offlinePool(t, lease, flight, tc.ttl, newClk, "t", 1) // elected at t0 (cmd/baton: the margin is the leader TTL)
			ctx := context.Background()

			// w1 holds t/0 from the old leader and renews with it every
			// lease/3 until the old leader stops, ttl after t0.
			var last time.Time
			for at := t0.Add(-time.Minute); !at.After(t0.Add(tc.ttl)); at = at.Add(lease / 3) {
				oldClk.set(at)
				resp, err := old.Work(ctx, &batonv1.WorkRequest{NodeId: "w1", Incarnation: 1})
				if err != nil {
					t.Fatal(err)
				}
				if holdsIn(resp, "t", 0) {
					last = at
				}
			}
			// The pool's rule is nobody else before w1's lease end + flight;
			// checked here is the weaker bound, w1's lease end (the writes
			// it sent up to lease - flight may land until then).
			safe := last.Add(lease)

			// w2 only reaches the new leader.
			for at := t0; at.Before(safe.Add(time.Minute)); at = at.Add(lease / 3) {
				newClk.set(at)
				resp, err := cur.Work(ctx, &batonv1.WorkRequest{NodeId: "w2", Incarnation: 2})
				if err != nil {
					t.Fatal(err)
				}
				if holdsIn(resp, "t", 0) {
					if at.Before(safe) {
						t.Errorf("new leader granted t/0 to w2 at t0+%v; the old leader's last grant to w1 was at t0+%v: w1's lease runs to t0+%v, w1 may send until t0+%v",
							at.Sub(t0), last.Sub(t0), safe.Sub(t0), last.Add(lease-flight).Sub(t0))
					}
					return
				}
			}
			t.Fatal("w2 never got t/0")
		})
	}
}

// TestWorkerPoolStopAnswerSentAgain: a worker sends its stop answer again
// with every request until a response stops asking (its response to the
// first may be lost: a client timeout after the server applied it); the
// answer's recent batches count once.
func TestWorkerPoolStopAnswerSentAgain(t *testing.T) {
	t.Parallel()
	const lease, flight = 3 * time.Second, time.Second
	clk := &poolClock{t: time.Unix(1_000_000, 0)}
	p := offlinePool(t, lease, flight, 0, clk, "t", 2)
	ctx := context.Background()
	start := clk.now()
	clk.set(start.Add(time.Second))
	for _, id := range []string{"w1", "w2"} { // both join in the quiet time
		if _, err := p.Work(ctx, &batonv1.WorkRequest{NodeId: id, Incarnation: 1}); err != nil {
			t.Fatal(err)
		}
	}
	clk.set(start.Add(lease + flight)) // the quiet time ends, the workers' leases run
	held := map[string][]int32{}
	for _, id := range []string{"w1", "w2"} {
		resp, err := p.Work(ctx, &batonv1.WorkRequest{NodeId: id, Incarnation: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range resp.GetLeases() {
			held[id] = append(held[id], l.GetPartition())
		}
	}
	if len(held["w1"]) != 1 || len(held["w2"]) != 1 {
		t.Fatalf("leases %v", held)
	}
	type result struct {
		recent int
		err    error
	}
	done := make(chan result, 1)
	go func() {
		_, recent, err := p.Stop(ctx, "t")
		done <- result{len(recent), err}
	}()
	stopID := askedToStop(t, p, "w1", nil)
	answer := func(id string) *batonv1.StoppedTopic {
		part := held[id][0]
		return &batonv1.StoppedTopic{Topic: "t", StopId: stopID,
			Partitions: []*batonv1.CopyState{{Topic: "t", Partition: part, Next: 10, DestinationEnd: 10}},
			Recent:     []*batonv1.SourceBatch{{Partition: part, ProducerId: 7, BaseSequence: 0, Records: 1, Offset: 9}}}
	}
	// w1's answer, then the same again (the first response was lost), then w2's.
	for _, id := range []string{"w1", "w1", "w2"} {
		if _, err := p.Work(ctx, &batonv1.WorkRequest{NodeId: id, Incarnation: 1, Stopped: []*batonv1.StoppedTopic{answer(id)}}); err != nil {
			t.Fatal(err)
		}
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.recent != 2 {
		t.Errorf("Stop returned %d recent batches; the two workers answered one each", r.recent)
	}
}
