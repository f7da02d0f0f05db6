package controlplane

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/migration"
)

// TestGateRefusesAPartitionNotCopyingYet: a partition the replicator has
// not resumed copying (it could not learn the destination's end offset,
// as after a destination restart) has no lag to measure. The gate must
// call the lag unknown and refuse, not read zero and start a cutover that
// can only wait for that partition until it times out.
func TestGateRefusesAPartitionNotCopyingYet(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := startKafka(t, ctx)
	const topic = "unpositioned"
	k.produce(t, ctx, topic, 10)

	// The destination answers no ListOffsets while hold is set: the
	// replicator cannot find where to resume any partition.
	var hold atomic.Bool
	hold.Store(true)
	release := make(chan struct{})
	kc := k.dst.Kfake()
	kc.ControlKey(kmsg.ListOffsets.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if hold.Load() {
			kc.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})

	p := startPlane(t, ctx, t.TempDir(), "", k)
	if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: topic, State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "the replicator set the topic up", func() bool {
		for _, st := range k.repl.R.Status() {
			if st.Topic == topic && st.Ready && len(st.Partitions) > 0 {
				return true
			}
		}
		return false
	})
	_, err := p.cp.Migrate(ctx, topic, "test")
	if !errors.Is(err, ErrGateRefused) || !strings.Contains(err.Error(), "has not resumed copying yet") {
		t.Fatalf("migrate while no partition is copying: %v; want the gate to refuse with the lag unknown", err)
	}

	hold.Store(false)
	close(release)
	migrateWhenGateOpens(t, ctx, p, topic)
	waitState(t, ctx, p, topic, migration.Complete)
}
