package migration_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/migration"
)

func TestStateNamesAndWire(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		state migration.State
		name  string
		wire  batonv1.State
	}{
		{migration.Reject, "REJECT", batonv1.State_STATE_REJECT},
		{migration.Proxy, "PROXY", batonv1.State_STATE_PROXY},
		{migration.Migrating, "MIGRATING", batonv1.State_STATE_MIGRATING},
		{migration.Complete, "COMPLETE", batonv1.State_STATE_COMPLETE},
	} {
		if got := tc.state.String(); got != tc.name {
			t.Errorf("%d.String() = %q, want %q", int(tc.state), got, tc.name)
		}
		for _, in := range []string{tc.name, strings.ToLower(tc.name)} {
			if got, err := migration.ParseState(in); err != nil || got != tc.state {
				t.Errorf("ParseState(%q) = %v, %v", in, got, err)
			}
		}
		if got := tc.state.Proto(); got != tc.wire {
			t.Errorf("%s.Proto() = %v, want %v", tc.state, got, tc.wire)
		}
		if got, err := migration.FromProto(tc.wire); err != nil || got != tc.state {
			t.Errorf("FromProto(%v) = %v, %v", tc.wire, got, err)
		}
		b, err := json.Marshal(struct{ S migration.State }{tc.state})
		if err != nil {
			t.Fatal(err)
		}
		var back struct{ S migration.State }
		if err := json.Unmarshal(b, &back); err != nil || back.S != tc.state {
			t.Errorf("JSON round trip of %s: %s -> %v, %v", tc.state, b, back.S, err)
		}
	}
}

func TestStateRefusals(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"", "UNMANAGED", "removed", "PROXYY", "State(9)"} {
		if st, err := migration.ParseState(in); !errors.Is(err, migration.ErrUnknownState) {
			t.Errorf("ParseState(%q) = %v, %v; want ErrUnknownState", in, st, err)
		}
	}
	for _, w := range []batonv1.State{batonv1.State_STATE_UNSPECIFIED, batonv1.State(42)} {
		if st, err := migration.FromProto(w); !errors.Is(err, migration.ErrUnknownState) {
			t.Errorf("FromProto(%v) = %v, %v; want ErrUnknownState", w, st, err)
		}
	}
	if got := migration.Unmanaged.Proto(); got != batonv1.State_STATE_UNSPECIFIED {
		t.Errorf("Unmanaged.Proto() = %v", got)
	}
	var s migration.State = migration.Proxy
	if err := s.UnmarshalText([]byte("unmanaged")); err != nil || s != migration.Unmanaged {
		t.Errorf("UnmarshalText(unmanaged) = %v, %v", s, err)
	}
}

func TestHoldModes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want migration.HoldMode
		wire batonv1.HoldMode
		err  bool
	}{
		{"", migration.Hold, batonv1.HoldMode_HOLD_MODE_HOLD, false},
		{"hold", migration.Hold, batonv1.HoldMode_HOLD_MODE_HOLD, false},
		{"Retriable", migration.Retriable, batonv1.HoldMode_HOLD_MODE_RETRIABLE, false},
		{"drop", migration.Hold, 0, true},
	} {
		got, err := migration.ParseHoldMode(tc.in)
		if tc.err {
			if !errors.Is(err, migration.ErrUnknownState) {
				t.Errorf("ParseHoldMode(%q) = %v, %v; want ErrUnknownState", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseHoldMode(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if w := got.Proto(); w != tc.wire {
			t.Errorf("%v.Proto() = %v, want %v", got, w, tc.wire)
		}
		if back := migration.HoldModeFromProto(tc.wire); back != tc.want {
			t.Errorf("HoldModeFromProto(%v) = %v, want %v", tc.wire, back, tc.want)
		}
	}
	if got := migration.HoldModeFromProto(batonv1.HoldMode(7)); got != migration.Hold {
		t.Errorf("an unknown wire hold mode reads as %v, want hold", got)
	}
}

func TestKeyOfFinding(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		principal, clientID string
		want                migration.FindingKey
	}{
		{"principal over client id", "User:bob", "app",
			migration.FindingKey{Kind: migration.FindingAuthMissing, Topic: "t", Who: "User:bob"}},
		{"client id without a principal", "", "app",
			migration.FindingKey{Kind: migration.FindingAuthMissing, Topic: "t", Who: "app"}},
		{"neither", "", "", migration.FindingKey{Kind: migration.FindingAuthMissing, Topic: "t"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := migration.KeyOfFinding(migration.FindingAuthMissing, "t", tc.principal, tc.clientID); got != tc.want {
				t.Fatalf("KeyOfFinding(%q, %q) = %+v, want %+v", tc.principal, tc.clientID, got, tc.want)
			}
		})
	}
}
