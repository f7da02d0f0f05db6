package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/xds"
)

// startRealAgent runs an agent (the real data path) against k's clusters,
// taking its routes and lease from the control plane at addr.
func startRealAgent(t *testing.T, ctx context.Context, k *kafkaEnv, addr, id string) *agent.Agent {
	t.Helper()
	a, _ := startStoppableAgent(t, ctx, k, addr, id)
	return a
}

// startStoppableAgent is startRealAgent with a stop that ends the agent's
// process at once, as a kill does: no last heartbeat.
func startStoppableAgent(t *testing.T, ctx context.Context, k *kafkaEnv, addr, id string) (*agent.Agent, func()) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	a, err := agent.New(agent.Listen("127.0.0.1:0"), agent.Source(k.src.Addrs()...), agent.Destination(k.dst.Addrs()...),
		agent.Logger(quiet), agent.ControlPlane(conn, xds.NodeMeta(id, "team-a", "app")))
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(actx) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	select {
	case <-a.Ready():
	case <-done:
		t.Fatal("agent stopped before serving")
	case <-ctx.Done():
		t.Fatal("agent not serving")
	}
	return a, stop
}

func producerTo(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// waitWatching waits until bypass detection watches topic from S's end
// offsets: writes before that are not judged.
func waitWatching(t *testing.T, p *plane, topic string) {
	t.Helper()
	wait.For(t, 20*time.Second, "bypass detection watches "+topic, func() string {
		if p.cp.Shadow().WatchState(topic).Watching {
			return ""
		}
		return "not yet"
	})
}

// waitJudged waits until every record of topic in S has been judged.
func waitJudged(t *testing.T, ctx context.Context, k *kafkaEnv, p *plane, topic string) {
	t.Helper()
	ends, err := k.repl.SourceEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "every record of "+topic+" judged", func() string {
		st := p.cp.Shadow().WatchState(topic)
		if !st.Watching {
			return "no watch"
		}
		for part, end := range ends {
			if end == 0 {
				continue
			}
			if judged, ok := st.Judged[part]; !ok || judged < end || st.Pending > 0 {
				return fmt.Sprintf("partition %d: judged below %d of %d, %d runs pending", part, judged, end, st.Pending)
			}
		}
		return ""
	})
}

