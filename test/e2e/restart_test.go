package e2e

import (
	"context"
	"fmt"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/test/clients"
	"github.com/baton-kafka/baton/test/kafka"
	"github.com/baton-kafka/baton/test/netfault"
)

// ackLog collects one producer run's acks as they come, for a test that
// watches them while the run goes on.
type ackLog struct {
	mu   sync.Mutex
	acks []clients.Ack
}

func (l *ackLog) add(a clients.Ack) { l.mu.Lock(); l.acks = append(l.acks, a); l.mu.Unlock() }

// since counts successful acks seen after t.
func (l *ackLog) since(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.acks {
		if a.Err == "" && a.At.After(t) {
			n++
		}
	}
	return n
}

func (l *ackLog) all() []clients.Ack {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]clients.Ack(nil), l.acks...)
}

// longestGap is the longest time between two successive successful acks.
func longestGap(acks []clients.Ack) time.Duration {
	var at []time.Time
	for _, a := range acks {
		if a.Err == "" {
			at = append(at, a.At)
		}
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	var gap time.Duration
	for i := 1; i < len(at); i++ {
		gap = max(gap, at[i].Sub(at[i-1]))
	}
	return gap
}

// TestBrokerRestartUnderTheAgent SIGKILLs one broker of a 3-broker Apache
// Kafka source while idempotent producers (franz-go and kcat) write through
// the agent, and starts it again: every record must be acked and stored
// where it was acked, with no delivery failure. Then every upstream socket
// of the agent is destroyed (ss -K) and ten kcat runs through the agent
// must each deliver.
func TestBrokerRestartUnderTheAgent(t *testing.T) {
	t.Parallel()
	c := kafka.StartT(t, kafka.Brokers(sourceBrokers))
	ctx, cancel := context.WithTimeout(t.Context(), caseTimeout)
	defer cancel()
	e := &env{name: "apache-kafka-restart", source: c.Bootstrap(), kafka: c}
	stop, err := startAgent(ctx, e)
	if stop != nil {
		t.Cleanup(func() {
			if err := stop(); err != nil {
				t.Error(err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	topic := freshTopic(t, ctx, e, "broker-restart", 3)

	producers := []clients.Producer{clients.Franz{}, clients.Kcat{}}
	logs := make([]*ackLog, len(producers))
	cfgs := make([]clients.ProduceConfig, len(producers))
	var wg sync.WaitGroup
	for i, p := range producers {
		logs[i] = &ackLog{}
		cfgs[i] = clients.ProduceConfig{
			Bootstrap:  e.agent,
			Topic:      topic,
			Records:    8000,
			Rate:       200, // about 40 s: through the kill, the failover and the restart
			Idempotent: true,
			KeyPrefix:  "restart-" + p.Name(),
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Produce(ctx, cfgs[i], logs[i].add); err != nil {
				t.Errorf("%s through the agent: Produce: %v", p.Name(), err)
			}
		}()
	}
	// acking waits for n acks after since from each producer still
	// running (one that acked every record has nothing more to say).
	acking := func(since time.Time, n int) func() string {
		return func() string {
			for i, l := range logs {
				if got, total := l.since(since), l.since(time.Time{}); got < n && total < cfgs[i].Records {
					return fmt.Sprintf("%s: %d acks since %s, %d in all", producers[i].Name(), got, since.Format(time.TimeOnly), total)
				}
			}
			return ""
		}
	}
	wait.For(t, time.Minute, "both producers acking through the agent", acking(time.Time{}, 200))

	victim := c.Nodes()[0].ID
	killed := time.Now()
	if err := c.StopNode(victim, 0); err != nil {
		t.Fatalf("SIGKILL broker %d: %v", victim, err)
	}
	t.Logf("broker %d SIGKILLed", victim)
	wait.For(t, 2*time.Minute, "acks from both producers after the kill (leaders moved off the dead broker)", acking(killed, 200))
	if err := c.RestartNode(ctx, victim); err != nil {
		t.Fatalf("restarting broker %d: %v", victim, err)
	}
	restarted := time.Now()
	t.Logf("broker %d restarted", victim)
	wait.For(t, 2*time.Minute, "acks from both producers after the restart", acking(restarted, 100))
	for i, p := range producers {
		t.Logf("%s: %d acks after the restart so far", p.Name(), logs[i].since(restarted))
	}
	wg.Wait()

	for i, p := range producers {
		acks := logs[i].all()
		failed := 0
		for _, a := range acks {
			if a.Err != "" {
				if failed++; failed <= 3 {
					t.Errorf("%s: record %d failed: %s", p.Name(), a.Seq, a.Err)
				}
			}
		}
		if failed > 0 || len(acks) != cfgs[i].Records {
			t.Errorf("%s: %d of %d records acked, %d failed", p.Name(), len(acks)-failed, cfgs[i].Records, failed)
		}
		if err := clients.Verify(ctx, e.source, topic, acks, cfgs[i]); err != nil {
			t.Errorf("%s: %v", p.Name(), err)
		}
		t.Logf("%s: %d acks; longest time between two acks %s", p.Name(), len(acks)-failed, longestGap(acks).Round(time.Millisecond))
	}

	// Now every pooled upstream connection dies at once, while idle.
	for _, a := range c.Addrs() {
		_, port, _ := net.SplitHostPort(a)
		netfault.KillSockets(t, "dst", "127.0.0.1", "dport", "=", ":"+port)
	}
	delivered := 0
	for i := range 10 {
		cfg := clients.ProduceConfig{Bootstrap: e.agent, Topic: topic, Records: 5, Idempotent: true, KeyPrefix: fmt.Sprintf("after-ss-K-%d", i)}
		var acks []clients.Ack
		if err := (clients.Kcat{}).Produce(ctx, cfg, func(a clients.Ack) { acks = append(acks, a) }); err != nil {
			t.Errorf("kcat run %d after ss -K: %v", i, err)
			continue
		}
		ok := true
		for _, a := range acks {
			if a.Err != "" {
				ok = false
				t.Errorf("kcat run %d after ss -K: record %d failed: %s", i, a.Seq, a.Err)
			}
		}
		if ok && len(acks) == cfg.Records {
			delivered++
		}
	}
	t.Logf("%d of 10 kcat runs delivered after ss -K", delivered)
}
