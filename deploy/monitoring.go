package deploy

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/baton-kafka/baton/internal/promqlnames"
)

// Errors of deploy, one prefix.
var (
	// ErrRender is a chart that does not load or render with the values
	// given.
	ErrRender = errors.New("deploy: render")
	// ErrBadDashboard refuses a dashboard, naming the field at fault.
	ErrBadDashboard = errors.New("deploy: bad dashboard")
	// ErrBadRules refuses a rules file, naming the rule and field at fault.
	ErrBadRules = errors.New("deploy: bad rules")
)

// Dashboard is grafana/baton.json.
//
//go:embed grafana/baton.json
var Dashboard []byte

// Rules is prometheus/baton-rules.yaml.
//
//go:embed prometheus/baton-rules.yaml
var Rules []byte

// Query is one PromQL expression of a dashboard or rules file, and where
// it is (a panel's title and refId, a variable's name, a rule's alert).
type Query struct {
	Where string
	Expr  string
}

// Severities a rule's labels.severity may take.
var Severities = []string{"critical", "warning", "info"}

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type gridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

type target struct {
	RefID      string `json:"refId"`
	Expr       string `json:"expr"`
	Datasource *dsRef `json:"datasource"`
}

type panel struct {
	ID         int      `json:"id"`
	Type       string   `json:"type"`
	Title      string   `json:"title"`
	Datasource *dsRef   `json:"datasource"`
	GridPos    *gridPos `json:"gridPos"`
	Targets    []target `json:"targets"`
	Panels     []panel  `json:"panels"` // a row's, when collapsed
}

type variable struct {
	Type       string          `json:"type"`
	Name       string          `json:"name"`
	Query      json.RawMessage `json:"query"`
	Datasource *dsRef          `json:"datasource"`
}

type dashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

// labelValues is Grafana's label_values(selector, label) variable query,
// which is not PromQL: its selector is.
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

// DashboardQueries checks that b is a Grafana dashboard whose panels and
// query variables all query Prometheus through its datasource variable,
// and returns every expression of its panels and variables.
func DashboardQueries(b []byte) ([]Query, error) {
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadDashboard, err)
	}
	switch {
	case d.Title == "":
		return nil, fmt.Errorf("%w: title: empty", ErrBadDashboard)
	case d.UID == "":
		return nil, fmt.Errorf("%w: uid: empty", ErrBadDashboard)
	case d.SchemaVersion <= 0:
		return nil, fmt.Errorf("%w: schemaVersion: want a positive version, got %d", ErrBadDashboard, d.SchemaVersion)
	}
	dsVar := ""
	for _, v := range d.Templating.List {
		if v.Type == "datasource" && string(v.Query) == `"prometheus"` {
			dsVar = v.Name
		}
	}
	if dsVar == "" {
		return nil, fmt.Errorf("%w: templating.list: no datasource variable of type prometheus", ErrBadDashboard)
	}
	ours := func(ds *dsRef) bool {
		return ds != nil && ds.Type == "prometheus" && (ds.UID == "${"+dsVar+"}" || ds.UID == "$"+dsVar)
	}
	var qs []Query
	for i, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		where := fmt.Sprintf("templating.list[%d] (%s)", i, v.Name)
		if !ours(v.Datasource) {
			return nil, fmt.Errorf("%w: %s: datasource: want the variable $%s", ErrBadDashboard, where, dsVar)
		}
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				return nil, fmt.Errorf("%w: %s: query: %w", ErrBadDashboard, where, err)
			}
			q = obj.Query
		}
		if m := labelValues.FindStringSubmatch(q); m != nil {
			q = m[1]
		}
		if strings.TrimSpace(q) == "" {
			return nil, fmt.Errorf("%w: %s: query: empty", ErrBadDashboard, where)
		}
		qs = append(qs, Query{Where: where, Expr: q})
	}
	ids := map[int]bool{}
	var walk func(ps []panel, path string) error
	walk = func(ps []panel, path string) error {
		for i, p := range ps {
			where := fmt.Sprintf("%s[%d] (%q)", path, i, p.Title)
			switch {
			case ids[p.ID]:
				return fmt.Errorf("%w: %s: id: %d used twice", ErrBadDashboard, where, p.ID)
			case p.Title == "":
				return fmt.Errorf("%w: %s: title: empty", ErrBadDashboard, where)
			case p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24:
				return fmt.Errorf("%w: %s: gridPos: want a width and height within the 24 columns, got %+v", ErrBadDashboard, where, p.GridPos)
			}
			ids[p.ID] = true
			if p.Type == "row" {
				if err := walk(p.Panels, where+".panels"); err != nil {
					return err
				}
				continue
			}
			switch {
			case p.Type == "":
				return fmt.Errorf("%w: %s: type: empty", ErrBadDashboard, where)
			case !ours(p.Datasource):
				return fmt.Errorf("%w: %s: datasource: want the variable $%s", ErrBadDashboard, where, dsVar)
			case len(p.Targets) == 0:
				return fmt.Errorf("%w: %s: targets: none", ErrBadDashboard, where)
			}
			refs := map[string]bool{}
			for j, t := range p.Targets {
				tw := fmt.Sprintf("%s.targets[%d]", where, j)
				switch {
				case t.RefID == "" || refs[t.RefID]:
					return fmt.Errorf("%w: %s: refId: empty or used twice in the panel", ErrBadDashboard, tw)
				case !ours(t.Datasource):
					return fmt.Errorf("%w: %s: datasource: want the variable $%s", ErrBadDashboard, tw, dsVar)
				case strings.TrimSpace(t.Expr) == "":
					return fmt.Errorf("%w: %s: expr: empty", ErrBadDashboard, tw)
				}
				refs[t.RefID] = true
				qs = append(qs, Query{Where: tw, Expr: t.Expr})
			}
		}
		return nil
	}
	if len(d.Panels) == 0 {
		return nil, fmt.Errorf("%w: panels: none", ErrBadDashboard)
	}
	if err := walk(d.Panels, "panels"); err != nil {
		return nil, err
	}
	return qs, nil
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type ruleGroup struct {
	Name  string `yaml:"name"`
	Rules []rule `yaml:"rules"`
}

