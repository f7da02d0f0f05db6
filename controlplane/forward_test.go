package controlplane

import (
	"testing"
	"time"
)

// A silent agent is safe only after its lease grant + lease + F, with F the
// larger of the control plane's and the one pushed in the topic's route:
// agents answer a forwarded produce within the route's F.
func TestSilentAgentWaitUsesTheTopicsForwardDeadline(t *testing.T) {
	t.Parallel()
	granted := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const lease, forward = 5 * time.Second, 2 * time.Second
	cases := []struct {
		name     string
		topicF   time.Duration
		at       time.Duration // after the grant
		wantSafe bool
	}{
		{"control plane's F, before", 0, lease + forward - time.Millisecond, false},
		{"control plane's F, after", 0, lease + forward, true},
		{"larger topic F, before", 4 * time.Second, lease + 4*time.Second - time.Millisecond, false},
		{"larger topic F, after", 4 * time.Second, lease + 4*time.Second, true},
		{"smaller topic F keeps the control plane's", time.Second, lease + time.Second, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cp := &ControlPlane{
				cfg:    config{lease: lease, forward: forward},
				now:    func() time.Time { return granted.Add(tc.at) },
				topics: map[string]*Topic{"t": {TopicSpec: TopicSpec{Name: "t", ForwardDeadline: tc.topicF}}},
				agents: map[string]*Agent{"a": {Node: "a", GrantedAt: granted}},
			}
			p := cp.pendingAgents("t", 2)
			if safe := len(p.expired) == 1; safe != tc.wantSafe {
				t.Fatalf("agent counted safe=%v at grant+%v (expired %v, waiting %v), want %v",
					safe, tc.at, p.expired, p.waiting, tc.wantSafe)
			}
		})
	}
}
