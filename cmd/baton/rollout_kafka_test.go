package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/controlplane/httpapi"
	"github.com/baton-kafka/baton/controlplane/rollout"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/test/kafka"
)

// TestRolloutTwoNamespacesRealKafka is the rollout's acceptance on
// real Apache Kafka: agents in namespaces a and b, t-a written only from
// a, t-b only from b, t-ab from both, producers writing all along. Wave a
// (baton rollout wave) moves only t-a while t-b and t-ab stay in PROXY;
// the plan's waves run again (baton rollout run) skip nothing they must
// not and move t-b and t-ab with wave b; baton rollout status shows each
// step; every acked record is on the destination.
func TestRolloutTwoNamespacesRealKafka(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts Apache Kafka and control plane processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Both clusters at once: a broker's start is mostly the JVM's.
	started := make(chan error, 2)
	var src, dst *kafka.Cluster
	for _, c := range []**kafka.Cluster{&src, &dst} {
		dir := t.TempDir()
		go func() {
			var err error
			*c, err = kafka.Start(ctx, kafka.Brokers(1), kafka.Partitions(3), kafka.Dir(dir))
			started <- err
		}()
	}
	for range 2 {
		if err := <-started; err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []*kafka.Cluster{src, dst} {
		t.Cleanup(func() { _ = c.Stop() })
	}
	topics := []string{"t-a", "t-ab", "t-b"}
	admin, err := kgo.NewClient(kgo.SeedBrokers(src.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := kadm.NewClient(admin).CreateTopics(ctx, 3, 1, nil, topics...); err != nil {
		t.Fatal(err)
	}

	api, log := startControlPlane(t, "--source", src.Bootstrap(), "--destination", dst.Bootstrap(), "--write-guard", "none",
		"--data-dir", filepath.Join(t.TempDir(), "etcd"), "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--cutover-timeout", "60s")
	grpcAddr := grpcUpLine.FindStringSubmatch(log.String())[1]
	for _, topic := range topics {
		if _, err := runCLI("topic", "add", topic, "--server", api); err != nil {
			t.Fatalf("topic add %s: %v\n%s", topic, err, log)
		}
	}
	agentA, _ := startAgentIn(t, ctx, "a-1", "a", []string{grpcAddr}, src.Addrs(), dst.Addrs())
	agentB, _ := startAgentIn(t, ctx, "b-1", "b", []string{grpcAddr}, src.Addrs(), dst.Addrs())
	producers := map[string][]*haProducer{
		"t-a":  {startTopicProducer(t, ctx, agentA.Addr(), "t-a")},
		"t-b":  {startTopicProducer(t, ctx, agentB.Addr(), "t-b")},
		"t-ab": {startTopicProducer(t, ctx, agentA.Addr(), "t-ab"), startTopicProducer(t, ctx, agentB.Addr(), "t-ab")},
	}
	all := slices.Concat(producers["t-a"], producers["t-b"], producers["t-ab"])
	waitAcked(t, "records acked through PROXY", 20, all...)

	cl := &httpapi.Client{Base: api}
	status := func(step string) string {
		t.Helper()
		out, err := runCLI("rollout", "status", "--server", api)
		if err != nil {
			t.Fatalf("rollout status: %v", err)
		}
		t.Logf("baton rollout status, %s:\n%s", step, out)
		return out
	}
	states := func() map[string]migration.State {
		t.Helper()
		ro, err := cl.Rollout(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]migration.State{}
		for _, rt := range ro.Topics {
			out[rt.Name] = rt.State
		}
		return out
	}
	wait.For(t, 2*time.Minute, "every topic's writers known", func() string {
		out, err := runCLI("rollout", "status", "-o", "json", "--server", api)
		if err != nil {
			return err.Error()
		}
		var ro rollout.Status
		if err := json.Unmarshal([]byte(out), &ro); err != nil {
			return err.Error()
		}
		got := map[string]string{}
		for _, rt := range ro.Topics {
			got[rt.Name] = strings.Join(rt.Writers, ",")
		}
		if want := map[string]string{"t-a": "a", "t-ab": "a,b", "t-b": "b"}; fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Sprintf("writers %v, want %v", got, want)
		}
		return ""
	})
	before := status("in PROXY, before any wave")
	hasRows(t, "status before the waves", before, "a a-1 app", "b b-1 app", "t-a PROXY a a/app", "t-ab PROXY a,b a/app,b/app",
		"t-b PROXY b b/app", "no wave run yet")

	// Wave a, retried by its name while the time-lag gate waits for
	// replication to be measured.
	var waveOut string
	wait.For(t, 3*time.Minute, "wave a run and its cutover COMPLETE", func() string {
		stdout, stderr, code := batonExit(t, "rollout", "wave", "--server", api, "--namespaces", "a", "--name", "a",
			"--complete", "--wait")
		waveOut = stdout
		switch {
		case code == 1 && strings.Contains(stdout, "refused t-a: controlplane: cutover gate refused"):
			return "the gate refused t-a: " + stderr
		case code != 0:
			t.Fatalf("wave a exited %d:\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		return ""
	})
	t.Logf("baton rollout wave --namespaces a:\n%s", waveOut)
	for _, want := range []string{"moves   t-a: MIGRATING", "stays   t-ab: also written from b, in no wave yet",
		"stays   t-b: also written from b", "t-a: COMPLETE after"} {
		if !strings.Contains(waveOut, want) {
			t.Errorf("wave a's output lacks %q", want)
		}
	}
	if got, want := fmt.Sprint(states()), "map[t-a:COMPLETE t-ab:PROXY t-b:PROXY]"; got != want {
		t.Errorf("after wave a: %s, want %s", got, want)
	}
	afterA := status("after wave a")
	hasRows(t, "status after wave a", afterA, "t-a COMPLETE a", "t-ab PROXY a,b", "t-b PROXY b", "a a * t-a - complete",
		"the next wave may start")
	waitAcked(t, "records acked with t-a COMPLETE", 20, all...)

	// The plan's waves: a is the control plane's last wave, retried (it
	// moves nothing more), then b.
	file := filepath.Join(t.TempDir(), "plan.yaml")
	body := fmt.Sprintf(`apiVersion: baton.io/v1
kind: MigrationPlan
clusters:
  source: [%s]
  destination: [%s]
topics:
  - regex: "t-.*"
    state: proxy
waves:
  - name: a
    namespaces: [a]
    until: {complete: true}
  - name: b
    namespaces: [b]
    until: {complete: true}
`, strings.Join(src.Addrs(), ", "), strings.Join(dst.Addrs(), ", "))
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := batonExit(t, "rollout", "run", "-f", file, "--server", api)
	t.Logf("baton rollout run -f plan.yaml: exit %d\n%s%s", code, stdout, stderr)
	if code != 0 {
		t.Fatalf("rollout run exited %d", code)
	}
	for _, want := range []string{"== wave b (namespaces b)", "moves   t-ab: MIGRATING", "moves   t-b: MIGRATING",
		"t-ab: COMPLETE after", "t-b: COMPLETE after"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("rollout run's output lacks %q", want)
		}
	}
	if waveA, _, _ := strings.Cut(stdout, "== wave b"); strings.Contains(waveA, "  moves   ") {
		t.Errorf("wave a moved something when run again:\n%s", waveA)
	}
	if got, want := fmt.Sprint(states()), "map[t-a:COMPLETE t-ab:COMPLETE t-b:COMPLETE]"; got != want {
		t.Errorf("after wave b: %s, want %s", got, want)
	}
	afterB := status("after wave b")
	hasRows(t, "status after wave b", afterB, "t-a COMPLETE", "t-ab COMPLETE", "t-b COMPLETE", "b b * t-ab,t-b - complete")

	waitAcked(t, "records acked with every topic COMPLETE", 20, all...)
	for _, topic := range topics {
		var acked []string
		for _, p := range producers[topic] {
			acked = append(acked, p.stop(t)...)
		}
		t.Logf("%s: %d records acked", topic, len(acked))
		checkTopicOn(t, ctx, dst.Addrs(), topic, acked)
	}
}

// hasRows checks that out has a line for each row: its words in order,
// apart by spaces; a word "*" is any one word.
func hasRows(t *testing.T, what, out string, rows ...string) {
	t.Helper()
	for _, row := range rows {
		var re strings.Builder
		re.WriteString(`(?m)^`)
		for i, w := range strings.Fields(row) {
			if i > 0 {
				re.WriteString(`\s+`)
			}
			if w == "*" {
				re.WriteString(`\S+`)
			} else {
				re.WriteString(regexp.QuoteMeta(w))
			}
		}
		if !regexp.MustCompile(re.String()).MatchString(out) {
			t.Errorf("%s has no line %q", what, row)
		}
	}
}
