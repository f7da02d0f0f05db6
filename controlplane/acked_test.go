package controlplane

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/baton-kafka/baton/migration"
)

// TestCutoverWaitsForRecordsAckedAboveTheHighWatermark: a leader answers
// an acks=1 write before its followers copy it, so a record an agent acked
// can sit above the high watermark the cutover reads. The agents report
// what they acked; the cutover waits until the destination holds that too,
// and does not complete while it does not.
func TestCutoverWaitsForRecordsAckedAboveTheHighWatermark(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newMemRepl()
	const topic, above = "acks-one", 3
	r.produce(topic, 20)
	ends, err := r.SourceEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}

	p := startMemPlane(t, ctx, NewMemStore(), "", r)
	a := startAgent(t, ctx, p.addr, "a")
	// The agent acked three records of partition 0 past what the source's
	// high watermark shows yet: as if its followers had not copied them.
	a.mu.Lock()
	a.acked = map[string]map[int32]int64{topic: {0: ends[0] + above}}
	a.mu.Unlock()
	addAndMigrate(t, ctx, p, topic, a)
	eventually(t, ctx, "the cutover says it waits for the acked records", func() bool {
		for _, l := range eventLines(t, ctx, p, topic) {
			if strings.Contains(l, "above the source high watermark") {
				return true
			}
		}
		return false
	})
	if top, _ := p.cp.Topic(topic); top.State != migration.Migrating {
		t.Fatalf("%s is %s while the destination lacks records an agent acked; want MIGRATING", topic, top.State)
	}

	// The followers catch up: the high watermark reaches the acked records.
	r.produceTo(topic, 0, above)
	waitState(t, ctx, p, topic, migration.Complete)
	// What the copy reached when the cutover stopped it: the destination.
	if got := r.progressOf(topic)[0]; got < ends[0]+above {
		t.Errorf("destination %s/0 ends at %d at COMPLETE; the agent acked up to %d", topic, got, ends[0]+above)
	}
}
