package controlplane

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/replicator"
)

// idleReplication copies nothing: the heartbeat path never calls it.
type idleReplication struct{}

func (idleReplication) Start(string) error { return nil }
func (idleReplication) Stop(context.Context, string) (map[int32]int64, []replicator.SourceBatch, error) {
	return map[int32]int64{}, nil, nil
}
func (idleReplication) SetMigrating(string, bool) error          { return nil }
func (idleReplication) Lag(string) (time.Duration, error)        { return 0, replication.ErrNotReady }
func (idleReplication) Progress(string) (map[int32]int64, error) { return nil, replication.ErrNotReady }
func (idleReplication) SourceEndOffsets(context.Context, string) (map[int32]int64, error) {
	return nil, replication.ErrNotReady
}

// caughtUp is a replication whose every topic is caught up, so that the
// cutover gate opens at once.
type caughtUp struct{ idleReplication }

func (caughtUp) Lag(string) (time.Duration, error) { return 0, nil }

// FuzzHeartbeat feeds arbitrary TopicDrain reports to the lease service:
// an agent counts as drained of a topic only if every entry its report
// has for the topic says it stopped forwarding with nothing in flight.
func FuzzHeartbeat(f *testing.F) {
	f.Add([]byte{0, 1, 0, 1, 0, 0})
	f.Add([]byte{2, 0, 5, 1, 1, 0})
	ctx := context.Background()
	cp, err := New(ctx, WithStore(NewMemStore()), WithReplication(idleReplication{}), Logger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"}))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(cp.Close)
	topics := []string{"a", "b", "c"}
	f.Fuzz(func(t *testing.T, b []byte) {
		// Per entry: topic, in-flight, stopped.
		var drains []*batonv1.TopicDrain
		for ; len(b) >= 3; b = b[3:] {
			drains = append(drains, &batonv1.TopicDrain{Topic: topics[int(b[0])%len(topics)], InFlight: uint32(b[1] % 3), StoppedForwarding: b[2]%2 == 1})
		}
		if _, err := cp.Heartbeat(ctx, &batonv1.HeartbeatRequest{NodeId: "fuzz", AckedVersion: cp.Version(), Topics: drains}); err != nil {
			t.Fatal(err)
		}
		for _, topic := range topics {
			if !slices.Contains(cp.pendingAgents(topic, 0).Drained, "fuzz") {
				continue
			}
			seen := false
			for _, d := range drains {
				if d.GetTopic() != topic {
					continue
				}
				seen = true
				if !d.GetStoppedForwarding() || d.GetInFlight() > 0 {
					t.Fatalf("drained of %s although the report says stopped=%v in_flight=%d: %v", topic, d.GetStoppedForwarding(), d.GetInFlight(), drains)
				}
			}
			if !seen {
				t.Fatalf("drained of %s with no report for it", topic)
			}
		}
	})
}

func (idleReplication) Diverged(string) map[int32]string { return nil }
