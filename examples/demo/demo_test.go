package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// The demo checks its own outcome (every acked record in exactly one
// cluster); this runs it short and reads the narration.
func TestDemoRunsAFullCutover(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	cfg := DefaultConfig(&out)
	cfg.Phase = time.Second
	cfg.Rate = 100
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := Run(ctx, cfg); err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	for _, want := range []string{"PROXY", "event: initiated", "event: drained", "event: completed MIGRATING -> COMPLETE", "every acked record is in the destination", "verify parity"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("narration lacks %q:\n%s", want, out.String())
		}
	}
}
