package controlplane

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane/acl"
	"github.com/baton-kafka/baton/internal/testlog"
)

// A control plane without a write guard says so once at start, at WARN:
// why there is none, what that leaves unguarded and what to do; with a
// guard it says nothing of the kind.
func TestNoGuardWarnsOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		guard WriteGuard
		want  []string // in the one WARN; none: no such WARN
	}{
		{"no authorizer", NoGuard{}, []string{"no authorizer", "Only the agents keep producers off", "Enable an authorizer"}},
		{"anonymous replicator", NoGuard{Why: acl.AnonymousWhy, Remedy: acl.AnonymousRemedy},
			[]string{"as User:ANONYMOUS", "not write-protected against them", "Only the agents keep producers off",
				"authenticated listener (SASL or mTLS)", "--replicator-principal"}},
		{"a guard", &acl.Guard{Replicator: "User:repl"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			logs := &testlog.Buffer{}
			cp, err := New(context.Background(), WithStore(NewMemStore()), WithReplication(idleReplication{}),
				WithGuard(tc.guard), Logger(slog.New(slog.NewTextHandler(logs, nil))),
				Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"}))
			if err != nil {
				t.Fatal(err)
			}
			cp.Close()
			var warns []string
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "level=WARN") && strings.Contains(l, "write guard protects nothing") {
					warns = append(warns, l)
				}
			}
			if tc.want == nil {
				if len(warns) > 0 {
					t.Fatalf("a control plane with %T warned: %q", tc.guard, warns)
				}
				return
			}
			if len(warns) != 1 {
				t.Fatalf("%d WARNs that the guard protects nothing, want 1; log:\n%s", len(warns), logs)
			}
			for _, w := range tc.want {
				if !strings.Contains(warns[0], w) {
					t.Errorf("the WARN does not say %q: %s", w, warns[0])
				}
			}
		})
	}
}
