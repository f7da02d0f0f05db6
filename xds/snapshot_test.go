package xds

import (
	"testing"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
)

// A node the topic's target leaves out gets neither the shadow switches
// nor the destination latency profile, so a new measurement is no change
// for it (its delta stream is sent nothing).
func TestUntargetedNodeGetsNoLatencyProfile(t *testing.T) {
	t.Parallel()
	route := &batonv1.TopicRoute{Topic: "t", State: batonv1.State_STATE_PROXY, Version: 1,
		Shadow:             &batonv1.ShadowFeatures{LatencyEmulation: true},
		DestinationLatency: &batonv1.LatencyProfile{}}
	res := &Resources{Version: 1, Routes: []*batonv1.TopicRoute{route},
		Targets: map[string]Target{"t": {Namespaces: []string{"team-a"}}}}
	for _, tc := range []struct {
		ns   string
		want bool
	}{{"team-a", true}, {"team-b", false}} {
		got := buildSnapshot(res, "c1", tc.ns, "app").resources[TopicRouteType]["t"].Resource.(*batonv1.TopicRoute)
		if (got.GetShadow() != nil) != tc.want || (got.GetDestinationLatency() != nil) != tc.want {
			t.Errorf("namespace %s gets %v, want shadow and profile: %v", tc.ns, got, tc.want)
		}
	}
}
