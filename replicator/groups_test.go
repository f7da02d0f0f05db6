package replicator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/replicator"
)

func admin(t testing.TB, seeds []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// commitOn commits offsets for group as an admin (generation -1).
func commitOn(t testing.TB, adm *kadm.Client, group, topic string, offsets map[int32]int64) {
	t.Helper()
	os := kadm.Offsets{}
	for p, o := range offsets {
		os.Add(kadm.Offset{Topic: topic, Partition: p, At: o, LeaderEpoch: -1})
	}
	resp, err := adm.CommitOffsets(context.Background(), group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("committing %s: %v", group, err)
	}
}

// committed returns group's committed offsets of topic.
func committed(t testing.TB, adm *kadm.Client, group, topic string) map[int32]int64 {
	t.Helper()
	resp, err := adm.FetchOffsets(context.Background(), group)
	out := map[int32]int64{}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return out
	}
	if err != nil {
		t.Fatal(err)
	}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil {
			out[o.Partition] = o.At
		}
	})
	return out
}

func endOffsets(t testing.TB, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	ends, err := adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

type rec struct {
	offset int64
	value  string
}

// readAll reads n committed records of topic, by partition in offset order.
func readAll(t testing.TB, seeds []string, topic string, n int) map[int32][]rec {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := map[int32][]rec{}
	for got := 0; got < n; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s", got, n, topic)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out[r.Partition] = append(out[r.Partition], rec{r.Offset, string(r.Value)})
			got++
		})
	}
	return out
}

// TestGroupSyncExact: an idle group committed on S appears on D with the
// same offsets, through Run's periodic sync; a group of an unmanaged topic
// does not.
func TestGroupSyncExact(t *testing.T) {
	t.Parallel()
	src, dst := startPair(t)
	produceMatrix(t, src, "exact", 2000)
	produceMatrix(t, src, "other", 100)
	sadm, dadm := admin(t, src), admin(t, dst)
	want := map[int32]int64{}
	for p, e := range endOffsets(t, sadm, "exact") {
		want[p] = e / 2
	}
	want[0] = endOffsets(t, sadm, "exact")[0] // the end itself
	commitOn(t, sadm, "idle", "exact", want)
	commitOn(t, sadm, "unmanaged", "other", map[int32]int64{0: 1})

	rn := run(t, src, dst, replicator.Topics("exact"), replicator.GroupSyncInterval(100*time.Millisecond))
	defer rn.stop(t)
	waitCaughtUp(t, rn, src, "exact")
	wait.For(t, 30*time.Second, fmt.Sprintf("group offsets on D at S's %v", want), func() string {
		if got := committed(t, dadm, "idle", "exact"); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Sprintf("D has %v", got)
		}
		return ""
	})
	if got := committed(t, dadm, "unmanaged", "other"); len(got) != 0 {
		t.Errorf("a group of an unmanaged topic was synced: %v", got)
	}
	// Once in place, a pass commits nothing again.
	rep, err := rn.r.SyncGroups(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Synced) != 0 || rep.Unchanged != len(want) {
		t.Errorf("second pass: %+v, want nothing synced and %d unchanged", rep, len(want))
	}
	// The group made progress on D (its consumers moved): never moved back.
	commitOn(t, dadm, "idle", "exact", map[int32]int64{1: want[1] + 3})
	rep, err = rn.r.SyncGroups(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Synced) != 0 || len(rep.AheadOnD) != 1 || rep.AheadOnD[0].Partition != 1 || rep.AheadOnD[0].Destination != want[1]+3 {
		t.Errorf("after progress on D: %+v, want partition 1 reported ahead and nothing synced", rep)
	}
	if got := committed(t, dadm, "idle", "exact")[1]; got != want[1]+3 {
		t.Errorf("partition 1 on D moved back to %d", got)
	}
}

// TestGroupSyncMapped: on a transactional source (committed and aborted
// transactions, so parity is mapped) the record at a group's committed
// source offset is the record at its translated destination offset.
func TestGroupSyncMapped(t *testing.T) {
	t.Parallel()
	src, dst := startPair(t)
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(src...), kgo.DefaultProduceTopic("txn"), kgo.TransactionalID("tx-groups"),
		kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	n := 0
	for txn := range 9 {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range 12 {
			r := &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("txn %d rec %d", txn, i))}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		commit := txn%3 != 1
		if commit {
			n += 12
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	srcRecs := readAll(t, src, "txn", n)

	// One group per pick: the offset of a record in the middle, the offset
	// just after it (often a marker or aborted data), and the end.
	sadm, dadm := admin(t, src), admin(t, dst)
	ends := endOffsets(t, sadm, "txn")
	picks := map[string]map[int32]int64{"at": {}, "after": {}, "end": {}}
	for p, rs := range srcRecs {
		mid := rs[len(rs)/2].offset
		picks["at"][p], picks["after"][p], picks["end"][p] = mid, mid+1, ends[p]
	}
	for g, os := range picks {
		commitOn(t, sadm, g, "txn", os)
	}

	rn := run(t, src, dst, replicator.Topics("txn"), replicator.GroupSyncInterval(0))
	defer rn.stop(t)
	waitCaughtUp(t, rn, src, "txn")
	requireParity(t, src, dst, "txn", replicator.ParityMapped, n)
	rep, err := rn.r.SyncGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.SkippedActive) != 0 || len(rep.Clamped()) != 0 {
		t.Errorf("report %+v: nothing should be skipped or clamped", rep)
	}
	dstRecs := readAll(t, dst, "txn", n)
	dends := endOffsets(t, dadm, "txn")
	mapped := false
	for g, os := range picks {
		got := committed(t, dadm, g, "txn")
		for p, so := range os {
			do, ok := got[p]
			if !ok {
				t.Errorf("group %s partition %d: not synced", g, p)
				continue
			}
			mapped = mapped || do != so
			// The next record a consumer reads from so on S...
			si := slices.IndexFunc(srcRecs[p], func(r rec) bool { return r.offset >= so })
			if si < 0 {
				if do != dends[p] {
					t.Errorf("group %s partition %d: source %d is past every record, destination %d, want D's end %d", g, p, so, do, dends[p])
				}
				continue
			}
			// ...is the one it reads from do on D.
			di := slices.IndexFunc(dstRecs[p], func(r rec) bool { return r.offset >= do })
			if di < 0 || dstRecs[p][di].offset != do || dstRecs[p][di].value != srcRecs[p][si].value {
				t.Errorf("group %s partition %d: source %d reads %q; destination %d does not", g, p, so, srcRecs[p][si].value, do)
			}
		}
	}
	if !mapped {
		t.Error("no offset was translated: the test source has no gaps")
	}
}

