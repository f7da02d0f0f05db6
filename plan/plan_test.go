package plan

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// header is the start every plan of these tests shares (lines 1 to 5).
const header = `apiVersion: baton.io/v1
kind: MigrationPlan
clusters:
  source: [s:9092]
  destination: [d:9092]
`

// TestDecodeRefusesBadPlans: every bad field is refused with the file,
// its line and its path, and says what it wants.
func TestDecodeRefusesBadPlans(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, plan string
		want       []string
	}{
		{"mode", header + "topics:\n  - name: a\n    state: proxy\n  - name: b\n    state: proxy\n  - name: c\n    state: proxy\n    mode: fast\n",
			[]string{`plan.yaml:13: topics[2].mode: "fast" is not one of hold, retriable`}},
		{"unknown top field", header + "topic:\n  - name: a\n",
			[]string{"plan.yaml:6: topic: unknown field (the plan has: apiVersion, clusters, defaults, kind, topics, waves)",
				"plan.yaml:1: topics: required"}},
		{"unknown topic field", header + "topics:\n  - name: a\n    state: proxy\n    holdmax: 5s\n",
			[]string{"plan.yaml:9: topics[0].holdmax: unknown field (topics[0] has: ", "holdMax"}},
		{"apiVersion", strings.Replace(header, "baton.io/v1", "baton.io/v2", 1) + "topics:\n  - name: a\n    state: proxy\n",
			[]string{`plan.yaml:1: apiVersion: "baton.io/v2" is not one of baton.io/v1`}},
		{"kind", strings.Replace(header, "MigrationPlan", "Plan", 1) + "topics:\n  - name: a\n    state: proxy\n",
			[]string{`plan.yaml:2: kind: "Plan" is not one of MigrationPlan`}},
		{"no clusters", "apiVersion: baton.io/v1\nkind: MigrationPlan\ntopics:\n  - name: a\n    state: proxy\n",
			[]string{"plan.yaml:1: clusters: required"}},
		{"bad bootstrap", strings.Replace(header, "[s:9092]", "[s]", 1) + "topics:\n  - name: a\n    state: proxy\n",
			[]string{`plan.yaml:4: clusters.source: "s": want host:port`}},
		{"bootstrap port", strings.Replace(header, "[d:9092]", "d:0", 1) + "topics:\n  - name: a\n    state: proxy\n",
			[]string{`plan.yaml:5: clusters.destination: "d:0": want host:port, a host and a port from 1 to 65535`}},
		{"state", header + "topics:\n  - name: a\n    state: migrating\n",
			[]string{`plan.yaml:8: topics[0].state: "migrating" is not one of reject, proxy, complete`}},
		{"no state", header + "topics:\n  - name: a\n",
			[]string{"plan.yaml:7: topics[0].state: required"}},
		{"no name", header + "topics:\n  - state: proxy\n",
			[]string{"plan.yaml:7: topics[0].name: required (or regex)"}},
		{"name and regex", header + "topics:\n  - name: a\n    regex: a.*\n    state: proxy\n",
			[]string{"plan.yaml:7: topics[0]: both name and regex: set one of them"}},
		{"bad regex", header + "topics:\n  - regex: \"a(\"\n    state: proxy\n",
			[]string{`plan.yaml:7: topics[0].regex: "a(" is not a regular expression`}},
		{"duplicate name", header + "topics:\n  - name: a\n    state: proxy\n  - name: a\n    state: reject\n",
			[]string{`plan.yaml:9: topics[1].name: topic "a" is already listed at line 7 (topics[0].name)`}},
		{"duplicate regex", header + "topics:\n  - regex: a.*\n    state: proxy\n  - regex: a.*\n    state: reject\n",
			[]string{`plan.yaml:9: topics[1].regex: regex "a.*" is already listed at line 7 (topics[0].regex)`}},
		{"no topics", header + "topics: []\n", []string{"plan.yaml:6: topics: lists no topic"}},
		{"topics not a list", header + "topics:\n  name: a\n", []string{"plan.yaml:7: topics: want a list, not a mapping"}},
		{"duration", header + "defaults:\n  holdMax: 5\ntopics:\n  - name: a\n    state: proxy\n",
			[]string{`plan.yaml:7: defaults.holdMax: "5" is not a duration such as 5s or 1m30s`}},
		{"negative duration", header + "topics:\n  - name: a\n    state: proxy\n    forwardDeadline: -1s\n",
			[]string{"plan.yaml:9: topics[0].forwardDeadline: -1s is negative"}},
		{"shadow bool", header + "topics:\n  - name: a\n    state: proxy\n    shadow:\n      headroom: yes please\n",
			[]string{`plan.yaml:10: topics[0].shadow.headroom: "yes please" is not true or false`}},
		{"shadow field", header + "topics:\n  - name: a\n    state: proxy\n    shadow:\n      latency: true\n",
			[]string{"plan.yaml:10: topics[0].shadow.latency: unknown field (topics[0].shadow has: authCheck, authEnforce, headroom, latencyEmulation)"}},
		{"enforce without check", header + "topics:\n  - name: a\n    state: proxy\n    shadow:\n      authCheck: false\n      authEnforce: true\n",
			[]string{"plan.yaml:11: topics[0].shadow.authEnforce: true needs the auth check: authCheck is false"}},
		{"force gate", header + "defaults:\n  force: [time-lag, speed]\ntopics:\n  - name: a\n    state: complete\n",
			[]string{`plan.yaml:7: defaults.force: unknown gate "speed" (gates: `}},
		{"target", header + "topics:\n  - name: a\n    state: proxy\n    target:\n      namespace: [a]\n",
			[]string{"plan.yaml:10: topics[0].target.namespace: unknown field (topics[0].target has: namespaces, workloads)"}},
		{"target twice", header + "topics:\n  - name: a\n    state: proxy\n    target:\n      namespaces: [a, a]\n",
			[]string{`plan.yaml:10: topics[0].target.namespaces[1]: "a" is listed twice`}},
		{"set twice", header + "topics:\n  - name: a\n    state: proxy\n    state: reject\n",
			[]string{"plan.yaml:9: topics[0].state: set twice"}},
		{"wave without namespaces", header + "topics:\n  - name: a\n    state: proxy\nwaves:\n  - name: w1\n",
			[]string{"plan.yaml:10: waves[0].namespaces: required"}},
		{"wave namespace twice", header + "topics:\n  - name: a\n    state: proxy\nwaves:\n  - name: w1\n    namespaces: [a]\n  - name: w2\n    namespaces: [b, a]\n",
			[]string{`plan.yaml:13: waves[1].namespaces: namespace "a" is already in the wave at line 11 (waves[0].namespaces)`}},
		{"wave until", header + "topics:\n  - name: a\n    state: proxy\nwaves:\n  - name: w1\n    namespaces: [a]\n    until:\n      allDone: true\n",
			[]string{"plan.yaml:13: waves[0].until.allDone: unknown field (waves[0].until has: complete, noForgottenProducers, soak)"}},
		{"wave name twice", header + "topics:\n  - name: a\n    state: proxy\nwaves:\n  - name: w\n    namespaces: [a]\n  - name: w\n    namespaces: [b]\n",
			[]string{`plan.yaml:12: waves[1].name: wave "w" is already named at line 10 (waves[0].name)`}},
		{"syntax", header + "topics:\n  - name: [a\n", []string{"plan: bad plan: plan.yaml:6: did not find expected"}},
		{"empty", "", []string{"plan.yaml:1: (plan): the file is empty"}},
		{"not a mapping", "- a\n", []string{"plan.yaml:1: (plan): want a mapping of fields"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := Decode("plan.yaml", []byte(tc.plan))
			if err == nil {
				t.Fatalf("decoded %+v, want a refusal", p)
			}
			if !errors.Is(err, ErrBadPlan) {
				t.Errorf("%v is not ErrBadPlan", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal\n%v\ndoes not say\n%s", err, w)
				}
			}
		})
	}
}

