package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-kafka/baton/agent/internal/upstream"
	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/latency"
	"github.com/baton-kafka/baton/migration"
)

func TestParseRoutes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		yaml    string
		want    []Route
		wantErr string // a substring naming the field
	}{
		{name: "empty file", yaml: "", want: []Route{}},
		{name: "defaults", yaml: "routes:\n  - topic: a\n    state: proxy\n",
			want: []Route{{Topic: "a", State: migration.Proxy, HoldMax: migration.DefaultHoldMax}}},
		{name: "all fields", yaml: "routes:\n  - topic: a\n    state: MIGRATING\n    mode: retriable\n    holdMax: 2s\n",
			want: []Route{{Topic: "a", State: migration.Migrating, Mode: migration.Retriable, HoldMax: 2 * time.Second}}},
		{name: "shadow switches", yaml: "routes:\n  - topic: a\n    state: PROXY\n    latencyEmulation: true\n    destinationLatency: {p50: 40ms, p99: 0.25s}\n    headroom: true\n",
			want: []Route{{Topic: "a", State: migration.Proxy, HoldMax: migration.DefaultHoldMax, LatencyEmulation: true,
				Latency: &latency.Profile{P50: 40 * time.Millisecond, P99: 250 * time.Millisecond}, Headroom: true}}},
		{name: "zero latency", yaml: "routes:\n  - {topic: a, state: PROXY, latencyEmulation: true, destinationLatency: {p50: 0s, p99: 0}}\n",
			want: []Route{{Topic: "a", State: migration.Proxy, HoldMax: migration.DefaultHoldMax, LatencyEmulation: true, Latency: &latency.Profile{}}}},
		{name: "negative p50", yaml: "routes:\n  - {topic: a, state: PROXY, destinationLatency: {p50: -1ms, p99: 1ms}}\n", wantErr: "routes[0].destinationLatency.p50"},
		{name: "negative p99", yaml: "routes:\n  - {topic: a, state: PROXY, destinationLatency: {p50: 1ms, p99: -1ms}}\n", wantErr: "routes[0].destinationLatency.p99"},
		{name: "missing p99", yaml: "routes:\n  - {topic: a, state: PROXY, destinationLatency: {p50: 1ms}}\n", wantErr: "routes[0].destinationLatency.p99"},
		{name: "bad p50", yaml: "routes:\n  - {topic: a, state: PROXY, destinationLatency: {p50: fast, p99: 1ms}}\n", wantErr: "routes[0].destinationLatency.p50"},
		{name: "missing topic", yaml: "routes:\n  - state: PROXY\n", wantErr: "routes[0].topic"},
		{name: "bad state", yaml: "routes:\n  - topic: a\n    state: DONE\n", wantErr: "routes[0].state"},
		{name: "bad mode", yaml: "routes:\n  - topic: a\n    state: PROXY\n    mode: wait\n", wantErr: "routes[0].mode"},
		{name: "bad hold", yaml: "routes:\n  - topic: a\n    state: PROXY\n    holdMax: soon\n", wantErr: "routes[0].holdMax"},
		{name: "duplicate", yaml: "routes:\n  - {topic: a, state: PROXY}\n  - {topic: a, state: REJECT}\n", wantErr: "routes[1].topic"},
		{name: "unknown field", yaml: "routes:\n  - {topic: a, state: PROXY, colour: red}\n", wantErr: "colour"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseRoutes([]byte(tt.yaml))
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrBadRoutes) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				// The profile is a pointer: compare what it points at.
				g, w := got[i], tt.want[i]
				if (g.Latency == nil) != (w.Latency == nil) || g.Latency != nil && *g.Latency != *w.Latency {
					t.Errorf("route %d: latency %v, want %v", i, g.Latency, w.Latency)
				}
				g.Latency, w.Latency = nil, nil
				if g != w {
					t.Errorf("route %d: got %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

// TestRouteFileShadowSwitches: a route file's latency profile and switches
// reach what the latency and headroom filters ask, as a control plane's
// would.
func TestRouteFileShadowSwitches(t *testing.T) {
	t.Parallel()
	routes, err := ParseRoutes([]byte("routes:\n  - {topic: a, state: PROXY, latencyEmulation: true, headroom: true, destinationLatency: {p50: 5ms, p99: 9ms}}\n" +
		"  - {topic: zero, state: PROXY, latencyEmulation: true, headroom: true, destinationLatency: {p50: 0s, p99: 0s}}\n" +
		"  - {topic: off, state: PROXY, destinationLatency: {p50: 5ms, p99: 9ms}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tab := NewRouteTable(routes)
	if p, ok := (emulateTopics{tab}).Emulate("a"); !ok || p != (latency.Profile{P50: 5 * time.Millisecond, P99: 9 * time.Millisecond}) {
		t.Errorf("emulate a: %v %v", p, ok)
	}
	if d, ok := (headroomTopics{tab}).Destination("a"); !ok || d != 5*time.Millisecond {
		t.Errorf("headroom a: %v %v", d, ok)
	}
	// A zero profile is emulated (each response's target is 0: nothing
	// held); headroom has no latency to judge against.
	if p, ok := (emulateTopics{tab}).Emulate("zero"); !ok || p != (latency.Profile{}) {
		t.Errorf("emulate zero: %v %v", p, ok)
	}
	if _, ok := (headroomTopics{tab}).Destination("zero"); ok {
		t.Error("headroom judges zero")
	}
	if _, ok := (emulateTopics{tab}).Emulate("off"); ok {
		t.Error("emulate off: switch off, still emulated")
	}
	if _, ok := (headroomTopics{tab}).Destination("off"); ok {
		t.Error("headroom off: switch off, still judged")
	}
}

func TestRouteTargets(t *testing.T) {
	t.Parallel()
	for st, want := range map[migration.State]filter.Cluster{
		migration.Unmanaged: filter.Source, migration.Reject: filter.Source, migration.Proxy: filter.Source, migration.Migrating: filter.Nowhere, migration.Complete: filter.Destination,
	} {
		if got := (Route{State: st}).Target(); got != want {
			t.Errorf("%s routes to %v, want %v", st, got, want)
		}
	}
}

func TestEpochsNeverGoBackwards(t *testing.T) {
	t.Parallel()
	e := newEpochs(time.Now())
	src, dst := upstream.New(upstream.Config{Name: "s"}), upstream.New(upstream.Config{Name: "d"})
	last := e.get(src, "t", 0, 1, 5)
	steps := []struct {
		up            *upstream.Cluster
		leader, epoch int32
	}{
		{src, 1, 5}, {src, 2, 6}, {dst, 0, 1}, {dst, 0, 0}, {src, 2, 6},
	}
	for i, s := range steps {
		got := e.get(s.up, "t", 0, s.leader, s.epoch)
		if got < last {
			t.Fatalf("step %d: epoch went from %d to %d", i, last, got)
		}
		last = got
	}
	if restarted := newEpochs(time.Now().Add(10*time.Second)).get(src, "t", 0, 1, 5); restarted < last {
		t.Errorf("an agent started 10s later begins at %d, below %d", restarted, last)
	}
}
