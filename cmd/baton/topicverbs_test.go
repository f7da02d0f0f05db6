package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/httpapi"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/xds"
)

// grpcUpLine is the control plane's "control plane up" log line; its grpc
// attribute is the xDS and Lease address.
var grpcUpLine = regexp.MustCompile(`msg="control plane up" grpc=(\S+)`)

// stepLine is a line `migrate --wait` prints for an event: the time since
// the attempt started, then the kind.
var stepLine = regexp.MustCompile(`(?m)^ *\+\d+\.\d{3}s  (\S+)`)

// holdingAgent is an agent stand-in: the xDS client and the Lease service,
// no data path. It acks every config version it applied, so it holds its
// lease, and reports a topic stopped and drained once MIGRATING reached
// it, except the held topics: one request in flight on them for good, so
// that their cutover waits for it until it times out or is aborted.
type holdingAgent struct {
	keeper *xds.LeaseKeeper
	held   map[string]bool

	mu      sync.Mutex
	version uint64
	routes  map[string]batonv1.State
}

func startHoldingAgent(t *testing.T, grpcAddr string, held ...string) *holdingAgent {
	t.Helper()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	a := &holdingAgent{held: map[string]bool{}, routes: map[string]batonv1.State{}}
	for _, h := range held {
		a.held[h] = true
	}
	node := xds.NodeMeta("holder", "team", "app")
	quiet := xds.ClientLogger(slog.New(slog.DiscardHandler))
	client, err := xds.NewClient(conn, node, quiet, xds.Backoff(20*time.Millisecond, 200*time.Millisecond),
		xds.OnRoutes(func(v uint64, rs []*batonv1.TopicRoute) error {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.version = v
			clear(a.routes)
			for _, r := range rs {
				a.routes[r.GetTopic()] = r.GetState()
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	if a.keeper, err = xds.NewLeaseKeeper(conn, node, a.report, quiet, xds.Backoff(20*time.Millisecond, 200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = client.Run(ctx) }()
	go func() { defer wg.Done(); _ = a.keeper.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return a
}

func (a *holdingAgent) report() (uint64, []*batonv1.TopicDrain) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*batonv1.TopicDrain
	for topic, st := range a.routes {
		stopped := st == batonv1.State_STATE_MIGRATING || st == batonv1.State_STATE_COMPLETE
		d := &batonv1.TopicDrain{Topic: topic, StoppedForwarding: stopped, Drained: stopped}
		if a.held[topic] {
			d.InFlight, d.Drained = 1, false
		}
		out = append(out, d)
	}
	return a.version, out
}

// routed reports whether the agent holds a lease and a route for topic.
func (a *holdingAgent) routed(topic string) bool {
	a.mu.Lock()
	_, ok := a.routes[topic]
	a.mu.Unlock()
	return ok && a.keeper.Valid()
}

// batonExit runs `baton args...` in a process of its own to its end, and
// returns what it printed and its exit code.
func batonExit(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), batonChildEnv+"=1")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// migrateWait runs `baton topic migrate TOPIC --wait args...` until the
// time-lag gate lets it start (a new topic's lag is not measured at once).
func migrateWait(t *testing.T, api, topic string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	wait.For(t, 2*time.Minute, "the time-lag gate to let "+topic+" migrate", func() string {
		stdout, stderr, code = batonExit(t, append([]string{"topic", "migrate", topic, "--wait", "--server", api}, args...)...)
		if code == 1 && strings.Contains(stderr, "gate time-lag") {
			return stderr
		}
		return ""
	})
	return stdout, stderr, code
}

// steps is the event kinds a `migrate --wait` printed, in order.
func steps(stdout string) []string {
	var out []string
	for _, m := range stepLine.FindAllStringSubmatch(stdout, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestTopicVerbs: `baton topic proxy`, `reject` and `remove`, and
// `migrate --wait`, against a `baton controlplane` process on kfake and
// an agent stand-in holding its lease. REJECT -> PROXY and back through the
// CLI; removal of a PROXY topic; the refusals (an unknown topic, a
// transition the state machine refuses, naming the state and what it
// allows, a topic mid-cutover, a COMPLETE topic's removal without
// --force), each with its HTTP status; `migrate --wait` exiting 0 at
// COMPLETE, 2 at a rollback (a cutover the agent holds until it times
// out) and 3 when its --timeout passes first (the cutover still running,
// and said to be).
func TestTopicVerbs(t *testing.T) {
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
	rejected := []string{"parked", "parked-twice", "parked-multi"}
	proxied := []string{"demoted", "dropped", "done", "held-to-rollback", "held-past-timeout"}
	for _, topic := range append(append([]string{}, rejected...), proxied...) {
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("before")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// A cutover timeout a loaded machine completes within, and that the
	// held cutovers wait out.
	api, log := startControlPlane(t, "--source", src.Bootstrap(), "--destination", dst.Bootstrap(), "--write-guard", "none",
		"--data-dir", filepath.Join(t.TempDir(), "etcd"), "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--cutover-timeout", "20s")
	grpcAddr := grpcUpLine.FindStringSubmatch(log.String())[1]
	holder := startHoldingAgent(t, grpcAddr, "held-to-rollback", "held-past-timeout")
	cli := func(args ...string) (string, error) { return runCLI(append(args, "--server", api)...) }
	for _, topic := range rejected {
		if _, err := cli("topic", "add", topic, "--state", "REJECT"); err != nil {
			t.Fatalf("topic add %s: %v\n%s", topic, err, log)
		}
	}
	for _, topic := range proxied {
		if _, err := cli("topic", "add", topic); err != nil {
			t.Fatalf("topic add %s: %v\n%s", topic, err, log)
		}
	}
	wait.For(t, time.Minute, "the agent stand-in to hold a lease and every route", func() string {
		for _, topic := range proxied {
			if !holder.routed(topic) {
				return "no lease, or no route for " + topic
			}
		}
		return ""
	})
	state := func(t *testing.T, topic string) string {
		t.Helper()
		out, err := cli("topic", "status", topic)
		if err != nil {
			t.Fatalf("topic status %s: %v", topic, err)
		}
		m := regexp.MustCompile(`(?m)^state: +(\S+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("topic status %s printed no state:\n%s", topic, out)
		}
		return m[1]
	}

	t.Run("moves", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			args   []string
			topics []string
			want   string
		}{
			{[]string{"topic", "proxy", "parked"}, []string{"parked"}, "PROXY"},
			{[]string{"topic", "reject", "demoted"}, []string{"demoted"}, "REJECT"},
		} {
			out, err := cli(tc.args...)
			if err != nil {
				t.Fatalf("%v: %v", tc.args, err)
			}
			for _, topic := range tc.topics {
				if !regexp.MustCompile(`(?m)^` + topic + ` +` + tc.want + ` `).MatchString(out) {
					t.Errorf("%v printed no %s row in %s:\n%s", tc.args, topic, tc.want, out)
				}
				if got := state(t, topic); got != tc.want {
					t.Errorf("after %v, %s is %s, want %s", tc.args, topic, got, tc.want)
				}
			}
		}
		out, err := cli("events", "--topic", "parked")
		if err != nil || !strings.Contains(out, "transition") || !strings.Contains(out, "REJECT->PROXY") {
			t.Errorf("the event log of parked holds no REJECT->PROXY transition (%v):\n%s", err, out)
		}

		out, err = cli("topic", "remove", "dropped")
		if err != nil || !strings.Contains(out, "removed dropped: agents now route it as a topic no route names, to the source") {
			t.Fatalf("topic remove dropped (PROXY): %v\n%s", err, out)
		}
		if out, err := cli("topic", "list"); err != nil || strings.Contains(out, "dropped") {
			t.Errorf("topic list after the removal (%v):\n%s", err, out)
		}
		if out, err := cli("events", "--topic", "dropped"); err != nil || !strings.Contains(out, "removed") {
			t.Errorf("the event log of dropped holds no removed event (%v):\n%s", err, out)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			args   []string
			status int
			want   []string
		}{
			{[]string{"topic", "proxy", "nosuch"}, http.StatusNotFound, []string{"unknown topic: nosuch"}},
			{[]string{"topic", "remove", "nosuch"}, http.StatusNotFound, []string{"unknown topic: nosuch"}},
			{[]string{"topic", "reject", "parked-twice"}, http.StatusConflict,
				[]string{`REJECT -> REJECT: rule "no-self-transition"`, "from REJECT the state machine allows: PROXY, removed"}},
			{[]string{"topic", "migrate", "parked-twice", "--wait"}, http.StatusConflict,
				[]string{`rule "migrate-from-proxy-only"`, "from REJECT the state machine allows: PROXY, removed"}},
			// Every topic named is tried: parked-multi moves, nosuch is named.
			{[]string{"topic", "proxy", "nosuch", "parked-multi"}, http.StatusNotFound, []string{"nosuch: controlplane: unknown topic: nosuch"}},
		} {
			_, err := cli(tc.args...)
			t.Logf("%v: %v", tc.args, err)
			var ae *httpapi.Error
			if !errors.As(err, &ae) || ae.Status != tc.status {
				t.Errorf("%v: %v; want HTTP %d", tc.args, err, tc.status)
				continue
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: %q does not say %q", tc.args, err, w)
				}
			}
		}
		if got := state(t, "parked-multi"); got != "PROXY" {
			t.Errorf("parked-multi, named after a topic refused, is %s, want PROXY", got)
		}
		if _, err := cli("topic", "migrate", "done", "--timeout", "1s"); err == nil || !strings.Contains(err.Error(), "--timeout needs --wait") {
			t.Errorf("--timeout without --wait: %v", err)
		}
	})

	t.Run("wait-complete", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := migrateWait(t, api, "done")
		t.Logf("stdout:\n%sstderr:\n%s", stdout, stderr)
		if code != 0 {
			t.Fatalf("migrate --wait of done exited %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		got := steps(stdout)
		if len(got) < 2 || got[0] != controlplane.EventInitiated || got[len(got)-1] != controlplane.EventCompleted ||
			!strings.Contains(stdout, "done: COMPLETE after ") {
			t.Errorf("migrate --wait printed steps %v, want initiated ... completed, then COMPLETE:\n%s", got, stdout)
		}
		// COMPLETE is one-way, and its removal needs --force.
		for _, tc := range []struct {
			args []string
			want []string
		}{
			{[]string{"topic", "proxy", "done"}, []string{`rule "complete-is-one-way"`, "from COMPLETE the state machine allows: removed"}},
			{[]string{"topic", "reject", "done"}, []string{`rule "complete-is-one-way"`}},
			{[]string{"topic", "remove", "done"}, []string{"controlplane: refused without force: remove done: it is COMPLETE",
				"would write the source again", "baton topic remove done --force"}},
		} {
			_, err := cli(tc.args...)
			t.Logf("%v: %v", tc.args, err)
			var ae *httpapi.Error
			if !errors.As(err, &ae) || ae.Status != http.StatusConflict {
				t.Errorf("%v: %v; want HTTP 409", tc.args, err)
				continue
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: %q does not say %q", tc.args, err, w)
				}
			}
		}
		if out, err := cli("topic", "remove", "done", "--force"); err != nil || !strings.Contains(out, "removed done") {
			t.Errorf("topic remove done --force: %v\n%s", err, out)
		}
	})

	t.Run("wait-rollback", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := migrateWait(t, api, "held-to-rollback")
		t.Logf("stdout:\n%sstderr:\n%s", stdout, stderr)
		if code != exitRolledBack {
			t.Fatalf("migrate --wait of a held topic exited %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitRolledBack, stdout, stderr)
		}
		got := steps(stdout)
		if len(got) < 3 || got[0] != controlplane.EventInitiated || !strings.Contains(strings.Join(got, " "), controlplane.EventTimedOut) ||
			got[len(got)-1] != controlplane.EventRolledBack {
			t.Errorf("migrate --wait printed steps %v, want initiated ... timed_out ... rolled_back:\n%s", got, stdout)
		}
		if !strings.Contains(stderr, "held-to-rollback: the cutover (attempt 1) rolled back to PROXY after ") ||
			!strings.Contains(stderr, "cutover timeout passed") {
			t.Errorf("the error does not say the cutover rolled back, and why:\n%s", stderr)
		}
		if got := state(t, "held-to-rollback"); got != "PROXY" {
			t.Errorf("after the rollback the topic is %s, want PROXY", got)
		}
	})

	t.Run("wait-timeout", func(t *testing.T) {
		t.Parallel()
		// The held cutover cannot be decided before its 20 s deadline; the
		// wait gives up after 1 s of it.
		stdout, stderr, code := migrateWait(t, api, "held-past-timeout", "--timeout", "1s")
		t.Logf("stdout:\n%sstderr:\n%s", stdout, stderr)
		if code != exitUndecided {
			t.Fatalf("migrate --wait --timeout 1s exited %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitUndecided, stdout, stderr)
		}
		if !strings.Contains(stderr, "held-past-timeout: stopped waiting (--timeout 1s passed): the cutover (attempt 1) is still going on, at step ") ||
			!strings.Contains(stderr, "baton topic abort held-past-timeout") {
			t.Errorf("the error does not say the cutover goes on:\n%s", stderr)
		}
		// Mid-cutover, every state change and the removal are refused.
		for _, args := range [][]string{{"topic", "proxy", "held-past-timeout"}, {"topic", "reject", "held-past-timeout"},
			{"topic", "remove", "held-past-timeout", "--force"}} {
			_, err := cli(args...)
			t.Logf("%v: %v", args, err)
			var ae *httpapi.Error
			if !errors.As(err, &ae) || ae.Status != http.StatusConflict ||
				!strings.Contains(err.Error(), "held-past-timeout is MIGRATING (attempt 1, step ") ||
				!strings.Contains(err.Error(), "to end it now: baton topic abort held-past-timeout") {
				t.Errorf("%v mid-cutover: %v; want 409 saying it is MIGRATING and naming the abort", args, err)
			}
		}
		if _, err := cli("topic", "abort", "held-past-timeout"); err != nil {
			t.Fatalf("abort: %v", err)
		}
		if got := state(t, "held-past-timeout"); got != "PROXY" {
			t.Errorf("after the abort the topic is %s, want PROXY", got)
		}
	})
}
