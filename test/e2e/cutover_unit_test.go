package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/baton-kafka/baton/internal/recordbatch"
	"github.com/baton-kafka/baton/test/clients"
)

// The cutover log line names how long COMPLETE came after MIGRATING; a
// case whose producer ended before COMPLETE has no COMPLETE time, and
// subtracting the zero time printed -2562047h.
func TestDescribeLater(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		name        string
		first, then time.Time
		want        string
	}{
		{"both", at, at.Add(1500 * time.Millisecond), "1.5s later"},
		{"no COMPLETE", at, time.Time{}, "never"},
		{"no MIGRATING", time.Time{}, at, "without MIGRATING"},
		{"neither", time.Time{}, time.Time{}, "never"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := describeLater(c.first, c.then); got != c.want {
				t.Errorf("describeLater(%v, %v) = %q, want %q", c.first, c.then, got, c.want)
			}
		})
	}
}

// A source-offset success for a request received after MIGRATING is a
// write past the cutover, unless it answers the retry of an idempotent
// batch the agent answered retriable before MIGRATING: filter/pidmap
// answers that retry with where the source holds the batch. The check must
// tell the two apart, so that a loaded source slower than the forward
// deadline is not taken for a second writer, while a real one still is.
func TestCheckCutoverRetryOfUncertainBatch(t *testing.T) {
	t.Parallel()
	migratingAt := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	completeAt := migratingAt.Add(100 * time.Millisecond)
	cfg := clients.ProduceConfig{Records: 2, KeyPrefix: "k", Idempotent: true}
	acks := []clients.Ack{
		{Seq: 0, Key: clients.Key("k", 0), Partition: 1, Offset: 33},
		{Seq: 1, Key: clients.Key("k", 1), Partition: 1, Offset: fillPerPartition},
	}
	src := map[clients.Position]string{{Partition: 1, Offset: 33}: clients.Key("k", 0)}
	dst := map[clients.Position]string{{Partition: 1, Offset: fillPerPartition}: clients.Key("k", 1)}
	session := recordbatch.Producer{ID: 7, Epoch: 0, BaseSeq: 33}
	other := recordbatch.Producer{ID: 7, Epoch: 0, BaseSeq: 34}
	uncertainBefore := partAnswer{partition: 1, code: 6, baseOffset: -1, pre: true,
		received: migratingAt.Add(-time.Second), answered: migratingAt.Add(-time.Millisecond), batch: session, idempotent: true}
	ackedBefore := uncertainBefore
	ackedBefore.code, ackedBefore.baseOffset = 0, 33
	toDestination := partAnswer{partition: 1, baseOffset: fillPerPartition, received: migratingAt.Add(10 * time.Millisecond),
		answered: completeAt.Add(time.Millisecond), batch: other, idempotent: true}
	retry := func(b recordbatch.Producer) partAnswer {
		return partAnswer{partition: 1, baseOffset: 33, received: migratingAt.Add(482 * time.Millisecond),
			answered: completeAt.Add(time.Millisecond), batch: b, idempotent: true}
	}
	for _, c := range []struct {
		name    string
		answers []partAnswer
		errs    map[int32]int
		want    string // a problem's text, or "" for none
	}{
		{"retry of the uncertain batch, answered from the source", []partAnswer{uncertainBefore, retry(session), toDestination}, map[int32]int{1: 1}, ""},
		{"another batch written to the source after MIGRATING", []partAnswer{uncertainBefore, retry(other), toDestination}, map[int32]int{1: 1}, "after MIGRATING was written to the source"},
		{"a batch acked before, sent again after MIGRATING", []partAnswer{ackedBefore, retry(session), toDestination}, map[int32]int{}, "after MIGRATING was written to the source"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := checkCutover(acks, cfg, src, dst, c.answers, c.errs, migratingAt, completeAt, true)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("checkCutover: %v, want no problem", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("checkCutover: %v, want a problem saying %q", err, c.want)
			}
		})
	}
}
