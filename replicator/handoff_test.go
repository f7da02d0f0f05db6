package replicator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/replicator"
)

// TestGroupSyncAfterStop: after a cutover stops the copy, the topic's
// groups still read S until they move, so their offsets keep being synced,
// through where the copy stopped (the handoff), by this replicator and by a
// restarted one: D's later writes (the producers moved there) are never
// pointed into, and an offset past the handoff (a producer that bypassed the
// cutover kept writing S) is clamped to it.
func TestGroupSyncAfterStop(t *testing.T) {
	t.Parallel()
	src, dst := startPair(t)
	const topic = "handoff"
	produceMatrix(t, src, topic, 1000)
	sadm, dadm := admin(t, src), admin(t, dst)

	rn := run(t, src, dst, replicator.Topics(topic), replicator.GroupSyncInterval(0))
	waitCaughtUp(t, rn, src, topic)
	final, err := rn.r.Stop(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	stopped := map[int32]int64{}
	for _, p := range final.Partitions {
		stopped[p.Partition] = p.Next
	}

	// The producers write D now.
	pcl, err := kgo.NewClient(kgo.SeedBrokers(dst...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	for i := range 300 {
		if err := pcl.ProduceSync(context.Background(), &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte("after")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	// A consumer still on S reads to S's end.
	commitOn(t, sadm, "late", topic, stopped)
	rep, err := rn.r.SyncGroups(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := committed(t, dadm, "late", topic); fmt.Sprint(got) != fmt.Sprint(stopped) {
		t.Fatalf("after Stop: group on D at %v, want where the copy stopped %v (report %+v)", got, stopped, rep)
	}

	// A producer that bypassed the cutover wrote S past the handoff; a
	// group that read it is clamped to the handoff.
	scl, err := kgo.NewClient(kgo.SeedBrokers(src...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer scl.Close()
	if err := scl.ProduceSync(context.Background(), &kgo.Record{Partition: 0, Value: []byte("bypass")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	past := map[int32]int64{}
	for p, o := range endOffsets(t, sadm, topic) {
		past[p] = o
	}
	commitOn(t, sadm, "bypassed", topic, past)
	rep, err = rn.r.SyncGroups(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Clamped()) == 0 {
		t.Errorf("an offset past the handoff was not reported clamped: %+v", rep)
	}
	if got := committed(t, dadm, "bypassed", topic); fmt.Sprint(got) != fmt.Sprint(stopped) {
		t.Fatalf("group past the handoff on D at %v, want clamped to %v", got, stopped)
	}
	rn.stop(t)

	// A restarted replicator, not copying the topic, keeps syncing it
	// through the handoff it reads from D.
	half := map[int32]int64{}
	for p, o := range stopped {
		half[p] = o / 2
	}
	commitOn(t, sadm, "after-restart", topic, half)
	rn2 := run(t, src, dst, replicator.GroupSyncInterval(100*time.Millisecond))
	defer rn2.stop(t)
	wait.For(t, 30*time.Second, fmt.Sprintf("the restarted replicator to sync the group to %v", half), func() string {
		if got := committed(t, dadm, "after-restart", topic); fmt.Sprint(got) != fmt.Sprint(half) {
			return fmt.Sprintf("group on D at %v", got)
		}
		return ""
	})
}