type ruleFile struct {
	Groups []ruleGroup `yaml:"groups"`
}

// RuleQueries decodes b strictly as Prometheus rule groups of alerting
// rules, each with alert, expr, for, labels.severity (one of Severities)
// and annotations.summary, and returns every rule's expression.
func RuleQueries(b []byte) ([]Query, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var f ruleFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRules, err)
	}
	if len(f.Groups) == 0 {
		return nil, fmt.Errorf("%w: groups: none", ErrBadRules)
	}
	groups, alerts := map[string]bool{}, map[string]bool{}
	var qs []Query
	for i, g := range f.Groups {
		gw := fmt.Sprintf("groups[%d]", i)
		switch {
		case g.Name == "" || groups[g.Name]:
			return nil, fmt.Errorf("%w: %s: name: empty or used twice", ErrBadRules, gw)
		case len(g.Rules) == 0:
			return nil, fmt.Errorf("%w: %s (%s): rules: none", ErrBadRules, gw, g.Name)
		}
		groups[g.Name] = true
		for j, r := range g.Rules {
			rw := fmt.Sprintf("%s.rules[%d] (%s)", gw, j, r.Alert)
			if _, err := model.ParseDuration(r.For); err != nil {
				return nil, fmt.Errorf("%w: %s: for: %q: %w", ErrBadRules, rw, r.For, err)
			}
			switch {
			case r.Alert == "" || alerts[r.Alert]:
				return nil, fmt.Errorf("%w: %s: alert: empty or used twice", ErrBadRules, rw)
			case strings.TrimSpace(r.Expr) == "":
				return nil, fmt.Errorf("%w: %s: expr: empty", ErrBadRules, rw)
			case !slices.Contains(Severities, r.Labels["severity"]):
				return nil, fmt.Errorf("%w: %s: labels.severity: %q, want one of %v", ErrBadRules, rw, r.Labels["severity"], Severities)
			case strings.TrimSpace(r.Annotations["summary"]) == "":
				return nil, fmt.Errorf("%w: %s: annotations.summary: empty", ErrBadRules, rw)
			}
			alerts[r.Alert] = true
			qs = append(qs, Query{Where: rw, Expr: r.Expr})
		}
	}
	return qs, nil
}

// MetricNames returns the metric names qs read, each with where it is read.
func MetricNames(qs []Query) (map[string][]string, error) {
	out := map[string][]string{}
	for _, q := range qs {
		names, err := promqlnames.Names(q.Expr)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", q.Where, err)
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("%s: %q reads no metric", q.Where, q.Expr)
		}
		for _, n := range names {
			out[n] = append(out[n], q.Where)
		}
	}
	return out, nil
}

// SeriesNames returns the series names a scrape's metric families expose,
// as PromQL selects them: a counter or gauge by its name, a histogram by
// name_bucket, name_sum and name_count (its bare name selects nothing), a
// summary by its name (the quantiles), name_sum and name_count.
func SeriesNames(families map[string]*dto.MetricFamily) map[string]bool {
	out := map[string]bool{}
	for name, mf := range families {
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			out[name], out[name+"_sum"], out[name+"_count"] = true, true, true
		default:
			out[name] = true
		}
	}
	return out
}

// ParseScrapes parses text expositions (a /metrics body each) with
// Prometheus's text parser and returns their families together.
func ParseScrapes(bodies ...[]byte) (map[string]*dto.MetricFamily, error) {
	out := map[string]*dto.MetricFamily{}
	for i, b := range bodies {
		p := expfmt.NewTextParser(model.UTF8Validation)
		mfs, err := p.TextToMetricFamilies(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("scrape %d: %w", i, err)
		}
		for name, mf := range mfs {
			if prev, ok := out[name]; ok && prev.GetType() != mf.GetType() {
				return nil, fmt.Errorf("scrape %d: %s is a %v here and a %v in an earlier scrape", i, name, mf.GetType(), prev.GetType())
			}
			out[name] = mf
		}
	}
	return out, nil
}

// Missing returns, sorted, each metric name used reads that exported does
// not have, with where it is read.
func Missing(used map[string][]string, exported map[string]bool) []string {
	var out []string
	for name, where := range used {
		if !exported[name] {
			out = append(out, fmt.Sprintf("%s (read by %s)", name, strings.Join(where, "; ")))
		}
	}
	slices.Sort(out)
	return out
}
