package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/httpapi"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
)

// TestApplyPlan: `baton apply` against a `baton controlplane` process on
// kfake clusters and an agent stand-in holding its lease. A dry run prints
// the diff (adds, a regex matched against the source's topics, a REJECT ->
// PROXY move, a cutover) and writes nothing; the apply with --wait makes
// it, the cutover to COMPLETE; applying the same plan again prints no
// change and writes nothing (the event log and every topic's version as
// they were); a changed plan's dry run shows the change; plans the control
// plane cannot apply (a COMPLETE topic back to PROXY, a managed topic's
// hold changed, other clusters) and a bad field are refused naming the
// line, writing nothing. Without --wait a cutover is started and left
// running: applying again says so and starts nothing, and --wait follows
// it, exiting 3 when its --timeout passes first.
func TestApplyPlan(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a control plane process with embedded etcd and kfake clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	src, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	dst, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dst.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(src.Addrs()...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for _, topic := range []string{"orders", "payments", "invoices", "logs-a", "logs-b", "other", "shipping"} {
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("before")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	api, log := startControlPlane(t, "--source", src.Bootstrap(), "--destination", dst.Bootstrap(), "--write-guard", "none",
		"--data-dir", filepath.Join(t.TempDir(), "etcd"), "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--cutover-timeout", "20s")
	// shipping's cutover waits for the agent stand-in for good (one
	// request in flight): it stays MIGRATING until its 20 s timeout.
	startHoldingAgent(t, grpcUpLine.FindStringSubmatch(log.String())[1], "shipping")
	cl := &httpapi.Client{Base: api}
	for _, args := range [][]string{{"topic", "add", "invoices", "--state", "REJECT"}, {"topic", "add", "other"}} {
		if _, err := runCLI(append(args, "--server", api)...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, log)
		}
	}

	dir := t.TempDir()
	writePlan := func(name, topics string) string {
		file := filepath.Join(dir, name)
		body := fmt.Sprintf("apiVersion: baton.io/v1\nkind: MigrationPlan\nclusters:\n  source: [%s]\n  destination: [%s]\ntopics:\n%s",
			strings.Join(src.Addrs(), ", "), strings.Join(dst.Addrs(), ", "), topics)
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return file
	}
	// Lines 7 on: the topics.
	planned := writePlan("plan.yaml", `  - name: orders
    state: proxy
    shadow: {latencyEmulation: true}
  - name: payments
    state: complete
    holdMax: 3s
  - name: invoices
    state: proxy
  - regex: "logs-.*"
    state: reject
`)
	apply := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		stdout, stderr, code = batonExit(t, append([]string{"apply", "--server", api}, args...)...)
		t.Logf("baton apply %v: exit %d\nstdout:\n%sstderr:\n%s", args, code, stdout, stderr)
		return stdout, stderr, code
	}
	// written is what tells a write to the control plane: its event log's
	// length and every topic's version.
	written := func(t *testing.T) string {
		t.Helper()
		n := 0
		if err := cl.Events(ctx, "", false, func(controlplane.Event) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		ts, err := cl.Topics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%d events;", n)
		for _, tp := range ts {
			fmt.Fprintf(&b, " %s %s v%d", tp.Name, tp.State, tp.Version)
		}
		return b.String()
	}
	unchangedBy := func(t *testing.T, before string, what string) {
		t.Helper()
		if after := written(t); after != before {
			t.Errorf("%s wrote to the control plane: before %s\nafter %s", what, before, after)
		}
	}

	t.Run("dry-run", func(t *testing.T) {
		before := written(t)
		stdout, _, code := apply("-f", planned, "--dry-run")
		want := `~ topic invoices: REJECT -> PROXY
+ topic logs-a: REJECT (by the regex of line 15)
+ topic logs-b: REJECT (by the regex of line 15)
+ topic orders: PROXY (latencyEmulation on)
+ topic payments: PROXY -> COMPLETE (holdMax 3s; migrate: mode hold, holdMax 3s)
= 0 unchanged
  1 managed topic the plan does not name, left as they are: other
`
		if code != 0 || stdout != want {
			t.Errorf("the dry run exited %d and printed\n%s\nwant exit 0 and\n%s", code, stdout, want)
		}
		unchangedBy(t, before, "the dry run")
	})

	t.Run("apply", func(t *testing.T) {
		stdout, _, code := apply("-f", planned, "--wait", "--timeout", "2m")
		if code != 0 {
			t.Fatalf("apply --wait exited %d, want 0", code)
		}
		for _, w := range []string{"added orders: PROXY at version ", "moved invoices: PROXY at version ",
			"added logs-a: REJECT", "added logs-b: REJECT", "migrating payments: MIGRATING at version ", "payments: COMPLETE after "} {
			if !strings.Contains(stdout, w) {
				t.Errorf("apply printed no %q", w)
			}
		}
		if got := steps(stdout); len(got) < 2 || got[0] != controlplane.EventInitiated || got[len(got)-1] != controlplane.EventCompleted {
			t.Errorf("apply --wait printed the cutover's steps %v, want initiated ... completed", got)
		}
		ts, err := cl.Topics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]controlplane.Topic{}
		for _, tp := range ts {
			got[tp.Name] = tp
		}
		for name, want := range map[string]migration.State{"orders": migration.Proxy, "payments": migration.Complete,
			"invoices": migration.Proxy, "logs-a": migration.Reject, "logs-b": migration.Reject, "other": migration.Proxy} {
			if got[name].State != want {
				t.Errorf("after the apply %s is %s, want %s", name, got[name].State, want)
			}
		}
		if !got["orders"].Shadow.LatencyEmulation || got["invoices"].Shadow.LatencyEmulation {
			t.Errorf("latency emulation: orders %v (want on), invoices %v (want off)", got["orders"].Shadow, got["invoices"].Shadow)
		}
		if got["payments"].HoldMax != 3*time.Second {
			t.Errorf("payments was added with holdMax %v, want 3s", got["payments"].HoldMax)
		}
	})

	t.Run("again", func(t *testing.T) {
		before := written(t)
		for _, args := range [][]string{{"-f", planned}, {"-f", planned, "--wait"}} {
			stdout, _, code := apply(args...)
			want := "= 5 unchanged\n  1 managed topic the plan does not name, left as they are: other\n"
			if code != 0 || stdout != want {
				t.Errorf("applied again (%v), it exited %d and printed\n%s\nwant exit 0 and\n%s", args, code, stdout, want)
			}
		}
		unchangedBy(t, before, "applying the same plan again")
	})

	t.Run("change", func(t *testing.T) {
		before := written(t)
		changed := writePlan("changed.yaml", "  - name: orders\n    state: reject\n    shadow: {latencyEmulation: false}\n"+
			"  - name: payments\n    state: complete\n")
		stdout, _, code := apply("-f", changed, "--dry-run")
		want := "~ topic orders: PROXY -> REJECT (latencyEmulation on -> off)\n= 1 unchanged\n" +
			"  4 managed topics the plan does not name, left as they are: invoices, logs-a, logs-b, other\n"
		if code != 0 || stdout != want {
			t.Errorf("the changed plan's dry run exited %d and printed\n%s\nwant exit 0 and\n%s", code, stdout, want)
		}
		unchangedBy(t, before, "the changed plan's dry run")
	})

	t.Run("refusals", func(t *testing.T) {
		before := written(t)
		otherClusters := filepath.Join(dir, "other-clusters.yaml")
		if err := os.WriteFile(otherClusters, []byte("apiVersion: baton.io/v1\nkind: MigrationPlan\nclusters:\n"+
			"  source: [elsewhere:9092]\n  destination: ["+strings.Join(dst.Addrs(), ",")+"]\ntopics:\n  - name: orders\n    state: proxy\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name, file string
			want       []string
		}{
			{"one-way", writePlan("back.yaml", "  - name: orders\n    state: proxy\n  - name: payments\n    state: proxy\n"),
				[]string{"back.yaml:10: topics[1].state: payments is COMPLETE, and COMPLETE is one-way: it cannot go back to PROXY"}},
			{"hold", writePlan("hold.yaml", "  - name: orders\n    state: reject\n  - name: invoices\n    state: proxy\n    holdMax: 1s\n"),
				[]string{"hold.yaml:11: topics[1].holdMax: invoices has holdMax 5s on the control plane, the plan 1s: " +
					"the API cannot change a managed topic's holdMax"}},
			{"clusters", otherClusters,
				[]string{"other-clusters.yaml:4: clusters.source: elsewhere:9092 is not the control plane's source cluster (" + src.Bootstrap() + ")"}},
			{"bad field", writePlan("bad.yaml", "  - name: orders\n    state: proxy\n  - name: payments\n    state: complete\n    mode: fast\n"),
				[]string{`bad.yaml:11: topics[1].mode: "fast" is not one of hold, retriable`}},
		} {
			for _, args := range [][]string{{"-f", tc.file}, {"-f", tc.file, "--dry-run"}} {
				_, stderr, code := apply(args...)
				if code != 1 {
					t.Errorf("%s: apply %v exited %d, want 1", tc.name, args, code)
				}
				for _, w := range tc.want {
					if !strings.Contains(stderr, w) {
						t.Errorf("%s: apply %v does not say %q:\n%s", tc.name, args, w, stderr)
					}
				}
			}
		}
		unchangedBy(t, before, "the refused plans")
	})

	t.Run("no-wait", func(t *testing.T) {
		shipping := writePlan("shipping.yaml", "  - name: shipping\n    state: complete\n")
		first := true
		wait.For(t, 2*time.Minute, "apply to start the cutover of shipping", func() string {
			stdout, stderr, code := apply("-f", shipping)
			if first && !strings.Contains(stdout, "added shipping: PROXY at version ") {
				t.Errorf("the first apply did not add shipping")
			}
			first = false
			switch {
			case code == 0 && strings.Contains(stdout, "migrating shipping: MIGRATING at version "):
				return ""
			case code == 1 && strings.Contains(stderr, "gate time-lag") && strings.Contains(stderr, "apply again, or with --wait"):
				return stderr // refused until the time lag is measured
			}
			t.Fatalf("apply exited %d", code)
			return ""
		})
		before := written(t)
		stdout, _, code := apply("-f", shipping)
		want := "~ topic shipping: MIGRATING -> COMPLETE (cutover running: attempt 1, step wait-agents; nothing to start)\n= 0 unchanged\n"
		if code != 0 || !strings.HasPrefix(stdout, want) {
			t.Errorf("applied again mid-cutover, it exited %d and printed\n%s\nwant exit 0 and, first,\n%s", code, stdout, want)
		}
		unchangedBy(t, before, "applying again mid-cutover")
		_, stderr, code := apply("-f", shipping, "--wait", "--timeout", "1s")
		if code != exitUndecided || !strings.Contains(stderr, "shipping: stopped waiting (--timeout 1s passed): the cutover (attempt 1) is still going on") {
			t.Errorf("apply --wait --timeout 1s mid-cutover exited %d, want %d saying the cutover goes on:\n%s", code, exitUndecided, stderr)
		}
		unchangedBy(t, before, "following the running cutover")
		if _, err := runCLI("topic", "abort", "shipping", "--server", api); err != nil {
			t.Fatalf("abort: %v", err)
		}
	})
}
