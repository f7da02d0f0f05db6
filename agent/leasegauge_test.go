package agent_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-kafka/baton/internal/wait"
)

// TestLeaseRemainingGauge: baton_agent_lease_remaining_seconds is 0 before
// the control plane grants a lease, between 0 and the lease once granted,
// and 0 again once grants stop and the lease runs out.
func TestLeaseRemainingGauge(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	cp := startTestControlPlane(t, lease, 500*time.Millisecond)
	reg := prometheus.NewRegistry()
	startAgentWithControlPlane(t, cp, reg)
	const name = "baton_agent_lease_remaining_seconds"
	// Heartbeats are answered (refused) before any grant: wait for one.
	wait.For(t, 10*time.Second, "a heartbeat", func() string {
		if cp.lastHeartbeat() == nil {
			return "none yet"
		}
		return ""
	})
	if v := gaugeValue(t, reg, name); v != 0 {
		t.Fatalf("%s = %v before any grant, want 0", name, v)
	}
	cp.grant.Store(true)
	wait.For(t, 10*time.Second, "the lease granted", func() string {
		if v := gaugeValue(t, reg, name); v <= 0 || v > lease.Seconds() {
			return fmt.Sprintf("%s = %v, want in (0, %v]", name, v, lease.Seconds())
		}
		return ""
	})
	cp.grant.Store(false)
	wait.For(t, 10*time.Second, "the lease to run out", func() string {
		if v := gaugeValue(t, reg, name); v != 0 {
			return fmt.Sprintf("%s = %v, want 0", name, v)
		}
		return ""
	})
}
