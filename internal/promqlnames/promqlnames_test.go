package promqlnames

import (
	"errors"
	"slices"
	"testing"
)

func TestNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, expr string
		want       []string
	}{
		{"a bare name", `up`, []string{"up"}},
		{"colons and digits", `job:baton_x2:rate5m`, []string{"job:baton_x2:rate5m"}},
		{"label matchers are not names", `baton_a{topic="orders", state!="PROXY", kind=~"x|y", b!~'z'}`, []string{"baton_a"}},
		{"a matcher's value that looks like a name", `baton_a{topic="baton_b"}`, []string{"baton_a"}},
		{"__name__ names a metric", `{__name__="baton_a", topic="t"}`, []string{"baton_a"}},
		{"a quoted name alone", `{"baton.a", topic="t"}`, []string{"baton.a"}},
		{"functions are not names", `histogram_quantile(0.99, rate(baton_a_bucket[5m]))`, []string{"baton_a_bucket"}},
		{"aggregation with by before", `sum by (le, api) (rate(baton_a_bucket[$__rate_interval]))`, []string{"baton_a_bucket"}},
		{"aggregation with without after", `max(baton_a) without (instance, pod)`, []string{"baton_a"}},
		{"aggregations taking a parameter", `topk(5, baton_a) or bottomk(3, baton_b) or quantile(0.5, baton_c) or count_values("v", baton_d)`,
			[]string{"baton_a", "baton_b", "baton_c", "baton_d"}},
		{"binary operators and keywords", `baton_a and on(topic) baton_b or ignoring (x) baton_c unless baton_d > bool 1`,
			[]string{"baton_a", "baton_b", "baton_c", "baton_d"}},
		{"keywords in any case", `baton_a AND baton_b OR baton_c`, []string{"baton_a", "baton_b", "baton_c"}},
		{"group_left with and without labels", `baton_a * on (topic) group_left(ns) baton_b / on(x) group_right baton_c`,
			[]string{"baton_a", "baton_b", "baton_c"}},
		{"offset and durations", `baton_a offset 1h30m - baton_a offset -5m`, []string{"baton_a"}},
		{"the @ modifier", `baton_a @ 1609746000 + baton_b @ start()`, []string{"baton_a", "baton_b"}},
		{"subqueries", `max_over_time(rate(baton_a[1m])[10m:30s])`, []string{"baton_a"}},
		{"numbers", `baton_a * 1e3 + 0x1f - .5 + 1.5e-3 + Inf - NaN`, []string{"baton_a"}},
		{"strings are skipped", `label_replace(baton_a, "dst", "$1", "src", "(baton_b).*")`, []string{"baton_a"}},
		{"backquoted and escaped strings", "label_join(baton_a, \"d\", `,`, \"s\\\"x\")", []string{"baton_a"}},
		{"grafana variables", `rate(baton_a{topic=~"$topic", ns=~${namespace:regex}}[$__rate_interval]) * $scale + [[old]]`,
			[]string{"baton_a"}},
		{"an unquoted variable as a matcher's value", `baton_a{topic=~$topic}`, []string{"baton_a"}},
		{"each name once, sorted", `baton_b + baton_a + baton_b`, []string{"baton_a", "baton_b"}},
		{"comments", "baton_a # baton_b is not read\n+ baton_c", []string{"baton_a", "baton_c"}},
		{"vector() and scalar()", `count(baton_a == 0) or vector(0)`, []string{"baton_a"}},
		{"a metric named like an aggregation, alone", `count`, []string{"count"}},
		{"none", `vector(1)`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Names(tc.expr)
			if err != nil {
				t.Fatalf("Names(%q): %v", tc.expr, err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Names(%q) = %q, want %q", tc.expr, got, tc.want)
			}
		})
	}
}

func TestNamesRefusesWhatItCannotRead(t *testing.T) {
	t.Parallel()
	for _, expr := range []string{
		`baton_a{topic="orders"`,          // unclosed brace
		`baton_a{topic="orders}`,          // unterminated string
		`rate(baton_a[5m)`,                // unclosed bracket
		`{__name__=~"baton_.*"}`,          // a regex on the name cannot be checked
		`baton_a{topic}`,                  // a matcher without an operator
		`baton_a{topic=orders}`,           // a matcher's value not quoted
		`baton_a ; baton_b`,               // not PromQL
		`baton_a{topic="x"} + ${unclosed`, // unterminated variable
	} {
		if got, err := Names(expr); !errors.Is(err, ErrSyntax) {
			t.Errorf("Names(%q) = %q, %v; want ErrSyntax", expr, got, err)
		}
	}
}
