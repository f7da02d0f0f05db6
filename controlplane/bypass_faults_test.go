package controlplane

import (
	"context"
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

	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
)

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
