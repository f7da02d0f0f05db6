package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/httpapi"
	"github.com/baton-kafka/baton/internal/wait"
)

// cutoverStack is what BenchmarkCutoverStall migrates through: a `baton
// controlplane` process (embedded etcd, the in-process replicator, its HTTP
// API) and `baton agent` processes connected to it over xDS.
type cutoverStack struct {
	api    *httpapi.Client
	agents []cutoverAgent
	log    *bytes.Buffer // the control plane's stdout and stderr
}

// cutoverAgent is one `baton agent` process of the stack.
type cutoverAgent struct {
	node, addr, admin string
}

// startCutoverStack starts the control plane from src to dst and agents
// named by nodes, and returns once every agent holds a lease.
func startCutoverStack(b *testing.B, bin, src, dst string, nodes ...string) *cutoverStack {
	grpcAddr, httpAddr := freeAddr(b), freeAddr(b)
	var log bytes.Buffer
	// No authorizer on the test clusters: neither the write guard nor the
	// source fence can act (auto would say so and pick none).
	cmd := exec.Command(bin, "controlplane", "--source", src, "--destination", dst,
		"--data-dir", filepath.Join(b.TempDir(), "etcd"), "--write-guard", "none", "--source-fence", "none",
		"--grpc", grpcAddr, "--http", httpAddr, "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = &syncWriter{w: &log}, &syncWriter{w: &log}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if b.Failed() {
			b.Logf("control plane log, last lines:\n%s", lastLines(log.String(), 40))
		}
	})
	st := &cutoverStack{api: &httpapi.Client{Base: "http://" + httpAddr, HTTP: &http.Client{}}, log: &log}
	wait.For(b, time.Minute, "the control plane's HTTP API", func() string {
		select {
		case <-exited:
			b.Fatalf("the control plane exited:\n%s", lastLines(log.String(), 40))
		default:
		}
		if _, err := st.api.Topics(context.Background()); err != nil {
			return err.Error()
		}
		return ""
	})
	for _, node := range nodes {
		admin := freeAddr(b)
		// startAgentProcess names bootstrap as both clusters; the later
		// --destination wins.
		addr, _, stop := startAgentProcess(b, bin, src, "--destination", dst, "--control-plane", grpcAddr,
			"--node-id", node, "--state-dir", filepath.Join(b.TempDir(), node), "--admin", admin)
		b.Cleanup(stop)
		st.agents = append(st.agents, cutoverAgent{node: node, addr: addr, admin: admin})
	}
	st.waitAgents(b, 0)
	return st
}

// waitAgents waits until every agent of the stack holds a lease and has
// acked config version v.
func (st *cutoverStack) waitAgents(b *testing.B, v uint64) {
	wait.For(b, time.Minute, fmt.Sprintf("every agent to hold a lease at version %d", v), func() string {
		views, err := st.api.Agents(context.Background())
		if err != nil {
			return err.Error()
		}
		ok := map[string]bool{}
		for _, a := range views {
			ok[a.Node] = a.LeaseValid && a.AckedVersion >= v
		}
		var behind []string
		for _, a := range st.agents {
			if !ok[a.node] {
				behind = append(behind, a.node)
			}
		}
		return strings.Join(behind, ", ")
	})
}

// waitLag waits until topic's replication time lag is known and within the
// time-lag gate (a quarter of the default cutover timeout).
func (st *cutoverStack) waitLag(b *testing.B, topic string) {
	wait.For(b, 2*time.Minute, "the replication lag of "+topic, func() string {
		s, err := st.api.Status(context.Background(), topic)
		switch {
		case err != nil:
			return err.Error()
		case s.LagError != "":
			return s.LagError
		case s.Lag > controlplane.DefaultCutoverTimeout/4:
			return fmt.Sprintf("lag %v", s.Lag)
		}
		return ""
	})
}

// migrate starts topic's cutover, again while a gate refuses it (the lag
// sampled between waitLag and now), for up to a minute.
func (st *cutoverStack) migrate(b *testing.B, ctx context.Context, topic string) {
	wait.For(b, time.Minute, "migrate "+topic, func() string {
		_, err := st.api.Migrate(ctx, topic, "bench", nil)
		switch {
		case err == nil:
			return ""
		case errors.Is(err, controlplane.ErrGateRefused):
			return err.Error()
		}
		b.Fatalf("migrate %s: %v", topic, err)
		return ""
	})
}

// errDecided stops the event stream once the cutover is decided.
var errDecided = errors.New("bench: cutover decided")

// cutoverEvents follows topic's events until its cutover completes, and
// returns them; a rollback, or no outcome within limit, fails b.
func (st *cutoverStack) cutoverEvents(b *testing.B, ctx context.Context, topic string, limit time.Duration) []controlplane.Event {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var evs []controlplane.Event
	err := st.api.Events(ctx, topic, true, func(e controlplane.Event) error {
		evs = append(evs, e)
		if e.Kind == controlplane.EventCompleted || e.Kind == controlplane.EventRolledBack {
			return errDecided
		}
		return nil
	})
	var lines []string
	for _, e := range evs {
		lines = append(lines, fmt.Sprintf("%s %s %s %s", e.Time.Format("15:04:05.000"), e.Kind, e.Reason, e.Took))
	}
	switch {
	case !errors.Is(err, errDecided):
		b.Fatalf("following %s's events: %v; events:\n%s", topic, err, strings.Join(lines, "\n"))
	case evs[len(evs)-1].Kind != controlplane.EventCompleted:
		b.Fatalf("%s's cutover rolled back:\n%s", topic, strings.Join(lines, "\n"))
	}
	return evs
}

// errorAnswers is the partition results with an error every agent
// answered produce with so far: what the producers retried without
// telling their application.
func (st *cutoverStack) errorAnswers(b *testing.B) float64 {
	const series = "baton_agent_produce_partitions_total{"
	var n float64
	for _, a := range st.agents {
		for _, l := range strings.Split(adminGet(b, a.admin, "/metrics"), "\n") {
			if strings.HasPrefix(l, series) && !strings.HasPrefix(l, series+`error="none"}`) {
				var v float64
				fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v)
				n += v
			}
		}
	}
	return n
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], "\n")
}