func bypassEvents(t *testing.T, ctx context.Context, p *plane, topic, kind string) []Event {
	t.Helper()
	evs, err := p.cp.Events(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []Event
	for _, e := range evs {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// TestForgottenProducer: with the defaults' grace (the lease), a producer
// writing a PROXY topic's source directly is reported within 10 s of its
// write, once per producer id and partition; producers through the agent,
// acks=all or acks=0, never are.
func TestForgottenProducer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k := startKafka(t, ctx)
	reg := prometheus.NewRegistry()
	// The default lease and F: the grace is the default one.
	p := startPlane(t, ctx, t.TempDir(), "", k, LeaseDuration(migration.DefaultLease), ForwardDeadline(migration.DefaultForwardDeadline), Registry(reg))
	a := startRealAgent(t, ctx, k, p.addr, "pod-1")
	for _, topic := range []string{"through", "noack", "direct"} {
		k.produce(t, ctx, topic, 1) // create it (before the watch: not judged)
		if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: topic, State: migration.Proxy}, "test"); err != nil {
			t.Fatal(err)
		}
	}
	for _, topic := range []string{"through", "noack", "direct"} {
		waitWatching(t, p, topic)
	}

	acksAll := producerTo(t, a.Addr(), kgo.DefaultProduceTopic("through"))
	acks0 := producerTo(t, a.Addr(), kgo.DefaultProduceTopic("noack"), kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	direct := producerTo(t, strings.Join(k.src.Addrs(), ","), kgo.DefaultProduceTopic("direct"))

	for i := range 50 {
		if err := acksAll.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "a%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := acks0.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "z%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	wrote := time.Now()
	rs := direct.ProduceSync(ctx, &kgo.Record{Value: []byte("around the agent")}, &kgo.Record{Value: []byte("again")})
	if err := rs.FirstErr(); err != nil {
		t.Fatal(err)
	}
	pid := rs[0].Record.ProducerID

	var ev Event
	wait.For(t, 30*time.Second, "a forgotten_producer event for the direct write", func() string {
		evs := bypassEvents(t, ctx, p, "direct", EventForgottenProducer)
		if len(evs) == 0 {
			return "none yet"
		}
		ev = evs[0]
		return ""
	})
	took := ev.Time.Sub(wrote)
	t.Logf("the direct write was reported %v after it was made", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("the bypass was reported %v after the write, want within 10 s", took)
	}
	if ev.Bypass == nil || ev.Bypass.ProducerID != pid || ev.Bypass.Partition != rs[0].Record.Partition {
		t.Errorf("event %+v: want producer id %d, partition %d", ev.Bypass, pid, rs[0].Record.Partition)
	}
	if _, what, ok := p.cp.Shadow().LastBypass("direct"); !ok || !strings.Contains(what, fmt.Sprint(pid)) {
		t.Errorf("LastBypass(direct) = %q, %v: want the producer id %d", what, ok, pid)
	}
	if got := counterValue(t, reg, "baton_controlplane_bypass_records_total", "direct"); got != 2 {
		t.Errorf("unattributed records of direct: %v, want 2", got)
	}

	// A second write of the same producer id and partition: counted, no
	// second event.
	direct.ProduceSync(ctx, &kgo.Record{Value: []byte("once more"), Partition: rs[0].Record.Partition})
	waitJudged(t, ctx, k, p, "direct")
	if n := len(bypassEvents(t, ctx, p, "direct", EventForgottenProducer)); n != 1 {
		t.Errorf("%d forgotten_producer events for one producer and partition, want 1 (deduplicated)", n)
	}

	for _, topic := range []string{"through", "noack"} {
		waitJudged(t, ctx, k, p, topic)
		if evs := bypassEvents(t, ctx, p, topic, EventForgottenProducer); len(evs) > 0 {
			t.Errorf("%s, written through the agent, reported as a bypass: %+v", topic, evs[0])
		}
		if _, what, ok := p.cp.Shadow().LastBypass(topic); ok {
			t.Errorf("LastBypass(%s) = %q, want none", topic, what)
		}
	}
	if got := counterValue(t, reg, "baton_controlplane_bypass_unattributable_records_total", "noack"); got == 0 {
		t.Errorf("acks=0 through the agent: no record counted unattributable: the incomplete span was not used")
	}

	// The cutover gate: a topic a forgotten producer wrote within the
	// window is not migrated, and the refusal names the gate and the
	// producer.
	_, err := p.cp.Migrate(ctx, "direct", "test")
	if !errors.Is(err, ErrGateRefused) || !strings.Contains(err.Error(), "gate forgotten-producer") || !strings.Contains(err.Error(), fmt.Sprint(pid)) {
		t.Errorf("migrate of a topic a forgotten producer wrote: %v; want the forgotten-producer gate to refuse, naming producer id %d", err, pid)
	}
}

// TestSourceWrittenAfterComplete: a write to the source after COMPLETE
// raises the alert, once per growth episode, and again after a control
// plane restart (the watch starts over from the stored COMPLETE time).
func TestSourceWrittenAfterComplete(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k := startKafka(t, ctx)
	dir := t.TempDir()
	opts := []Opt{BypassPoll(100 * time.Millisecond), BypassWatch(time.Hour)}
	p := startPlane(t, ctx, dir, "", k, opts...)
	ag := startAgent(t, ctx, p.addr, "pod-1")
	k.produce(t, ctx, "done", 5)
	addAndMigrate(t, ctx, p, "done", ag)
	waitState(t, ctx, p, "done", migration.Complete)

	watched := func(p *plane) func() string {
		return func() string {
			if p.cp.Shadow().WatchState("done").AfterComplete {
				return ""
			}
			return "no baseline yet"
		}
	}
	wait.For(t, 20*time.Second, "the source of done watched after COMPLETE", watched(p))
	k.produce(t, ctx, "done", 3)
	wait.For(t, 20*time.Second, "source_written_after_complete", func() string {
		if evs := bypassEvents(t, ctx, p, "done", EventSourceWrittenAfterComplete); len(evs) == 1 {
			if evs[0].Bypass == nil || evs[0].Bypass.Records != 3 {
				t.Fatalf("event %+v: want 3 records", evs[0].Bypass)
			}
			return ""
		}
		return "none yet"
	})

	p.stop()
	p = startPlane(t, ctx, dir, "", k, opts...)
	wait.For(t, 20*time.Second, "the source of done watched after a restart", watched(p))
	k.produce(t, ctx, "done", 2)
	wait.For(t, 20*time.Second, "a second source_written_after_complete after the restart", func() string {
		if evs := bypassEvents(t, ctx, p, "done", EventSourceWrittenAfterComplete); len(evs) == 2 {
			return ""
		}
		return "not yet"
	})
}

// counterValue reads the counter name{topic} from reg (0: none yet).
func counterValue(t *testing.T, reg *prometheus.Registry, name, topic string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "topic" && l.GetValue() == topic {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestCutOffOrKilledAgentIsNoBypass: an agent's writes it had not reported
// yet when it was cut off from the control plane (longer than its lease)
// or killed are never reported as a forgotten producer: a cut-off agent
// reports them late, and what a killed agent never reports is
// unattributable. A producer writing the source directly afterwards still
// is reported.
func TestCutOffOrKilledAgentIsNoBypass(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	if why := iptablesSupport(); why != "" {
		t.Skipf("cutting an agent off needs iptables on loopback: %s", why)
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	k := startKafka(t, ctx)
	reg := prometheus.NewRegistry()
	// The default lease, F and grace, as deployed.
	p := startPlane(t, ctx, t.TempDir(), "", k, LeaseDuration(migration.DefaultLease), ForwardDeadline(migration.DefaultForwardDeadline), Registry(reg))
	topics := []string{"cut", "killed", "direct"}
	for _, topic := range topics {
		k.produce(t, ctx, topic, 1) // create it (before the watch: not judged)
		if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: topic, State: migration.Proxy}, "test"); err != nil {
			t.Fatal(err)
		}
	}
	for _, topic := range topics {
		waitWatching(t, p, topic)
	}

	// The agent cut off reaches the control plane through a port of its
	// own, which iptables then drops both ways.
	relay := relayTo(t, p.addr)
	cutAgent := startRealAgent(t, ctx, k, relay, "pod-cut")
	killedAgent, kill := startStoppableAgent(t, ctx, k, p.addr, "pod-killed")
	waitLeased(t, p, "pod-cut", "pod-killed")

	// The cut agent's producer writes all along; the acked records just
	// before the cut are reported only after it heals.
	cutProducer := producerTo(t, cutAgent.Addr(), kgo.DefaultProduceTopic("cut"))
	var wg sync.WaitGroup
	stopProducing := make(chan struct{})
	var cutErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stopProducing:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if err := cutProducer.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "c%d", i)}).FirstErr(); err != nil && ctx.Err() == nil {
				cutErr = err
				return
			}
		}
	}()
	time.Sleep(time.Second)
	_, port, _ := net.SplitHostPort(relay)
	drop := [][]string{
		{"INPUT", "-i", "lo", "-p", "tcp", "--dport", port, "-j", "DROP"},
		{"INPUT", "-i", "lo", "-p", "tcp", "--sport", port, "-j", "DROP"},
	}
	heal := func() {
		for _, r := range drop {
			for exec.Command("iptables", append([]string{"-D"}, r...)...).Run() == nil {
			}
		}
	}
	t.Cleanup(heal)
	for _, r := range drop {
		if out, err := exec.Command("iptables", append([]string{"-I"}, r...)...).CombinedOutput(); err != nil {
			t.Fatalf("iptables -I %v: %v: %s", r, err, out)
		}
	}

	// Meanwhile the killed agent's producer writes a few records and its
	// agent dies right after the last ack, before its next heartbeat: the
	// last records are never reported. A new process takes its node id.
	killedProducer := producerTo(t, killedAgent.Addr(), kgo.DefaultProduceTopic("killed"))
	for i := range 20 {
		if err := killedProducer.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "k%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	kill()
	killedProducer.Close()
	startRealAgent(t, ctx, k, p.addr, "pod-killed")

	// Cut off for longer than the lease and the grace.
	time.Sleep(migration.DefaultLease + p.cp.Shadow().Grace())
	heal()
	waitLeased(t, p, "pod-cut", "pod-killed")
	close(stopProducing)
	wg.Wait()
	if cutErr != nil {
		t.Fatalf("producer through the cut agent: %v", cutErr)
	}

	for _, topic := range []string{"cut", "killed"} {
		waitJudged(t, ctx, k, p, topic)
		if evs := bypassEvents(t, ctx, p, topic, EventForgottenProducer); len(evs) > 0 {
			t.Errorf("%s, written only through agents, reported as a bypass: %s", topic, evs[0].Reason)
		}
		if got := counterValue(t, reg, "baton_controlplane_bypass_records_total", topic); got != 0 {
			t.Errorf("%s: %v records counted as bypasses, want 0", topic, got)
		}
	}
	if got := counterValue(t, reg, "baton_controlplane_bypass_unattributable_records_total", "killed"); got == 0 {
		t.Errorf("killed: no record counted unattributable: the killed agent's last writes were judged some other way")
	}
	t.Logf("unattributable records: cut %v, killed %v", counterValue(t, reg, "baton_controlplane_bypass_unattributable_records_total", "cut"),
		counterValue(t, reg, "baton_controlplane_bypass_unattributable_records_total", "killed"))

	// Detection still works once the agents report again. The first
	// write to a partition idle since before the kill may be
	// unattributable (it may have been appended any time since the
	// partition's end was first seen, while the killed process could
	// write); the next ones are not.
	direct := producerTo(t, strings.Join(k.src.Addrs(), ","), kgo.DefaultProduceTopic("direct"))
	wait.For(t, time.Minute, "a forgotten_producer event for the direct writes", func() string {
		if err := direct.ProduceSync(ctx, &kgo.Record{Value: []byte("around the agents")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if len(bypassEvents(t, ctx, p, "direct", EventForgottenProducer)) == 0 {
			return "none yet"
		}
		return ""
	})
}

// iptablesSupport says why loopback ports cannot be dropped here ("" when
// they can).
func iptablesSupport() string {
	if os.Geteuid() != 0 {
		return "not root"
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return "iptables not installed (make test-deps installs it)"
	}
	if out, err := exec.Command("iptables", "-S", "INPUT").CombinedOutput(); err != nil {
		return fmt.Sprintf("iptables unusable: %v: %s", err, out)
	}
	return ""
}

// relayTo forwards a loopback port of its own to addr, byte for byte, so
// that one client's path can be cut without touching the others'.
func relayTo(t *testing.T, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", addr)
			if err != nil {
				_ = c.Close()
				continue
			}
			go func() { _, _ = io.Copy(u, c); _ = u.Close() }()
			go func() { _, _ = io.Copy(c, u); _ = c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// waitLeased waits until each node holds a lease.
func waitLeased(t *testing.T, p *plane, nodes ...string) {
	t.Helper()
	wait.For(t, 60*time.Second, "leases of "+strings.Join(nodes, ", "), func() string {
		p.cp.mu.Lock()
		defer p.cp.mu.Unlock()
		now := p.cp.now()
		for _, n := range nodes {
			if a := p.cp.agents[n]; a == nil || !now.Before(a.ExpiresAt) {
				return n + " holds no lease"
			}
		}
		return ""
	})
}
