package controlplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/migration"
)

// unpositioned starts a control plane (with opts) on which topic, in
// PROXY, has no partition the replicator resumed copying: the replication
// answers Lag with the error the in-process adapter gives then
// (replication's TestAdapterLagUnknownUntilEveryPartitionCopies), until
// release is called, so the time lag stays unknown and the time-lag gate
// refuses.
func unpositioned(t *testing.T, ctx context.Context, topic string, opts ...Opt) (p *plane, release func()) {
	t.Helper()
	r := newMemRepl()
	r.produce(topic, 10)
	p = startMemPlane(t, ctx, NewMemStore(), "", r, opts...)
	if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: topic, State: migration.Proxy}, "test"); err != nil {
		t.Fatal(err)
	}
	r.setLagErr(topic, fmt.Errorf("%w: %s/%d has not resumed copying yet", replication.ErrNotReady, topic, 0))
	return p, func() { r.setLagErr(topic, nil) }
}

// TestGateRefusesAPartitionNotCopyingYet: a partition the replicator has
// not resumed copying (it could not learn the destination's end offset,
// as after a destination restart) has no lag to measure. The gate must
// call the lag unknown and refuse, not read zero and start a cutover that
// can only wait for that partition until it times out.
func TestGateRefusesAPartitionNotCopyingYet(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic = "unpositioned"
	p, release := unpositioned(t, ctx, topic)
	_, err := p.cp.Migrate(ctx, topic, "test")
	if !errors.Is(err, ErrGateRefused) || !strings.Contains(err.Error(), "has not resumed copying yet") {
		t.Fatalf("migrate while no partition is copying: %v; want the gate to refuse with the lag unknown", err)
	}
	for _, want := range []string{"gate time-lag: time lag unknown", "--force=time-lag"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if !RefusedForUnknownLag(err.Error()) {
		t.Errorf("RefusedForUnknownLag(%q) = false: baton rollout wave --wait would not retry it", err)
	}

	release()
	migrateWhenGateOpens(t, ctx, p, topic)
	waitState(t, ctx, p, topic, migration.Complete)
}

// TestGateForcedIsRecorded: an operator may force a migrate past a gate
// that refuses; the cutover starts, and its initiated event says which gate
// was forced past and why, so the audit log shows the risk taken.
func TestGateForcedIsRecorded(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic = "forced"
	// A cutover timeout far above what the copy needs once released: the
	// forced cutover must not roll back however slow the machine is.
	p, release := unpositioned(t, ctx, topic, CutoverTimeout(2*time.Minute))
	if _, err := p.cp.Migrate(ctx, topic, "test", GateHeadroom); !errors.Is(err, ErrGateRefused) {
		t.Fatalf("migrate forced past another gate: %v; want the time-lag gate to refuse", err)
	}
	if _, err := p.cp.Migrate(ctx, topic, "alice", GateTimeLag); err != nil {
		t.Fatalf("migrate forced past the time-lag gate: %v", err)
	}
	evs, err := p.cp.Events(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	var initiated *Event
	for i := range evs {
		if evs[i].Kind == EventInitiated {
			initiated = &evs[i]
		}
	}
	if initiated == nil || initiated.Actor != "alice" || !strings.Contains(initiated.Reason, "forced past gate time-lag: time lag unknown") {
		t.Fatalf("initiated event %+v; want it to record alice forcing past the time-lag gate and why", initiated)
	}
	release()
	waitState(t, ctx, p, topic, migration.Complete)
}

func TestParseForce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   []string
		want []Gate
		bad  bool
	}{
		{in: nil, want: nil},
		{in: []string{"all"}, want: Gates},
		{in: []string{"time-lag", " headroom"}, want: []Gate{GateTimeLag, GateHeadroom}},
		{in: []string{"lag"}, bad: true},
	} {
		got, err := ParseForce(tc.in)
		if tc.bad {
			if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), `"lag"`) {
				t.Errorf("ParseForce(%q) = %v; want ErrBadConfig naming the gate", tc.in, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseForce(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// TestGatesRefuseOpenFindings: an open headroom warning and a principal
// without WRITE on the destination each refuse a topic's cutover, the
// refusal naming the gate, the producer and what to do; a finding on
// another topic refuses nothing; and the refusal is in the event log.
func TestGatesRefuseOpenFindings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cp, err := New(ctx, WithStore(NewMemStore()), WithReplication(idleReplication{}), Logger(quiet),
		Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"t", "other"} {
		// The checks on: agents find nothing otherwise, and a gate does
		// not judge by the findings of a check switched off.
		if _, err := cp.AddTopic(ctx, TopicSpec{Name: topic, State: migration.Proxy,
			Shadow: Shadow{AuthCheck: true, Headroom: true}}, "test"); err != nil {
			t.Fatal(err)
		}
	}
	seen := timestamppb.Now()
	beat := func(fs ...*batonv1.Finding) {
		t.Helper()
		if _, err := cp.Heartbeat(ctx, &batonv1.HeartbeatRequest{NodeId: "a1", AckedVersion: cp.Version(), Findings: fs}); err != nil {
			t.Fatal(err)
		}
	}
	gatesOf := func(topic string) []Gate {
		var gs []Gate
		for _, r := range cp.checkGates(ctx, topic) {
			gs = append(gs, r.gate)
		}
		return gs
	}
	if gs := gatesOf("t"); len(gs) != 0 {
		t.Fatalf("no findings yet, gates %v refuse", gs)
	}
	headroomFinding := &batonv1.Finding{Kind: string(migration.FindingHeadroom), Topic: "t", ClientId: "slow-app",
		Detail: "raise max.in.flight.requests.per.connection", FirstSeen: seen, LastSeen: seen}
	authFinding := &batonv1.Finding{Kind: string(migration.FindingAuthMissing), Topic: "t", Principal: "User:bob",
		Detail: "add ALLOW User:bob WRITE on TOPIC t", FirstSeen: seen, LastSeen: seen}
	beat(headroomFinding, &batonv1.Finding{Kind: string(migration.FindingAuthMissing), Topic: "other", Principal: "User:eve",
		Detail: "add ALLOW User:eve WRITE on TOPIC other", FirstSeen: seen, LastSeen: seen})
	if gs := gatesOf("t"); !slices.Equal(gs, []Gate{GateHeadroom}) {
		t.Errorf("a headroom warning open for t: gates %v refuse, want [headroom]", gs)
	}
	beat(headroomFinding, authFinding)
	if gs := gatesOf("t"); !slices.Equal(gs, []Gate{GateHeadroom, GateDestinationAuth}) {
		t.Errorf("headroom and auth findings open for t: gates %v refuse, want [headroom destination-auth]", gs)
	}

	_, err = cp.Migrate(ctx, "t", "test")
	if !errors.Is(err, ErrGateRefused) {
		t.Fatalf("migrate with findings open: %v, want ErrGateRefused", err)
	}
	for _, want := range []string{"gate headroom: 1 open headroom warning", "client slow-app", "raise max.in.flight",
		"gate destination-auth: 1 principal without WRITE", "User:bob", "add ALLOW User:bob", "--force=time-lag,headroom,destination-auth"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	evs, err := cp.Events(ctx, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(evs, func(e Event) bool { return e.Kind == EventGateRefused }); i < 0 || !strings.Contains(evs[i].Reason, "gate headroom") {
		t.Errorf("no gate_refused event naming the headroom gate in %+v", evs)
	}
}
