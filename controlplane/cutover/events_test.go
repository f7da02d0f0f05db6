package cutover

import (
	"slices"
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

// Each step's event carries how long that step took, on the clock Step is
// fed: the time since the previous step's event (since Start for the
// first), so the durations of a cutover's steps add up to its length.
func TestStepsCarryTheirDurations(t *testing.T) {
	t.Parallel()
	a := New(Config{Lease: 3 * time.Second, Forward: time.Second, Fenced: true, UnleasedForward: time.Second},
		Spec{Topic: "t", Version: 7, Deadline: simStart.Add(time.Minute), FenceAtCutover: true})
	// Each outcome arrives at its offset from the start.
	feed := []struct {
		after time.Duration
		e     Event
	}{
		{0, Start{}},
		{1 * time.Millisecond, LeasesRead{}},
		{3 * time.Millisecond, AgentsRead{}},                     // drained
		{4 * time.Millisecond, StepStored{}},                     // fence step
		{5 * time.Millisecond, FencePut{}},                       //
		{9 * time.Millisecond, FenceChecked{Enforced: true}},     // source_fenced
		{1009 * time.Millisecond, Slept{}},                       // F
		{1010 * time.Millisecond, StepStored{}},                  // replicate step
		{1011 * time.Millisecond, PriorityRaised{}},              //
		{1015 * time.Millisecond, EndOffsetsRead{Ends: ends(1)}}, // end_offsets
		{1040 * time.Millisecond, ProgressRead{Progress: ends(1)}},
		{1041 * time.Millisecond, StepStored{}},
		{1050 * time.Millisecond, ReplicationStopped{Final: ends(1)}},
		{1052 * time.Millisecond, GuardLifted{}},
	}
	took := map[string]time.Duration{}
	var order []string
	for _, f := range feed {
		for _, act := range a.Step(simStart.Add(f.after), f.e) {
			if e, ok := act.(Emit); ok && e.Took != 0 {
				took[e.Kind] = e.Took
				order = append(order, e.Kind)
			}
		}
	}
	want := map[string]time.Duration{
		KindDrained: 3 * time.Millisecond, KindSourceFenced: 6 * time.Millisecond, KindEndOffsets: 1006 * time.Millisecond,
		KindLagZero: 25 * time.Millisecond, KindReplStopped: 10 * time.Millisecond, KindGuardLifted: 2 * time.Millisecond,
	}
	if !slices.Equal(order, Steps) {
		t.Errorf("steps' events in the order %v, want %v", order, Steps)
	}
	for k, d := range want {
		if took[k] != d {
			t.Errorf("%s took %v, want %v", k, took[k], d)
		}
	}
	if got := a.Took(simStart.Add(1060 * time.Millisecond)); got != 8*time.Millisecond {
		t.Errorf("the step after guard_lifted has taken %v at +1.06 s, want 8ms", got)
	}
}

func ends(n int64) map[int32]int64 { return map[int32]int64{0: n} }
