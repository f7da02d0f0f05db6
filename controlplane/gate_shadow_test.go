package controlplane

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/migration"
)

// TestGatesIgnoreFindingsOfASwitchedOffCheck: `baton topic shadow T
// --auth-check=off` is how an operator silences a topic's false auth
// reports (and --headroom=off its headroom warnings). Agents keep an open
// finding up to 10 minutes after a request last met it and send it with
// every heartbeat meanwhile, so the gates must judge by the topic's
// switches now, not refuse for those minutes on findings of a check that
// is off.
func TestGatesIgnoreFindingsOfASwitchedOffCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cp, err := New(ctx, WithStore(NewMemStore()), WithReplication(idleReplication{}), Logger(quiet),
		Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	if _, err := cp.AddTopic(ctx, TopicSpec{Name: "t", State: migration.Proxy,
		Shadow: Shadow{AuthCheck: true, Headroom: true}}, "test"); err != nil {
		t.Fatal(err)
	}
	seen := timestamppb.Now()
	beat := func() {
		t.Helper()
		// What an agent still sends after the switch: its open findings.
		fs := []*batonv1.Finding{
			{Kind: string(migration.FindingAuthMissing), Topic: "t", Principal: "User:bob", Detail: "add ALLOW", FirstSeen: seen, LastSeen: seen},
			{Kind: string(migration.FindingHeadroom), Topic: "t", ClientId: "app", Detail: "raise", FirstSeen: seen, LastSeen: seen},
		}
		if _, err := cp.Heartbeat(ctx, &batonv1.HeartbeatRequest{NodeId: "a1", AckedVersion: cp.Version(), Findings: fs}); err != nil {
			t.Fatal(err)
		}
	}
	gatesOf := func() []Gate {
		var gs []Gate
		for _, r := range cp.checkGates(ctx, "t") {
			gs = append(gs, r.gate)
		}
		return gs
	}
	beat()
	if gs := gatesOf(); !slices.Equal(gs, []Gate{GateHeadroom, GateDestinationAuth}) {
		t.Fatalf("checks on, findings open: gates %v refuse, want [headroom destination-auth]", gs)
	}
	off := false
	if _, err := cp.SetShadow(ctx, "t", ShadowChange{AuthCheck: &off, Headroom: &off}, "test"); err != nil {
		t.Fatal(err)
	}
	beat()
	if gs := gatesOf(); len(gs) != 0 {
		t.Fatalf("auth check and headroom switched off: gates %v still refuse on their findings", gs)
	}
}
