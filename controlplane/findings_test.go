package controlplane

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane/shadow"
	"github.com/baton-kafka/baton/migration"
)

// Findings arrive with heartbeats: the first report of a (kind, topic,
// principal) records one event, reports from more agents and later
// heartbeats record none, the finding is in the topic's status, the HTTP
// API and the gauge, OpenFindings filters by kind and recency, and a
// finding no agent reports any more closes after three leases. A restarted
// control plane learns it again from the next heartbeat.
func TestFindingsFromHeartbeats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	st := NewMemStore()
	const lease = 6 * time.Second
	open := func() (*ControlPlane, *prometheus.Registry) {
		reg := prometheus.NewRegistry()
		cp, err := New(ctx, WithStore(st), WithReplication(idleReplication{}), Clock(clock), Logger(quiet),
			LeaseDuration(lease), ForwardDeadline(time.Second), Registry(reg),
			Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"}))
		if err != nil {
			t.Fatal(err)
		}
		return cp, reg
	}
	cp, reg := open()
	if _, err := cp.AddTopic(ctx, TopicSpec{Name: "t", Shadow: Shadow{AuthCheck: true}}, "test"); err != nil {
		t.Fatal(err)
	}
	first := clock()
	bob := func(seen time.Time) *batonv1.Finding {
		return &batonv1.Finding{Kind: string(migration.FindingAuthMissing), Topic: "t", Principal: "User:bob", ClientId: "app",
			Detail: "add ALLOW User:bob WRITE on TOPIC t", FirstSeen: timestamppb.New(first), LastSeen: timestamppb.New(seen)}
	}
	beat := func(cp *ControlPlane, node string, fs ...*batonv1.Finding) {
		t.Helper()
		if _, err := cp.Heartbeat(ctx, &batonv1.HeartbeatRequest{NodeId: node, AckedVersion: cp.Version(), Findings: fs}); err != nil {
			t.Fatal(err)
		}
	}
	findingEvents := func() []Event {
		t.Helper()
		evs, err := cp.Events(ctx, "t", 0)
		if err != nil {
			t.Fatal(err)
		}
		var out []Event
		for _, e := range evs {
			if e.Kind == EventFinding {
				out = append(out, e)
			}
		}
		return out
	}

	beat(cp, "a1", bob(clock()))
	beat(cp, "a2", bob(clock()))
	advance(time.Second)
	beat(cp, "a1", bob(clock()))
	evs := findingEvents()
	if len(evs) != 1 || !strings.Contains(evs[0].Reason, "User:bob") || !strings.Contains(evs[0].Reason, "add ALLOW") || evs[0].Agent != "a1" {
		t.Fatalf("finding events = %+v, want one naming User:bob, the ACL to add and agent a1", evs)
	}
	fs := cp.Shadow().OpenFindings("t", migration.FindingAuthMissing, time.Minute)
	if len(fs) != 1 || len(fs[0].Agents) != 2 || !fs[0].LastSeen.Equal(clock()) {
		t.Fatalf("OpenFindings = %+v, want bob's, seen now by a1 and a2", fs)
	}
	if got := cp.Shadow().OpenFindings("t", migration.FindingHeadroom, 0); len(got) != 0 {
		t.Fatalf("OpenFindings of another kind = %+v, want none", got)
	}
	st1, err := cp.Status("t")
	if err != nil || len(st1.Findings) != 1 {
		t.Fatalf("Status findings = %+v (%v), want bob's", st1.Findings, err)
	}
	srv := httptest.NewServer(newTestAPI(t, cp, ""))
	defer srv.Close()
	var api []shadow.Finding
	findingsGetJSON(t, srv.URL+"/v1/findings?topic=t", &api)
	if len(api) != 1 || api[0].Principal != "User:bob" {
		t.Fatalf("GET /v1/findings = %+v", api)
	}
	if n := openFindingsGauge(t, reg, string(migration.FindingAuthMissing), "t"); n != 1 {
		t.Fatalf("baton_controlplane_open_findings{kind=auth_missing,topic=t} = %v, want 1", n)
	}
	// Still reported, but last seen 9 s ago: open, not within 5 s.
	advance(10 * time.Second)
	beat(cp, "a1", bob(clock().Add(-9*time.Second)))
	if got := cp.Shadow().OpenFindings("t", migration.FindingAuthMissing, 5*time.Second); len(got) != 0 {
		t.Fatalf("OpenFindings within 5 s = %+v, want none (last seen 9 s ago)", got)
	}
	if got := cp.Shadow().OpenFindings("t", migration.FindingAuthMissing, 0); len(got) != 1 {
		t.Fatalf("OpenFindings = %+v, want bob's (still reported)", got)
	}
	// No agent reports it any more: closed after three leases.
	advance(3*lease + time.Second)
	if got := cp.Shadow().OpenFindings("t", "", 0); len(got) != 0 {
		t.Fatalf("OpenFindings after every agent stopped reporting = %+v, want none", got)
	}
	first = clock()
	beat(cp, "a1", bob(clock()))
	if evs := findingEvents(); len(evs) != 2 {
		t.Fatalf("a finding that opens again records one more event; events %+v", evs)
	}

	// A restart forgets them; the next heartbeat brings them back.
	cp.Close()
	advance(time.Second)
	cp, _ = open()
	defer cp.Close()
	if got := cp.Shadow().OpenFindings("t", "", 0); len(got) != 0 {
		t.Fatalf("findings right after a restart = %+v, want none yet", got)
	}
	beat(cp, "a1", bob(clock()))
	if got := cp.Shadow().OpenFindings("t", "", 0); len(got) != 1 {
		t.Fatalf("findings after a restart's first heartbeat = %+v, want bob's", got)
	}
	if evs := findingEvents(); len(evs) != 3 || !strings.Contains(evs[2].Reason, "before the control plane started") {
		t.Fatalf("events after the restart = %+v, want a third saying it was open before the start", evs)
	}
}

func findingsGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b)
}

func findingsGetJSON(t *testing.T, url string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(findingsGet(t, url)), v); err != nil {
		t.Fatal(err)
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
