package shadow

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/migration"
)

// Findings arrive with heartbeats: the first report of a (kind, topic,
// principal) records one event, reports from more agents and later
// heartbeats record none, the finding is in the gauge, OpenFindings
// filters by kind and recency, and a finding no agent reports any more
// closes after three leases. A new job (a restarted control plane) learns
// it again from the next heartbeat, saying it was open before it started.
func TestFindingsFromHeartbeats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const lease = 6 * time.Second
	f := &fakes{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	j := newTestJob(t, f, lease)
	first := f.clock()
	bob := func(seen time.Time) *batonv1.Finding {
		return &batonv1.Finding{Kind: string(migration.FindingAuthMissing), Topic: "t", Principal: "User:bob", ClientId: "app",
			Detail: "add ALLOW User:bob WRITE on TOPIC t", FirstSeen: timestamppb.New(first), LastSeen: timestamppb.New(seen)}
	}
	beat := func(j *Job, node string, fs ...*batonv1.Finding) {
		j.Heartbeat(ctx, f.clock(), &batonv1.HeartbeatRequest{NodeId: node, Findings: fs}, time.Time{})
	}

	beat(j, "a1", bob(f.clock()))
	beat(j, "a2", bob(f.clock()))
	f.advance(time.Second)
	beat(j, "a1", bob(f.clock()))
	evs := f.eventsOf(EventFinding)
	if len(evs) != 1 || !strings.Contains(evs[0].Reason, "User:bob") || !strings.Contains(evs[0].Reason, "add ALLOW") || evs[0].Agent != "a1" {
		t.Fatalf("finding events = %+v, want one naming User:bob, the ACL to add and agent a1", evs)
	}
	fs := j.OpenFindings("t", migration.FindingAuthMissing, time.Minute)
	if len(fs) != 1 || len(fs[0].Agents) != 2 || !fs[0].LastSeen.Equal(f.clock()) {
		t.Fatalf("OpenFindings = %+v, want bob's, seen now by a1 and a2", fs)
	}
	if got := j.OpenFindings("t", migration.FindingHeadroom, 0); len(got) != 0 {
		t.Fatalf("OpenFindings of another kind = %+v, want none", got)
	}
	if n := openFindingsGauge(t, f.reg, string(migration.FindingAuthMissing), "t"); n != 1 {
		t.Fatalf("baton_controlplane_open_findings{kind=auth_missing,topic=t} = %v, want 1", n)
	}
	// Still reported, but last seen 9 s ago: open, not within 5 s.
	f.advance(10 * time.Second)
	beat(j, "a1", bob(f.clock().Add(-9*time.Second)))
	if got := j.OpenFindings("t", migration.FindingAuthMissing, 5*time.Second); len(got) != 0 {
		t.Fatalf("OpenFindings within 5 s = %+v, want none (last seen 9 s ago)", got)
	}
	if got := j.OpenFindings("t", migration.FindingAuthMissing, 0); len(got) != 1 {
		t.Fatalf("OpenFindings = %+v, want bob's (still reported)", got)
	}
	// No agent reports it any more: closed after three leases.
	f.advance(3*lease + time.Second)
	if got := j.OpenFindings("t", "", 0); len(got) != 0 {
		t.Fatalf("OpenFindings after every agent stopped reporting = %+v, want none", got)
	}
	first = f.clock()
	beat(j, "a1", bob(f.clock()))
	if evs := f.eventsOf(EventFinding); len(evs) != 2 {
		t.Fatalf("a finding that opens again records one more event; events %+v", evs)
	}

	// A new job knows none; the next heartbeat brings them back.
	f.advance(time.Second)
	j = newTestJob(t, f, lease)
	if got := j.OpenFindings("t", "", 0); len(got) != 0 {
		t.Fatalf("findings right after a restart = %+v, want none yet", got)
	}
	beat(j, "a1", bob(f.clock()))
	if got := j.OpenFindings("t", "", 0); len(got) != 1 {
		t.Fatalf("findings after a restart's first heartbeat = %+v, want bob's", got)
	}
	if evs := f.eventsOf(EventFinding); len(evs) != 3 || !strings.Contains(evs[2].Reason, "before the control plane started") {
		t.Fatalf("events after the restart = %+v, want a third saying it was open before the start", evs)
	}
}

// openFindingsGauge reads baton_controlplane_open_findings{kind,topic}.
func openFindingsGauge(t *testing.T, reg *prometheus.Registry, kind, topic string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "baton_controlplane_open_findings" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["kind"] == kind && labels["topic"] == topic {
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}
