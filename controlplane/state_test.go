package controlplane

import (
	"errors"
	"strings"
	"testing"
)

func TestTransitions(t *testing.T) {
	t.Parallel()
	// Every pair of states: legal ones pass, illegal ones name their rule.
	legal := map[[2]State]bool{
		{Removed, Reject}: true, {Removed, Proxy}: true,
		{Reject, Proxy}: true, {Reject, Removed}: true,
		{Proxy, Reject}: true, {Proxy, Migrating}: true, {Proxy, Removed}: true,
		{Migrating, Complete}: true, {Migrating, Proxy}: true,
		{Complete, Removed}: true,
	}
	rules := map[[2]State]Rule{
		{Complete, Proxy}:     RuleCompleteOneWay,
		{Complete, Reject}:    RuleCompleteOneWay,
		{Complete, Migrating}: RuleCompleteOneWay,
		{Reject, Migrating}:   RuleMigrateFromProxy,
		{Reject, Complete}:    RuleCompleteByCutover,
		{Proxy, Complete}:     RuleCompleteByCutover,
		{Migrating, Reject}:   RuleMigratingExits,
		{Migrating, Removed}:  RuleMigratingExits,
		{Removed, Migrating}:  RuleAddAsRejectOrProxy,
		{Removed, Complete}:   RuleAddAsRejectOrProxy,
	}
	all := []State{Removed, Reject, Proxy, Migrating, Complete}
	for _, from := range all {
		for _, to := range all {
			name := from.String() + "->" + to.String()
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				err := Transition(from, to)
				if legal[[2]State{from, to}] {
					if err != nil {
						t.Fatalf("legal transition refused: %v", err)
					}
					return
				}
				if !errors.Is(err, ErrIllegalTransition) {
					t.Fatalf("illegal transition: want ErrIllegalTransition, got %v", err)
				}
				want := RuleNoSelfTransition
				if from != to {
					var ok bool
					if want, ok = rules[[2]State{from, to}]; !ok {
						t.Fatalf("no rule expected for %s; got %v", name, err)
					}
				}
				if !strings.Contains(err.Error(), want.Name) {
					t.Fatalf("error %q does not name rule %q", err, want.Name)
				}
			})
		}
	}
}

func TestParseState(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want State
		ok   bool
	}{{"proxy", Proxy, true}, {"COMPLETE", Complete, true}, {"Reject", Reject, true}, {"done", 0, false}} {
		got, err := ParseState(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParseState(%q) = %v, %v", tc.in, got, err)
		}
	}
}
