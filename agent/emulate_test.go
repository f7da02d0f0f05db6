package agent

import (
	"testing"
	"time"

	"github.com/baton-kafka/baton/filter/latency"
	"github.com/baton-kafka/baton/migration"
)

// The latency filter is told to emulate a topic only in PROXY, with the
// route's latency emulation switch on and a measured profile.
func TestEmulateTopics(t *testing.T) {
	t.Parallel()
	prof := &latency.Profile{P50: 200 * time.Millisecond, P99: time.Second}
	cases := []struct {
		name  string
		route Route
		want  bool
	}{
		{"PROXY, on, a profile", Route{State: migration.Proxy, LatencyEmulation: true, Latency: prof}, true},
		{"PROXY, off", Route{State: migration.Proxy, Latency: prof}, false},
		{"PROXY, on, no profile yet", Route{State: migration.Proxy, LatencyEmulation: true}, false},
		{"REJECT", Route{State: migration.Reject, LatencyEmulation: true, Latency: prof}, false},
		{"MIGRATING", Route{State: migration.Migrating, LatencyEmulation: true, Latency: prof}, false},
		{"COMPLETE", Route{State: migration.Complete, LatencyEmulation: true, Latency: prof}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.route.Topic = "orders"
			e := emulateTopics{NewRouteTable([]Route{tc.route})}
			got, ok := e.Emulate("orders")
			if ok != tc.want || (ok && got != *prof) {
				t.Errorf("Emulate = %v, %v; want %v", got, ok, tc.want)
			}
			if _, ok := e.Emulate("unmanaged"); ok {
				t.Error("an unmanaged topic is emulated")
			}
		})
	}
}
