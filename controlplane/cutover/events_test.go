package cutover

import (
	"testing"
	"time"
)

// toStop drives an attempt with no agents and an unfenced topic to its
// StopReplication, each outcome a success at now.
func toStop(t *testing.T, a *Attempt, now time.Time) {
	t.Helper()
	feed := []Event{Start{}, LeasesRead{}, AgentsRead{}, StepStored{}, PriorityRaised{},
		EndOffsetsRead{Ends: map[int32]int64{0: 1}}, ProgressRead{Progress: map[int32]int64{0: 1}}, StepStored{}}
	var last []Action
	for _, e := range feed {
		last = a.Step(now, e)
	}
	if len(last) != 1 {
		t.Fatalf("after the stop-replication step stored: %#v, want StopReplication", last)
	}
	if _, ok := last[0].(StopReplication); !ok {
		t.Fatalf("after the stop-replication step stored: %#v, want StopReplication", last)
	}
}

// Replication stopped at the end offsets is said (replication_stopped,
// with the final offsets) whether or not the deadline passed meanwhile:
// the operator reads where the copy stopped before the timed_out that
// follows, as the control plane said it before the core.
func TestReplicationStoppedIsSaidPastTheDeadline(t *testing.T) {
	t.Parallel()
	deadline := simStart.Add(10 * time.Second)
	for _, tc := range []struct {
		name     string
		at       time.Time
		rollBack string // Kind, "" for none
	}{
		{"before the deadline", deadline.Add(-time.Second), ""},
		{"past the deadline", deadline, KindTimedOut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := New(Config{Lease: 3 * time.Second, Forward: time.Second}, Spec{Topic: "t", Version: 7, Deadline: deadline})
			toStop(t, a, simStart)
			acts := a.Step(tc.at, ReplicationStopped{Final: map[int32]int64{0: 1}})
			said, rolled := false, ""
			for _, act := range acts {
				switch x := act.(type) {
				case Emit:
					said = said || x.Kind == KindReplStopped
				case RollBack:
					rolled = x.Kind
					if !said {
						t.Errorf("rolled back (%s: %s) before saying replication stopped", x.Kind, x.Reason)
					}
				}
			}
			if !said {
				t.Errorf("actions %#v: no %s event", acts, KindReplStopped)
			}
			if rolled != tc.rollBack {
				t.Errorf("rolled back %q, want %q", rolled, tc.rollBack)
			}
		})
	}
}
