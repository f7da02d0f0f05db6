package replicator_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/replicator"
)

// heldSet is a PartitionLeases holding the partitions in it, each until
// an hour from now.
type heldSet struct {
	mu   sync.Mutex
	held map[int32]bool
}

func (h *heldSet) MayWrite(_ string, p int32) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return time.Now().Add(time.Hour), h.held[p]
}

func (h *heldSet) set(ps ...int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = map[int32]bool{}
	for _, p := range ps {
		h.held[p] = true
	}
}

// TestLeasesBoundTheCopy runs two replicators with leases on one topic,
// one holding partition 0, the other partition 1, then hands partition 1
// to the first: each copies only what it holds, the copy resumes where the
// other left it, the result has exact parity, and Stop answers for the
// partitions held only, each one's handoff kept under its own key.
func TestLeasesBoundTheCopy(t *testing.T) {
	t.Parallel()
	src, dst := startPair(t)
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(src...), kgo.DefaultProduceTopic("leased"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, nil, "leased"); err != nil {
		t.Fatal(err)
	}
	produce := func(from, n int) {
		for i := from; i < from+n; i++ {
			for p := range int32(2) {
				r := &kgo.Record{Partition: p, Value: []byte(fmt.Sprintf("%d-%d", p, i))}
				if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	produce(0, 100)

	a, b := &heldSet{}, &heldSet{}
	a.set(0)
	b.set(1)
	ra := run(t, src, dst, replicator.Topics("leased"), replicator.Leases(a))
	defer ra.stop(t)
	rb := run(t, src, dst, replicator.Topics("leased"), replicator.Leases(b))
	defer rb.stop(t)

	dcl, err := kgo.NewClient(kgo.SeedBrokers(dst...))
	if err != nil {
		t.Fatal(err)
	}
	defer dcl.Close()
	dends := func() map[int32]int64 {
		out := map[int32]int64{}
		ends, err := kadm.NewClient(dcl).ListEndOffsets(ctx, "leased")
		if err != nil {
			return out
		}
		ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
		return out
	}
	wait.For(t, time.Minute, "both partitions copied", func() string {
		if e := dends(); e[0] != 100 || e[1] != 100 {
			return fmt.Sprint(e)
		}
		return ""
	})
	// a's status of partition 1 is not a copy of its own.
	for _, ps := range topicStatus(ra, "leased").Partitions {
		if ps.Partition == 1 && ps.Next > 0 {
			t.Errorf("a, not holding partition 1, copied it to %d", ps.Next)
		}
	}

	// Partition 1 moves to a; b holds nothing.
	b.set()
	a.set(0, 1)
	produce(100, 50)
	wait.For(t, time.Minute, "a copies partition 1 from where b left it", func() string {
		if e := dends(); e[0] != 150 || e[1] != 150 {
			return fmt.Sprint(e)
		}
		return ""
	})
	requireParity(t, src, dst, "leased", replicator.ParityExact, 300)

	st, err := ra.r.Stop(ctx, "leased")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Partitions) != 2 || st.Partitions[0].Next != 150 || st.Partitions[1].Next != 150 {
		t.Fatalf("a's Stop: %+v, want both partitions at 150", st.Partitions)
	}
	a.set()
	b.set(1) // b answers for partition 1 only, if it holds it
	st, err = rb.r.Stop(ctx, "leased")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Partitions) != 1 || st.Partitions[0].Partition != 1 {
		t.Fatalf("b's Stop: %+v, want partition 1 only", st.Partitions)
	}
}
