package controlplane

import (
	"errors"
	"strings"
	"testing"

	"github.com/baton-kafka/baton/migration"
)

func TestTransitions(t *testing.T) {
	t.Parallel()
	// Every pair of states: legal ones pass, illegal ones name their rule.
	legal := map[[2]migration.State]bool{
		{migration.Unmanaged, migration.Reject}: true, {migration.Unmanaged, migration.Proxy}: true,
		{migration.Reject, migration.Proxy}: true, {migration.Reject, migration.Unmanaged}: true,
		{migration.Proxy, migration.Reject}: true, {migration.Proxy, migration.Migrating}: true, {migration.Proxy, migration.Unmanaged}: true,
		{migration.Migrating, migration.Complete}: true, {migration.Migrating, migration.Proxy}: true,
		{migration.Complete, migration.Unmanaged}: true,
	}
	rules := map[[2]migration.State]Rule{
		{migration.Complete, migration.Proxy}:      RuleCompleteOneWay,
		{migration.Complete, migration.Reject}:     RuleCompleteOneWay,
		{migration.Complete, migration.Migrating}:  RuleCompleteOneWay,
		{migration.Reject, migration.Migrating}:    RuleMigrateFromProxy,
		{migration.Reject, migration.Complete}:     RuleCompleteByCutover,
		{migration.Proxy, migration.Complete}:      RuleCompleteByCutover,
		{migration.Migrating, migration.Reject}:    RuleMigratingExits,
		{migration.Migrating, migration.Unmanaged}: RuleMigratingExits,
		{migration.Unmanaged, migration.Migrating}: RuleAddAsRejectOrProxy,
		{migration.Unmanaged, migration.Complete}:  RuleAddAsRejectOrProxy,
	}
	all := []migration.State{migration.Unmanaged, migration.Reject, migration.Proxy, migration.Migrating, migration.Complete}
	for _, from := range all {
		for _, to := range all {
			name := from.String() + "->" + to.String()
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				err := Transition(from, to)
				if legal[[2]migration.State{from, to}] {
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
					if want, ok = rules[[2]migration.State{from, to}]; !ok {
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
		want migration.State
		ok   bool
	}{{"proxy", migration.Proxy, true}, {"COMPLETE", migration.Complete, true}, {"Reject", migration.Reject, true}, {"done", 0, false}} {
		got, err := migration.ParseState(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParseState(%q) = %v, %v", tc.in, got, err)
		}
	}
}

// TestRefusalSaysWhatIsAllowed: a refused transition names, after its
// rule, what the state it comes from allows.
func TestRefusalSaysWhatIsAllowed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		from, to migration.State
		want     string
	}{
		{migration.Complete, migration.Proxy, "from COMPLETE the state machine allows: removed"},
		{migration.Reject, migration.Migrating, "from REJECT the state machine allows: PROXY, removed"},
		{migration.Proxy, migration.Proxy, "from PROXY the state machine allows: REJECT, MIGRATING, removed"},
		{migration.Migrating, migration.Reject, "from MIGRATING the state machine allows: PROXY, COMPLETE"},
		{migration.Unmanaged, migration.Complete, "a topic not managed the state machine allows: REJECT, PROXY"},
	} {
		err := Transition(tc.from, tc.to)
		if !errors.Is(err, ErrIllegalTransition) || !strings.HasSuffix(err.Error(), tc.want) {
			t.Errorf("%s -> %s: %v; want it to end %q", tc.from, tc.to, err, tc.want)
		}
	}
}
