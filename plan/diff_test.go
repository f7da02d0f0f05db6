package plan

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/xds"
)

func managedTopic(name string, st migration.State, edit ...func(*controlplane.Topic)) controlplane.Topic {
	t := controlplane.Topic{TopicSpec: controlplane.TopicSpec{Name: name, State: st, Mode: "hold", HoldMax: migration.DefaultHoldMax}}
	for _, e := range edit {
		e(&t)
	}
	return t
}

// TestComputeDiff: the diff of a plan against managed topics, as the
// lines apply prints, and what it would write.
func TestComputeDiff(t *testing.T) {
	t.Parallel()
	cutover := func(t *controlplane.Topic) { t.Cutover = &controlplane.Cutover{Attempt: 2, Step: "wait-agents"} }
	latency := func(t *controlplane.Topic) { t.Shadow.LatencyEmulation = true }
	for _, tc := range []struct {
		name    string
		topics  string
		managed []controlplane.Topic
		source  []string
		want    []string
		writes  bool
	}{
		{"adds", "  - name: a\n    state: proxy\n  - name: b\n    state: reject\n    mode: retriable\n    shadow: {headroom: true}\n" +
			"  - name: c\n    state: complete\n    holdMax: 3s\n    force: [time-lag]\n",
			nil, nil, []string{"+ topic a: PROXY", "+ topic b: REJECT (mode retriable; headroom on)",
				"+ topic c: PROXY -> COMPLETE (holdMax 3s; migrate: mode hold, holdMax 3s, force time-lag)", "= 0 unchanged"}, true},
		{"unchanged", "  - name: a\n    state: proxy\n  - name: b\n    state: complete\n    mode: retriable\n  - name: c\n    state: reject\n    holdMax: 5s\n",
			[]controlplane.Topic{managedTopic("a", migration.Proxy), managedTopic("b", migration.Complete),
				managedTopic("c", migration.Reject, func(t *controlplane.Topic) { t.HoldMax = 0 }), managedTopic("other", migration.Proxy)},
			nil, []string{"= 3 unchanged", "  1 managed topic the plan does not name, left as they are: other"}, false},
		{"moves", "  - name: a\n    state: reject\n  - name: b\n    state: complete\n  - name: c\n    state: complete\n  - name: d\n    state: complete\n",
			[]controlplane.Topic{managedTopic("a", migration.Proxy), managedTopic("b", migration.Reject),
				managedTopic("c", migration.Proxy, func(t *controlplane.Topic) { t.Mode = "retriable"; t.HoldMax = 2 * time.Second }),
				managedTopic("d", migration.Migrating, cutover)},
			nil, []string{"~ topic a: PROXY -> REJECT", "~ topic b: REJECT -> PROXY -> COMPLETE (migrate: mode hold, holdMax 5s)",
				"~ topic c: PROXY -> COMPLETE (migrate: mode retriable, holdMax 2s)",
				"~ topic d: MIGRATING -> COMPLETE (cutover running: attempt 2, step wait-agents; nothing to start)", "= 0 unchanged"}, true},
		{"running only", "  - name: d\n    state: complete\n", []controlplane.Topic{managedTopic("d", migration.Migrating, cutover)}, nil,
			[]string{"~ topic d: MIGRATING -> COMPLETE (cutover running: attempt 2, step wait-agents; nothing to start)", "= 0 unchanged"}, false},
		{"shadow", "defaults:\n  shadow: {latencyEmulation: false, authEnforce: true}\ntopics:\n  - name: a\n    state: proxy\n  - name: b\n    state: complete\n",
			[]controlplane.Topic{managedTopic("a", migration.Proxy, latency), managedTopic("b", migration.Complete, latency)},
			nil, []string{"~ topic a: PROXY (latencyEmulation on -> off; authCheck off -> on; authEnforce off -> on)", "= 1 unchanged"}, true},
		{"regex", "  - regex: logs-.*\n    state: reject\n  - name: logs-b\n    state: proxy\n  - regex: none-.*\n    state: proxy\n",
			[]controlplane.Topic{managedTopic("logs-m", migration.Reject)}, []string{"logs-a", "logs-b", "xlogs-c", "orders"},
			[]string{"+ topic logs-a: REJECT (by the regex of line 7)", "+ topic logs-b: PROXY",
				`? regex "none-.*" (line 11, topics[2]) matches no topic`, "= 1 unchanged"}, true},
		{"target", "  - name: a\n    state: proxy\n    target: {namespaces: [y, x]}\n",
			[]controlplane.Topic{managedTopic("a", migration.Proxy, func(t *controlplane.Topic) { t.Target = xds.Target{Namespaces: []string{"x", "y"}} })},
			nil, []string{"= 1 unchanged"}, false},
		{"target widened", "  - name: a\n    state: proxy\n    target: {namespaces: [x, y]}\n  - name: b\n    state: reject\n    target: {namespaces: []}\n",
			[]controlplane.Topic{managedTopic("a", migration.Proxy, func(t *controlplane.Topic) { t.Target = xds.Target{Namespaces: []string{"x"}} }),
				managedTopic("b", migration.Reject, func(t *controlplane.Topic) { t.Target = xds.Target{Namespaces: []string{"x"}} })},
			nil, []string{"~ topic a: PROXY (target.namespaces [x] -> [x,y])", "~ topic b: REJECT (target.namespaces [x] -> [] (all))", "= 0 unchanged"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			body := tc.topics
			if !strings.HasPrefix(body, "defaults:") {
				body = "topics:\n" + body
			}
			p, err := Decode("plan.yaml", []byte(header+body))
			if err != nil {
				t.Fatal(err)
			}
			d, err := p.Compute(tc.managed, tc.source)
			if err != nil {
				t.Fatal(err)
			}
			if got := d.Lines(); !slices.Equal(got, tc.want) {
				t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if d.Writes() != tc.writes {
				t.Errorf("writes %v, want %v", d.Writes(), tc.writes)
			}
		})
	}
}

// TestComputeRefusesConflicts: what the control plane cannot do from a
// topic's state is refused naming the plan's line, nothing applied.
func TestComputeRefusesConflicts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		topics  string
		managed []controlplane.Topic
		source  []string
		want    string
	}{
		{"complete is one-way", "  - name: a\n    state: proxy\n", []controlplane.Topic{managedTopic("a", migration.Complete)}, nil,
			"plan.yaml:8: topics[0].state: a is COMPLETE, and COMPLETE is one-way: it cannot go back to PROXY"},
		{"migrating", "  - name: a\n    state: reject\n", []controlplane.Topic{managedTopic("a", migration.Migrating)}, nil,
			"plan.yaml:8: topics[0].state: a is MIGRATING: the cutover ends COMPLETE, or rolled back in PROXY; to end it now: baton topic abort a"},
		{"mode", "  - name: a\n    state: proxy\n    mode: retriable\n", []controlplane.Topic{managedTopic("a", migration.Proxy)}, nil,
			"plan.yaml:9: topics[0].mode: a has mode hold on the control plane, the plan retriable: the API cannot change a managed topic's mode"},
		{"holdMax from defaults", "defaults:\n  holdMax: 1s\ntopics:\n  - name: a\n    state: reject\n", []controlplane.Topic{managedTopic("a", migration.Reject)}, nil,
			"plan.yaml:7: defaults.holdMax: a has holdMax 5s on the control plane, the plan 1s"},
		{"two regexes", "  - regex: a.*\n    state: proxy\n  - regex: .*b\n    state: reject\n", nil, []string{"ab"},
			"plan.yaml:9: topics[1].regex: matches topic ab, which topics[0].regex (line 7) matches too"},
		{"regex match conflicts", "  - regex: a.*\n    state: reject\n", []controlplane.Topic{managedTopic("ab", migration.Complete)}, nil,
			"plan.yaml:8: topics[0].state: topic ab (matched by the regex): ab is COMPLETE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			body := tc.topics
			if !strings.HasPrefix(body, "defaults:") {
				body = "topics:\n" + body
			}
			p, err := Decode("plan.yaml", []byte(header+body))
			if err != nil {
				t.Fatal(err)
			}
			d, err := p.Compute(tc.managed, tc.source)
			if err == nil {
				t.Fatalf("computed %v, want a conflict", d.Lines())
			}
			if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v\nwant ErrConflict saying\n%s", err, tc.want)
			}
		})
	}
}

// TestCheckClusters: a plan for other clusters than the control plane's is
// refused naming the line; the same brokers in another order pass.
func TestCheckClusters(t *testing.T) {
	t.Parallel()
	p, err := Decode("plan.yaml", []byte(strings.Replace(header, "[s:9092]", "[s2:9092, s:9092]", 1)+"topics:\n  - name: a\n    state: proxy\n"))
	if err != nil {
		t.Fatal(err)
	}
	cv := controlplane.ClustersView{Source: controlplane.ClusterInfo{Name: "source", Bootstrap: []string{"s:9092", "s2:9092"}},
		Destination: controlplane.ClusterInfo{Name: "destination", Bootstrap: []string{"d:9092"}}}
	if err := p.CheckClusters(cv); err != nil {
		t.Errorf("the same clusters: %v", err)
	}
	cv.Destination.Bootstrap = []string{"other:9092"}
	err = p.CheckClusters(cv)
	want := "plan.yaml:5: clusters.destination: d:9092 is not the control plane's destination cluster (other:9092): this plan is for another migration"
	if !errors.Is(err, ErrConflict) || err.Error() != want {
		t.Errorf("%v\nwant %s", err, want)
	}
}
