package deploy

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

// The shipped dashboard is a Grafana dashboard querying through its
// datasource variable, and every expression of it reads metrics the
// tokenizer can name; TestDashboardsUseExportedMetrics (cmd/baton) checks
// those names against running processes.
func TestShippedDashboard(t *testing.T) {
	t.Parallel()
	qs, err := DashboardQueries(Dashboard)
	if err != nil {
		t.Fatal(err)
	}
	names, err := MetricNames(qs)
	if err != nil {
		t.Fatal(err)
	}
	// What the dashboard must show (docs/operations.md), by the metric showing it.
	for _, want := range []string{"baton_controlplane_topic_state", "baton_replicator_topic_lag_seconds",
		"baton_controlplane_cutover_duration_seconds_bucket", "baton_controlplane_agents", "baton_agent_lease_remaining_seconds",
		"baton_agent_request_bytes_total", "baton_agent_request_duration_seconds_bucket", "baton_agent_headroom_warnings_total",
		"baton_controlplane_bypass_records_total", "baton_controlplane_source_written_after_complete_records_total"} {
		if _, ok := names[want]; !ok {
			t.Errorf("no panel reads %s", want)
		}
	}
}

func TestShippedRules(t *testing.T) {
	t.Parallel()
	qs, err := RuleQueries(Rules)
	if err != nil {
		t.Fatal(err)
	}
	names, err := MetricNames(qs)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"baton_agent_lease_remaining_seconds", "baton_controlplane_topic_state",
		"baton_controlplane_source_written_after_complete_records_total", "baton_replicator_topic_lag_seconds"} {
		if _, ok := names[want]; !ok {
			t.Errorf("no alert reads %s", want)
		}
	}
}

// edit decodes the shipped dashboard, applies f, and encodes it again.
func edit(t *testing.T, f func(d map[string]any)) []byte {
	t.Helper()
	var d map[string]any
	if err := json.Unmarshal(Dashboard, &d); err != nil {
		t.Fatal(err)
	}
	f(d)
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func firstQueryPanel(d map[string]any) map[string]any {
	for _, p := range d["panels"].([]any) {
		if p := p.(map[string]any); p["type"] != "row" {
			return p
		}
	}
	panic("no panel")
}

func TestDashboardRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, want string
		edit       func(d map[string]any)
	}{
		{"no title", "title: empty", func(d map[string]any) { d["title"] = "" }},
		{"no datasource variable", "templating.list: no datasource variable", func(d map[string]any) {
			d["templating"] = map[string]any{"list": []any{}}
		}},
		{"a panel with a fixed datasource", `datasource: want the variable $datasource`, func(d map[string]any) {
			firstQueryPanel(d)["datasource"] = map[string]any{"type": "prometheus", "uid": "prod"}
		}},
		{"a panel without targets", "targets: none", func(d map[string]any) { firstQueryPanel(d)["targets"] = []any{} }},
		{"a target without expr", "targets[0]: expr: empty", func(d map[string]any) {
			firstQueryPanel(d)["targets"].([]any)[0].(map[string]any)["expr"] = ""
		}},
		{"two refIds alike", "targets[1]: refId", func(d map[string]any) {
			p := firstQueryPanel(d)
			p["targets"] = append(p["targets"].([]any), p["targets"].([]any)[0])
		}},
		{"a panel wider than the grid", "gridPos", func(d map[string]any) {
			firstQueryPanel(d)["gridPos"].(map[string]any)["x"] = 20
		}},
		{"two panels with one id", "id: ", func(d map[string]any) {
			ps := d["panels"].([]any)
			ps[2].(map[string]any)["id"] = ps[1].(map[string]any)["id"]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := DashboardQueries(edit(t, tc.edit))
			if !errors.Is(err, ErrBadDashboard) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrBadDashboard saying %q", err, tc.want)
			}
		})
	}
}

func TestRulesRefusals(t *testing.T) {
	t.Parallel()
	const good = `groups:
  - name: g
    rules:
      - alert: A
        expr: up == 0
        for: 1m
        labels: {severity: warning}
        annotations: {summary: do this}
`
	if _, err := RuleQueries([]byte(good)); err != nil {
		t.Fatalf("the good file: %v", err)
	}
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"an unknown field", "for: 1m", "for: 1m\n        fore: 1m", "field fore not found"},
		{"no for", "for: 1m", "", "for: \"\""},
		{"a bad for", "for: 1m", "for: soon", `for: "soon"`},
		{"no severity", "{severity: warning}", "{team: x}", "labels.severity"},
		{"an unknown severity", "{severity: warning}", "{severity: page}", "labels.severity"},
		{"no summary", "{summary: do this}", "{description: x}", "annotations.summary"},
		{"no expr", "expr: up == 0", "expr: ''", "expr: empty"},
		{"no alert", "alert: A", "alert: ''", "alert: empty"},
		{"a recording rule", "alert: A", "record: a", "field record not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := RuleQueries([]byte(strings.Replace(good, tc.from, tc.to, 1)))
			if !errors.Is(err, ErrBadRules) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrBadRules saying %q", err, tc.want)
			}
		})
	}
}

// SeriesNames selects histograms by their _bucket, _sum and _count series
// and never by the bare name; counters and gauges by their name; and
// Missing names what a scrape lacks, with where it is read.
func TestSeriesNamesAndMissing(t *testing.T) {
	t.Parallel()
	const scrape = `# TYPE a_total counter
a_total{x="1"} 3
# TYPE g gauge
g 1
# TYPE h histogram
h_bucket{le="1"} 1
h_bucket{le="+Inf"} 1
h_sum 0.5
h_count 1
# TYPE s summary
s{quantile="0.5"} 1
s_sum 1
s_count 1
`
	fams, err := ParseScrapes([]byte(scrape))
	if err != nil {
		t.Fatal(err)
	}
	got := SeriesNames(fams)
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"a_total", true}, {"a", false}, {"g", true}, {"h_bucket", true}, {"h_sum", true}, {"h_count", true},
		{"h", false}, {"s", true}, {"s_sum", true}, {"s_count", true}, {"s_bucket", false}, {"g_bucket", false},
	} {
		if got[tc.name] != tc.want {
			t.Errorf("SeriesNames has %s: %v, want %v", tc.name, got[tc.name], tc.want)
		}
	}
	missing := Missing(map[string][]string{"h": {"panel x"}, "g": {"rule y"}, "zz": {"rule z", "panel w"}}, got)
	if want := []string{"h (read by panel x)", "zz (read by rule z; panel w)"}; !slices.Equal(missing, want) {
		t.Errorf("Missing = %q, want %q", missing, want)
	}
	if _, err := ParseScrapes([]byte("# TYPE g gauge\ng 1\n"), []byte("# TYPE g counter\ng 1\n")); err == nil {
		t.Error("ParseScrapes took g as a gauge and as a counter")
	}
}
