package cutover

import (
	"slices"
	"testing"
	"time"
)

func TestDrain(t *testing.T) {
	t.Parallel()
	now := simStart
	cfg := Config{Lease: 3 * time.Second, Forward: 500 * time.Millisecond}
	drained := Agent{Node: "d", GrantedAt: now.Add(-time.Second), LastHeartbeat: now, AckedVersion: 7, Reported: true, Stopped: true}
	for _, c := range []struct {
		name                      string
		spec                      DrainSpec
		agent                     Agent
		waiting, drained, expired bool
	}{
		{"drained", DrainSpec{Version: 7}, drained, false, true, false},
		{"never leased", DrainSpec{Version: 7}, Agent{Node: "d", AckedVersion: 1}, false, false, false},
		{"below the version", DrainSpec{Version: 8}, drained, true, false, false},
		{"in flight", DrainSpec{Version: 7}, func() Agent { a := drained; a.InFlight = 1; return a }(), true, false, false},
		{"not stopped", DrainSpec{Version: 7}, func() Agent { a := drained; a.Stopped = false; return a }(), true, false, false},
		{"no report", DrainSpec{Version: 7}, func() Agent { a := drained; a.Reported = false; return a }(), true, false, false},
		{"silent past grant + lease + F", DrainSpec{Version: 8},
			func() Agent { a := drained; a.GrantedAt = now.Add(-3500 * time.Millisecond); return a }(), false, false, true},
		{"the route's larger F is waited out", DrainSpec{Version: 8, Forward: time.Second},
			func() Agent { a := drained; a.GrantedAt = now.Add(-3500 * time.Millisecond); return a }(), true, false, false},
		{"fenced: a missed renewal is enough", DrainSpec{Version: 8, Fenced: true},
			func() Agent { a := drained; a.LastHeartbeat = now.Add(-2100 * time.Millisecond); return a }(), false, false, true},
		{"an earlier process may still land", DrainSpec{Version: 7},
			func() Agent { a := drained; a.EarlierGrantedAt = now.Add(-time.Second); return a }(), true, false, false},
		{"an earlier process past its F", DrainSpec{Version: 7},
			func() Agent { a := drained; a.EarlierGrantedAt = now.Add(-4 * time.Second); return a }(), false, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := Drain(now, cfg, c.spec, []Agent{c.agent})
			got := [3]bool{len(p.Waiting) == 1, slices.Contains(p.Drained, c.agent.Node), slices.Contains(p.Expired, c.agent.Node)}
			if want := [3]bool{c.waiting, c.drained, c.expired}; got != want {
				t.Errorf("Drain: waiting, drained, expired = %v, want %v (%s)", got, want, p.Summary())
			}
		})
	}
}

func TestGrantLease(t *testing.T) {
	t.Parallel()
	now, lease := simStart, 3*time.Second
	if l := GrantLease(now, lease, 6, 7, time.Time{}); l.Granted || l.Refused == "" {
		t.Errorf("below the version: %+v, want refused with a reason", l)
	}
	if l := GrantLease(now, lease, 7, 7, time.Time{}); !l.Granted || !l.GrantedAt.Equal(now) || !l.ExpiresAt.Equal(now.Add(lease)) {
		t.Errorf("at the version: %+v, want granted from now", l)
	}
	counted := now.Add(2 * time.Second) // a takeover counts grants up to start + takeover
	if l := GrantLease(now, lease, 7, 7, counted); !l.GrantedAt.Equal(counted) || !l.ExpiresAt.Equal(counted.Add(lease)) {
		t.Errorf("with a later counted grant: %+v, want it counted from %v", l, counted)
	}
	if at, exp, raised := TakeoverGrant(now, 2*time.Second, lease, now.Add(-time.Second)); !raised || !at.Equal(counted) || !exp.Equal(counted.Add(lease)) {
		t.Errorf("TakeoverGrant = %v %v %v, want raised to %v", at, exp, raised, counted)
	}
	later := now.Add(5 * time.Second)
	if at, _, raised := TakeoverGrant(now, 2*time.Second, lease, later); raised || !at.Equal(later) {
		t.Errorf("TakeoverGrant of a later grant = %v %v, want it kept", at, raised)
	}
}

func TestRecover(t *testing.T) {
	t.Parallel()
	now := simStart
	for _, c := range []struct {
		step     Step
		deadline time.Time
		complete bool
	}{
		{StepDone, now.Add(time.Second), true},
		{StepDone, now, false},
		{StepRollingBack, now.Add(time.Second), false},
		{StepStopReplication, now.Add(time.Second), false},
		{StepWaitAgents, now.Add(time.Second), false},
	} {
		if got := Recover(now, c.step, c.deadline); got != c.complete {
			t.Errorf("Recover(step %s, deadline in %v) = %v, want %v", c.step, c.deadline.Sub(now), got, c.complete)
		}
	}
	if !RollBackMarks(StepDone) || RollBackMarks(StepStopReplication) {
		t.Error("RollBackMarks: only a rollback at StepDone marks the attempt first")
	}
}
