package demo

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

func TestScreenRendersLiveAndPlain(t *testing.T) {
	t.Parallel()
	proxy := []row{
		{Topic: "orders", State: "PROXY", Lag: 12 * time.Millisecond, Rate: 199.6, Stall: 17400 * time.Microsecond, Acked: 400},
		{Topic: "payments", State: "MIGRATING", Lag: 1500 * time.Millisecond, Rate: 0, Stall: 2 * time.Second, Acked: 380},
	}
	done := []row{
		{Topic: "orders", State: "COMPLETE", Lag: -1, Rate: 201, Stall: 20 * time.Millisecond, Acked: 600},
		{Topic: "payments", State: "PROXY", Lag: 0, Rate: 800, Stall: 3 * time.Second, Acked: 600},
	}
	sums := []summary{{Topic: "orders", Partitions: 6, Acked: 600, Attempts: 1, Stall: 20 * time.Millisecond},
		{Topic: "payments", Partitions: 3, Acked: 600, Lost: 2, Attempts: 2, RolledBack: 1, Stall: 3 * time.Second}}
	const (
		header   = "  topic    state      time lag  acked/s  longest stall   acked\n"
		proxyTab = header +
			"  orders   PROXY          12ms      200           17ms     400\n" +
			"  payments MIGRATING      1.5s        0             2s     380\n"
		doneTab = header +
			"  orders   COMPLETE          -      201           20ms     600\n" +
			"  payments PROXY            0s      800             3s     600\n"
		erase3   = "\x1b[3A\r\x1b[J"
		sumTable = "  topic    partitions   acked  lost  cutovers  rolled back  longest stall\n" +
			"  orders            6     600     0         1            0           20ms\n" +
			"  payments          3     600     2         2            1             3s\n"
	)
	for _, tc := range []struct {
		name string
		live bool
		do   func(s *screen)
		want string
	}{
		{"plain: narration as it comes", false, func(s *screen) { s.say("1. PROXY: %s", "forwarded") }, "1. PROXY: forwarded\n"},
		{"plain: a frame is a line per topic", false, func(s *screen) { s.frame(proxy) },
			"  [orders  ] PROXY,    time lag 12ms, 200 acked/s, longest stall 17ms, 400 acked\n" +
				"  [payments] MIGRATING, time lag 1.5s, 0 acked/s, longest stall 2s, 380 acked\n"},
		{"plain: narration after a frame moves nothing", false, func(s *screen) { s.frame(done); s.say("event") },
			"  [orders  ] COMPLETE, time lag -, 201 acked/s, longest stall 20ms, 600 acked\n" +
				"  [payments] PROXY,    time lag 0s, 800 acked/s, longest stall 3s, 600 acked\n" +
				"event\n"},
		{"plain: final table", false, func(s *screen) { s.table(sums) }, sumTable},
		{"live: narration before a frame", true, func(s *screen) { s.say("event") }, "event\n"},
		{"live: the first frame is drawn", true, func(s *screen) { s.frame(proxy) }, proxyTab},
		{"live: the next frame replaces it", true, func(s *screen) { s.frame(proxy); s.frame(done) },
			proxyTab + erase3 + doneTab},
		{"live: narration goes above the table", true, func(s *screen) { s.frame(proxy); s.say("event: x"); s.frame(done) },
			proxyTab + erase3 + "event: x\n" + proxyTab + erase3 + doneTab},
		{"live: the table stays once left", true, func(s *screen) { s.frame(done); s.leave(); s.say(""); s.table(sums) },
			doneTab + "\n" + sumTable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			tc.do(newScreen(&out, tc.live))
			if got := out.String(); got != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", strings.ReplaceAll(got, "\x1b", "ESC"), strings.ReplaceAll(tc.want, "\x1b", "ESC"))
			}
		})
	}
}

func TestIsTerminal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		w    func(t *testing.T) any
	}{
		{"a buffer", func(*testing.T) any { return &bytes.Buffer{} }},
		{"a file", func(t *testing.T) any {
			f, err := os.CreateTemp(t.TempDir(), "out")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			return f
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if isTerminal(tc.w(t).(io.Writer)) {
				t.Errorf("%s is taken for a terminal: it would get ANSI redraws", tc.name)
			}
		})
	}
}
