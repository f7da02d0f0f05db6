package bench

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// cutoverGoal is the goal for hold mode: a p99 ack gap under it,
// with no client-visible error. Printed against the numbers, not asserted.
const cutoverGoal = 250 * time.Millisecond

// reportCutovers prints one column per mode and reports the same figures
// as metrics (ms, per mode).
func reportCutovers(b *testing.B, results map[string][]cutoverResult, n, rate int) {
	type row struct {
		label, unit string
		of          func(rs []cutoverResult) float64
	}
	gaps, befores := resultDurs(func(r cutoverResult) time.Duration { return r.gap }), resultDurs(func(r cutoverResult) time.Duration { return r.before })
	byClient := func(name string) func([]cutoverResult) []time.Duration {
		return resultDurs(func(r cutoverResult) time.Duration { return r.gapBy[name] })
	}
	tooks := resultDurs(func(r cutoverResult) time.Duration { return r.took })
	rows := []row{
		{"ack gap p50", "gap-p50-ms", func(rs []cutoverResult) float64 { return ms64(pct(gaps(rs), 50)) }},
		{"ack gap p99", "gap-p99-ms", func(rs []cutoverResult) float64 { return ms64(pct(gaps(rs), 99)) }},
		{"ack gap max", "gap-max-ms", func(rs []cutoverResult) float64 { return ms64(slices.Max(gaps(rs))) }},
		{"  franz-go's p99", "gap-franz-p99-ms", func(rs []cutoverResult) float64 { return ms64(pct(byClient("franz")(rs), 99)) }},
		{"  Java producer's p99", "gap-java-p99-ms", func(rs []cutoverResult) float64 { return ms64(pct(byClient("java")(rs), 99)) }},
		{"  PROXY gap p50", "proxy-gap-p50-ms", func(rs []cutoverResult) float64 { return ms64(pct(befores(rs), 50)) }},
		{"  PROXY gap max", "proxy-gap-max-ms", func(rs []cutoverResult) float64 { return ms64(slices.Max(befores(rs))) }},
		{"cutover p50", "cutover-p50-ms", func(rs []cutoverResult) float64 { return ms64(pct(tooks(rs), 50)) }},
		{"cutover p99", "cutover-p99-ms", func(rs []cutoverResult) float64 { return ms64(pct(tooks(rs), 99)) }},
	}
	for _, kind := range cutoverStepKinds {
		step := resultDurs(func(r cutoverResult) time.Duration { return r.steps[kind] })
		if slices.Max(step(results[cutoverModes[0]])) == 0 && slices.Max(step(results[cutoverModes[1]])) == 0 {
			continue // a step these clusters do not take (the source fence)
		}
		rows = append(rows, row{"  step " + kind + " p50", "step-" + kind + "-p50-ms",
			func(rs []cutoverResult) float64 { return ms64(pct(step(rs), 50)) }})
	}
	rows = append(rows,
		row{"records acked", "acked", resultSum(func(r cutoverResult) float64 { return float64(r.acked) })},
		row{"client-visible errors", "errors", resultSum(func(r cutoverResult) float64 { return float64(r.errors) })},
		row{"agent error answers", "agent-error-answers", resultSum(func(r cutoverResult) float64 { return r.errorAnswers })})

	var t strings.Builder
	fmt.Fprintf(&t, "\ncutover stall: %d cutovers per mode, franz-go + Java producer at %d records/s together, GOMAXPROCS=%d\n",
		n, rate, runtime.GOMAXPROCS(0))
	fmt.Fprintf(&t, "%-30s", "")
	for _, m := range cutoverModes {
		fmt.Fprintf(&t, "%12s", m)
	}
	for _, r := range rows {
		fmt.Fprintf(&t, "\n%-30s", r.label)
		for _, m := range cutoverModes {
			v := r.of(results[m])
			fmt.Fprintf(&t, "%12.1f", v)
			b.ReportMetric(v, m+"-"+r.unit)
		}
	}
	fmt.Fprint(os.Stderr, t.String(), "\n", cutoverGoalLine(results["hold"]), "\n")
}

// cutoverGoalLine says whether hold mode's results meet cutoverGoal.
func cutoverGoalLine(hold []cutoverResult) string {
	p99 := pct(resultDurs(func(r cutoverResult) time.Duration { return r.gap })(hold), 99)
	errs := resultSum(func(r cutoverResult) float64 { return float64(r.errors) })(hold)
	met := "not met"
	if p99 < cutoverGoal && errs == 0 {
		met = "met"
	}
	return fmt.Sprintf("goal (hold: p99 ack gap < %v, no client-visible error): %s (p99 %v, %.0f errors)", cutoverGoal, met, p99, errs)
}

// resultDurs is f of each result, sorted.
func resultDurs(f func(cutoverResult) time.Duration) func([]cutoverResult) []time.Duration {
	return func(rs []cutoverResult) []time.Duration {
		var ds []time.Duration
		for _, r := range rs {
			ds = append(ds, f(r))
		}
		slices.Sort(ds)
		return ds
	}
}

// resultSum is the sum of f over the results.
func resultSum(f func(cutoverResult) float64) func([]cutoverResult) float64 {
	return func(rs []cutoverResult) float64 {
		t := 0.0
		for _, r := range rs {
			t += f(r)
		}
		return t
	}
}