// TestGroupSyncSkipsActive: a group with a live consumer on D is skipped,
// reported and left as it is; an idle one next to it is synced.
func TestGroupSyncSkipsActive(t *testing.T) {
	t.Parallel()
	src, dst := startPair(t)
	produceMatrix(t, src, "busy", 600)
	rn := run(t, src, dst, replicator.Topics("busy"), replicator.GroupSyncInterval(0))
	defer rn.stop(t)
	waitCaughtUp(t, rn, src, "busy")

	dadm := admin(t, dst)
	consumer, err := kgo.NewClient(kgo.SeedBrokers(dst...), kgo.ConsumerGroup("active"), kgo.ConsumeTopics("busy"),
		kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	go func() {
		for {
			if fs := consumer.PollFetches(context.Background()); fs.IsClientClosed() {
				return
			}
		}
	}()
	wait.For(t, 30*time.Second, "the consumer group on D stable with one member", func() string {
		dg, err := dadm.DescribeGroups(context.Background(), "active")
		if err != nil || dg["active"].State != "Stable" || len(dg["active"].Members) != 1 {
			return fmt.Sprintf("%+v %v", dg, err)
		}
		return ""
	})

	sadm := admin(t, src)
	commitOn(t, sadm, "active", "busy", map[int32]int64{0: 3, 1: 4})
	commitOn(t, sadm, "idle", "busy", map[int32]int64{0: 5})
	rep, err := rn.r.SyncGroups(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.SkippedActive, []string{"active"}) {
		t.Errorf("skipped %v, want [active]", rep.SkippedActive)
	}
	if got := committed(t, dadm, "active", "busy"); len(got) != 0 {
		t.Errorf("the active group's offsets on D were changed: %v", got)
	}
	if got := committed(t, dadm, "idle", "busy"); got[0] != 5 {
		t.Errorf("idle group on D: %v, want partition 0 at 5", got)
	}
}

// TestGroupSyncClamps: an offset beyond what the replicator copied is
// clamped to D's end and reported.
func TestGroupSyncClamps(t *testing.T) {
	t.Parallel()
	src, dst := startPair(t)
	ctx := context.Background()
	produceMatrix(t, src, "ahead", 600)
	rn := run(t, src, dst, replicator.Topics("ahead"), replicator.GroupSyncInterval(0))
	defer rn.stop(t)
	waitCaughtUp(t, rn, src, "ahead")
	if err := rn.r.Pause("ahead"); err != nil {
		t.Fatal(err)
	}
	sadm, dadm := admin(t, src), admin(t, dst)
	copied := endOffsets(t, dadm, "ahead")[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(src...), kgo.DefaultProduceTopic("ahead"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 10 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte(fmt.Sprint("late ", i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	srcEnd := endOffsets(t, sadm, "ahead")[0]
	if srcEnd <= copied {
		t.Fatalf("source end %d, copied %d: nothing ahead", srcEnd, copied)
	}
	commitOn(t, sadm, "reader", "ahead", map[int32]int64{0: srcEnd, 1: 1})

	rep, err := rn.r.SyncGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cl0 := rep.Clamped()
	if len(cl0) != 1 || cl0[0].Partition != 0 || cl0[0].Source != srcEnd || cl0[0].Destination != copied {
		t.Errorf("clamped %+v, want partition 0 from %d to %d", cl0, srcEnd, copied)
	}
	got := committed(t, dadm, "reader", "ahead")
	if got[0] != copied || got[1] != 1 {
		t.Errorf("offsets on D %v, want partition 0 at %d and 1 at 1", got, copied)
	}
	if dEnd := endOffsets(t, dadm, "ahead")[0]; got[0] > dEnd {
		t.Errorf("committed %d beyond D's end %d", got[0], dEnd)
	}
}

func TestSyncGroupsNotRunning(t *testing.T) {
	t.Parallel()
	r, err := replicator.New(replicator.Source("s:1"), replicator.Destination("d:1"), replicator.Topics("t"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.SyncGroups(context.Background()); !errors.Is(err, replicator.ErrNotRunning) {
		t.Fatalf("SyncGroups before Run: %v, want ErrNotRunning", err)
	}
}
