package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-kafka/baton/agent/internal/upstream"
	"github.com/baton-kafka/baton/filter"
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
				if got[i] != tt.want[i] {
					t.Errorf("route %d: got %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
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
