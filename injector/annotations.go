package injector

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// agentFlags are the agent flags a pod may set by annotation
// (AnnotationAgentPrefix + the flag), each with its check: a value the
// agent would refuse at start is refused at admission instead, naming the
// annotation, so that the pod is not created with a sidecar that cannot
// start.
var agentFlags = map[string]func(string) error{
	"log-level":             oneOf("debug", "info", "warn", "error"),
	"upstream-conns":        wholeNumber(1, math.MaxInt32),
	"producer-ids":          wholeNumber(1, math.MaxInt32),
	"max-frame-bytes":       wholeNumber(1<<10, math.MaxInt32),
	"conn-buffered-bytes":   wholeNumber(1<<10, math.MaxInt64),
	"buffered-bytes":        wholeNumber(1<<10, math.MaxInt64),
	"forward-deadline":      positiveDuration,
	"frame-timeout":         positiveDuration,
	"idle-timeout":          positiveDuration,
	"producer-id-idle":      positiveDuration,
	"byte-counters":         oneOf("auto", "userspace", "ebpf"),
	"forward-without-lease": oneOf("auto", "never"),
	"write-ranges":          oneOf("auto", "on", "off"),
}

// AgentFlags are the agent flags a pod may set by annotation, sorted.
func AgentFlags() []string { return slices.Sorted(maps.Keys(agentFlags)) }

func oneOf(vs ...string) func(string) error {
	return func(v string) error {
		if !slices.Contains(vs, v) {
			return fmt.Errorf("want %s", strings.Join(vs, ", "))
		}
		return nil
	}
}

func wholeNumber(lo, hi int64) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("want a whole number from %d to %d", lo, hi)
		}
		return nil
	}
}

func positiveDuration(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return fmt.Errorf("want a positive duration, as 2s or 500ms")
	}
	return nil
}

// podOptions is what a pod's annotations ask of the injector.
type podOptions struct {
	workload          string
	secret            string
	overrideBootstrap bool
	agentArgs         []string // --flag=value, sorted by flag
}

// readAnnotations checks every baton.io/ annotation of a pod. One the
// injector does not know is refused (a misspelt opt-out must not inject).
func readAnnotations(ann map[string]string) (podOptions, error) {
	var o podOptions
	bad := func(key, v string, why string) error {
		return fmt.Errorf("%w: annotation %s: %q: %s", ErrRefused, key, v, why)
	}
	for _, key := range slices.Sorted(maps.Keys(ann)) {
		v := ann[key]
		if !strings.HasPrefix(key, "baton.io/") {
			continue
		}
		switch key {
		case AnnotationInject:
			// "false" never gets here: Mutate admits an opted-out pod first,
			// whatever else its annotations say.
			if v != "true" {
				return o, bad(key, v, `want "false" (opt out) or "true"`)
			}
		case AnnotationWorkload:
			if v == "" {
				return o, bad(key, v, "want the workload's name")
			}
			o.workload = v
		case AnnotationSecret:
			if !isDNSSubdomain(v) {
				return o, bad(key, v, "want a Secret's name")
			}
			o.secret = v
		case AnnotationOverrideBootstrap:
			switch v {
			case "true":
				o.overrideBootstrap = true
			case "false":
			default:
				return o, bad(key, v, `want "true" or "false"`)
			}
		default:
			flag, ok := strings.CutPrefix(key, AnnotationAgentPrefix)
			check := agentFlags[flag]
			if !ok || check == nil {
				return o, fmt.Errorf("%w: annotation %s: unknown; the injector reads %s, %s, %s, %s and %s<flag> for the flags %s",
					ErrRefused, key, AnnotationInject, AnnotationWorkload, AnnotationSecret, AnnotationOverrideBootstrap,
					AnnotationAgentPrefix, strings.Join(AgentFlags(), ", "))
			}
			if err := check(v); err != nil {
				return o, bad(key, v, err.Error())
			}
			o.agentArgs = append(o.agentArgs, "--"+flag+"="+v)
		}
	}
	return o, nil
}
