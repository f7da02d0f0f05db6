package shadow

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
)

// TestReportsReachBoundedByTheAgentsClock: how far an agent's reports
// reach is its send time moved to the control plane's clock by the lower
// bound the heartbeats give, whatever the agent's clock says: never past
// the true send time (a heartbeat delivered late claims no more), and
// nothing before the agent's clock is bounded.
func TestReportsReachBoundedByTheAgentsClock(t *testing.T) {
	t.Parallel()
	for _, skew := range []time.Duration{0, time.Hour, -time.Hour, 3 * time.Second} {
		j := newTestJob(t, &fakes{}, 0)
		t0 := time.Unix(10_000, 0) // the control plane's clock
		agentAt := func(cpTime time.Time) *timestamppb.Timestamp { return timestamppb.New(cpTime.Add(-skew)) }
		const oneWay = 5 * time.Millisecond
		through := func() time.Time { return j.byp.reports["pod"].through }

		// The first heartbeat of a process: its clock is not bounded yet.
		j.noteWrites(t0.Add(oneWay), &batonv1.HeartbeatRequest{NodeId: "pod", Incarnation: 7, SentAt: agentAt(t0)}, time.Time{})
		if !through().IsZero() {
			t.Fatalf("skew %v: the first report reaches %v before the agent's clock is bounded", skew, through())
		}
		// Answered at t0+oneWay (server time), received at t0+2*oneWay.
		srv, got := t0.Add(oneWay), agentAt(t0.Add(2*oneWay))
		sent := t0.Add(time.Second)
		j.noteWrites(sent.Add(oneWay), &batonv1.HeartbeatRequest{NodeId: "pod", Incarnation: 7, SentAt: agentAt(sent),
			LastServerTime: timestamppb.New(srv), LastAnsweredAt: got}, time.Time{})
		if r := through(); r.After(sent) || r.Before(sent.Add(-2*oneWay)) {
			t.Errorf("skew %v: the report sent at %v reaches %v, want at most the send time and within a round trip", skew, sent, r)
		}
		// A heartbeat sent at t0+2s delivered 30 s late.
		late := t0.Add(2 * time.Second)
		j.noteWrites(late.Add(30*time.Second), &batonv1.HeartbeatRequest{NodeId: "pod", Incarnation: 7, SentAt: agentAt(late),
			LastServerTime: timestamppb.New(srv), LastAnsweredAt: got}, time.Time{})
		if r := through(); r.After(late) {
			t.Errorf("skew %v: a report sent at %v and delivered 30 s late reaches %v, past its send time", skew, late, r)
		}
		// A truncated report reaches no further.
		before := through()
		trunc := t0.Add(3 * time.Second)
		j.noteWrites(trunc.Add(oneWay), &batonv1.HeartbeatRequest{NodeId: "pod", Incarnation: 7, SentAt: agentAt(trunc),
			LastServerTime: timestamppb.New(srv), LastAnsweredAt: got,
			Topics: []*batonv1.TopicDrain{{Topic: "t", WritesTruncated: true}}}, time.Time{})
		if !through().Equal(before) {
			t.Errorf("skew %v: a truncated report moved the reach from %v to %v", skew, before, through())
		}
		// A new process under the node id: the old one's reach is kept
		// as a replaced writer, the new one starts unbounded.
		j.noteWrites(t0.Add(4*time.Second), &batonv1.HeartbeatRequest{NodeId: "pod", Incarnation: 8, SentAt: agentAt(t0.Add(4 * time.Second))}, t0.Add(6*time.Second))
		if len(j.byp.replaced) != 1 || !j.byp.replaced[0].through.Equal(before) || !j.byp.replaced[0].expires.Equal(t0.Add(6*time.Second)) {
			t.Errorf("skew %v: replaced writers %+v, want one reaching %v, expiring %v", skew, j.byp.replaced, before, t0.Add(6*time.Second))
		}
		if !through().IsZero() {
			t.Errorf("skew %v: the new process reaches %v before its clock is bounded", skew, through())
		}
	}
}

// TestBatchVerdicts: a batch waits for every agent that may have written
// it to report past it; one that never will (replaced) makes it
// unattributable; agents whose lease ended before it are no writers.
func TestBatchVerdicts(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(10_000, 0)
	const f = 2 * time.Second
	r := sourceRead{start: 0, end: 10, after: t0, first: t0.Add(time.Second), last: t0.Add(2 * time.Second)}
	for _, tc := range []struct {
		name    string
		writers []writer
		want    verdict
	}{
		{"no agents", nil, verdictReported},
		{"reported past last+F", []writer{{expires: t0.Add(time.Hour), through: t0.Add(4*time.Second + 1)}}, verdictReported},
		{"reported up to last+F only", []writer{{expires: t0.Add(time.Hour), through: t0.Add(4 * time.Second)}}, verdictWait},
		{"lease ended before it, reported past its end", []writer{{expires: t0.Add(-time.Second), through: t0.Add(time.Second + 1)}}, verdictReported},
		{"lease ended long before it", []writer{{expires: t0.Add(-time.Minute)}}, verdictReported},
		{"lease ended, not reported past it (cut off)", []writer{{expires: t0.Add(-time.Second), through: t0.Add(-2 * time.Second)}}, verdictWait},
		{"replaced before reporting", []writer{{expires: t0.Add(time.Second), through: t0, replaced: true}}, verdictUnknown},
		{"replaced after reporting past it", []writer{{expires: t0.Add(time.Second), through: t0.Add(3*time.Second + 1), replaced: true}}, verdictReported},
		{"one waits, one replaced", []writer{{expires: t0.Add(time.Hour)}, {expires: t0.Add(time.Second), replaced: true}}, verdictUnknown},
	} {
		if got := r.of(tc.writers, r.after, f, 0); got != tc.want {
			t.Errorf("%s: verdict %d, want %d", tc.name, got, tc.want)
		}
	}
}
