package demo

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The demo checks its own outcome (every acked record in exactly one
// cluster position); this runs it short and reads the narration (plain: a
// buffer is no terminal) for the cutovers it tells of: payments' first
// one rolled back at its timeout, then its second one, and the others'
// first ones, COMPLETE.
func TestDemoRollsBackOneTopicThenCompletesEveryTopic(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	cfg := DefaultConfig(&out)
	cfg.Phase = time.Second
	cfg.Rate = 100
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := Run(ctx, cfg); err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	text := out.String()
	// Each want is found after the one before it.
	ordered := []string{
		"event: payments timed_out attempt=1 (controlplane: cutover timeout passed: waiting for replication to reach the source end offsets",
		"event: payments rolled_back MIGRATING -> PROXY attempt=1",
		"3. payments rolled back to PROXY: its first cutover missed the 3s timeout",
		"event: payments initiated PROXY -> MIGRATING attempt=2",
		"event: payments completed MIGRATING -> COMPLETE attempt=2",
		"4. COMPLETE",
	}
	at := 0
	for _, want := range ordered {
		i := strings.Index(text[at:], want)
		if i < 0 {
			t.Fatalf("narration lacks %q after offset %d:\n%s", want, at, text)
		}
		at += i + len(want)
	}
	for _, topic := range []string{"orders", "audit"} {
		if !strings.Contains(text, "event: "+topic+" completed MIGRATING -> COMPLETE attempt=1") {
			t.Errorf("narration lacks %s's first cutover completing:\n%s", topic, text)
		}
		if strings.Contains(text, "event: "+topic+" rolled_back") {
			t.Errorf("%s rolled back:\n%s", topic, text)
		}
	}
	// The final table: topic, partitions, acked, lost, cutovers, rolled
	// back, longest stall; and the plain view's summary lines.
	for _, want := range []string{
		`(?m)^  orders +6 +[1-9]\d* +0 +1 +0 +\S+$`,
		`(?m)^  payments +3 +[1-9]\d* +0 +2 +1 +\S+$`,
		`(?m)^  audit +1 +[1-9]\d* +0 +1 +0 +\S+$`,
		// Drawn as each step starts.
		`(?m)^  \[payments\] PROXY, +time lag \S+, \d+ acked/s, longest stall \S+, \d+ acked$`,
		`(?m)^  \[orders  \] COMPLETE, time lag -, \d+ acked/s, longest stall \S+, \d+ acked$`,
		`(?m)^payments: every acked record is in the destination, the \d+ written before the cutover`,
		`verify parity`,
	} {
		if !regexp.MustCompile(want).MatchString(text) {
			t.Errorf("narration lacks %s:\n%s", want, text)
		}
	}
	if strings.Contains(text, "\x1b[") {
		t.Errorf("plain narration has ANSI sequences:\n%q", text)
	}
}

func TestDemoRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"no topics", func(c *Config) { c.Topics = nil }, "Topics: none"},
		{"unnamed topic", func(c *Config) { c.Topics[1].Name = "" }, "Topics[1].Name"},
		{"topic twice", func(c *Config) { c.Topics[2].Name = "orders" }, "Topics[2].Name"},
		{"no partitions", func(c *Config) { c.Topics[0].Partitions = 0 }, "Topics[0].Partitions"},
		{"unknown rollback", func(c *Config) { c.RollBack = "refunds" }, "RollBack"},
		{"no rate", func(c *Config) { c.Rate = 0 }, "Rate"},
		{"no phase", func(c *Config) { c.Phase = 0 }, "Phase"},
		{"no cutover timeout", func(c *Config) { c.CutoverTimeout = -time.Second }, "CutoverTimeout"},
		{"no out", func(c *Config) { c.Out = nil }, "Out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig(&bytes.Buffer{})
			cfg.Topics = append([]Topic(nil), cfg.Topics...)
			tc.edit(&cfg)
			err := Run(context.Background(), cfg)
			if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Run: %v, want ErrBadConfig naming %s", err, tc.field)
			}
		})
	}
}

func TestParseTopic(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Topic
		ok   bool
	}{
		{"orders:6", Topic{Name: "orders", Partitions: 6}, true},
		{"a.b-c:1", Topic{Name: "a.b-c", Partitions: 1}, true},
		{"orders", Topic{}, false},
		{":3", Topic{}, false},
		{"orders:0", Topic{}, false},
		{"orders:x", Topic{}, false},
		{"orders:99999999999", Topic{}, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseTopic(tc.in)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("ParseTopic(%q) = %+v, %v; want %+v, ok %v", tc.in, got, err, tc.want, tc.ok)
			}
			if err != nil && (!errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.in)) {
				t.Errorf("error %v: want ErrBadConfig naming %q", err, tc.in)
			}
		})
	}
}