// TestDecodeExamplePlan: examples/plan.yaml, which docs/kubernetes.md
// shows, decodes to what it says.
func TestDecodeExamplePlan(t *testing.T) {
	t.Parallel()
	p, err := Load("../examples/plan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Topics) != 3 || p.Topics[0].Name != "orders" || p.Topics[0].State != Complete ||
		p.Topics[1].Name != "payments" || p.Topics[1].State != Proxy || p.Topics[2].Regex == nil || p.Topics[2].State != Reject {
		t.Fatalf("topics: %+v", p.Topics)
	}
	if !p.Topics[2].Regex.MatchString("audit-eu") || p.Topics[2].Regex.MatchString("x-audit-eu") {
		t.Errorf("the regex %v does not match whole names", p.Topics[2].Regex)
	}
	s := p.Resolved(p.Topics[2])
	if s.Mode != "retriable" || s.HoldMax == nil || *s.HoldMax != 5*time.Second || !on(s.LatencyEmulation) || !on(s.Headroom) {
		t.Errorf("audit-.* resolves to mode %q, holdMax %v, latency emulation %v, headroom %v", s.Mode, s.HoldMax, s.LatencyEmulation, s.Headroom)
	}
	if s := p.Resolved(p.Topics[1]); !on(s.AuthCheck) || s.Mode != "hold" {
		t.Errorf("payments resolves to auth check %v, mode %q", s.AuthCheck, s.Mode)
	}
	if len(p.Waves) != 2 || p.Waves[0].Name != "first" || !p.Waves[0].Until.Complete || !p.Waves[0].Until.NoForgottenProducers ||
		p.Waves[0].Until.Soak != 10*time.Minute || len(p.Waves[1].Namespaces) != 2 {
		t.Errorf("waves: %+v", p.Waves)
	}
	if len(p.Source) != 1 || p.Source[0] != "127.0.0.1:19092" || p.Destination[0] != "127.0.0.1:19192" {
		t.Errorf("clusters: %v, %v", p.Source, p.Destination)
	}
}

func on(b *bool) bool { return b != nil && *b }

// yamlComment is a comment of examples/plan.yaml: a whole line, or after
// blanks (the file has no # inside a value).
var yamlComment = regexp.MustCompile(`(^|\s+)#.*$`)

// TestKubernetesDocShowsExamplePlan: the plan docs/kubernetes.md shows in
// its Plan section is examples/plan.yaml without its comments.
func TestKubernetesDocShowsExamplePlan(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Plan\n")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/kubernetes.md has no yaml block in a section ## Plan")
	}
	example, err := os.ReadFile("../examples/plan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var stripped strings.Builder
	for l := range strings.Lines(string(example)) {
		if l = yamlComment.ReplaceAllString(strings.TrimRight(l, "\n"), ""); l != "" {
			stripped.WriteString(l + "\n")
		}
	}
	if stripped.String() != block {
		t.Errorf("docs/kubernetes.md shows\n%s\nexamples/plan.yaml without comments is\n%s", block, stripped.String())
	}
	if _, err := Decode("docs/kubernetes.md", []byte(block)); err != nil {
		t.Error(err)
	}
}
