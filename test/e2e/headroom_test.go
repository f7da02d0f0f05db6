package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/shadow"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
)

// TestHeadroom is the headroom check's acceptance test (docs/design.md
// §12): with a destination that acknowledges after destDelay, latency
// emulation and headroom on, a producer limited to one request in flight
// of at most 16 KiB and a small buffer, producing as fast as it can (more
// than 16 KiB per destDelay), gets a headroom finding at the control
// plane, naming its client id and the setting to raise, before any
// cutover, and the headroom gate refuses the topic's cutover; a
// well-tuned producer (five requests in flight, 1 MiB batches) writing
// at a rate its pipeline carries does not, over the same windows.
func TestHeadroom(t *testing.T) {
	t.Parallel()
	const destDelay = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := startSlowDestination(t, ctx, "pod-headroom", destDelay, agent.HeadroomWindow(3*time.Second))
	const topic = "headroom"
	if _, err := kadm.NewClient(e.direct).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cp.AddTopic(ctx, controlplane.TopicSpec{Name: topic, State: migration.Proxy,
		Shadow: controlplane.Shadow{LatencyEmulation: true, Headroom: true}}, "e2e"); err != nil {
		t.Fatal(err)
	}
	e.feedUntilProfiled(t, ctx, topic, destDelay)

	limited := newClient(t, e.agent.Addr(), kgo.ClientID("limited-app"), kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(0), kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(1), kgo.ProducerBatchMaxBytes(16<<10),
		kgo.MaxBufferedRecords(64))
	tuned := newClient(t, e.agent.Addr(), kgo.ClientID("tuned-app"), kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(0), kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(5), kgo.ProducerBatchMaxBytes(1<<20))

	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var failed sync.Map
	value := make([]byte, 1<<10)
	produce := func(cl *kgo.Client, name string, every time.Duration) {
		defer wg.Done()
		for pctx.Err() == nil {
			// Produce blocks while the client's buffer is full: the limited
			// producer writes as fast as its pipeline lets it.
			cl.Produce(pctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
				if err != nil && !errors.Is(err, context.Canceled) {
					failed.Store(name, err)
				}
			})
			if every > 0 {
				select {
				case <-time.After(every):
				case <-pctx.Done():
				}
			}
		}
	}
	wg.Add(2)
	go produce(limited, "limited-app", 0)
	go produce(tuned, "tuned-app", 100*time.Millisecond) // 10 KiB/s: a few requests in flight at destDelay
	defer func() { stop(); wg.Wait() }()

	headroomOf := func(client string) []shadow.Finding {
		var out []shadow.Finding
		for _, f := range e.cp.Shadow().OpenFindings(topic, migration.FindingHeadroom, 0) {
			if f.ClientID == client {
				out = append(out, f)
			}
		}
		return out
	}
	wait.For(t, 3*time.Minute, "a headroom finding for limited-app at the control plane", func() string {
		if fs := headroomOf("limited-app"); len(fs) == 0 {
			return "none yet"
		}
		return ""
	})
	f := headroomOf("limited-app")[0]
	t.Logf("limited-app: %s", f.Detail)
	if !strings.Contains(f.Detail, "max.in.flight.requests.per.connection") {
		t.Errorf("the finding %q does not name the setting to raise (one request in flight: max.in.flight.requests.per.connection)", f.Detail)
	}
	evs, err := e.cp.Events(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !hasEvent(evs, controlplane.EventFinding, "limited-app") {
		t.Errorf("no finding event naming limited-app in the event log")
	}

	// Two more of the limited producer's windows, which the tuned one ran
	// through as well (both started together): judged, and not warned.
	warnings := e.agent.HeadroomWarnings("limited-app", topic)
	wait.For(t, 2*time.Minute, "two more windows of the limited producer judged", func() string {
		if n := e.agent.HeadroomWarnings("limited-app", topic); n < warnings+2 {
			return fmt.Sprintf("warnings so far: %d", n)
		}
		return ""
	})
	if fs := headroomOf("tuned-app"); len(fs) > 0 {
		t.Errorf("tuned-app was warned: %s", fs[0].Detail)
	}
	if n := e.agent.HeadroomWarnings("tuned-app", topic); n > 0 {
		t.Errorf("the agent warned of tuned-app %v times", n)
	}
	failed.Range(func(k, v any) bool {
		t.Errorf("%s: a record failed: %v", k, v)
		return true
	})

	_, err = e.cp.Migrate(ctx, topic, "e2e")
	if !errors.Is(err, controlplane.ErrGateRefused) || !strings.Contains(err.Error(), "gate headroom") || !strings.Contains(err.Error(), "limited-app") {
		t.Errorf("migrate with a headroom warning open: %v; want the headroom gate to refuse, naming limited-app", err)
	}
}

func hasEvent(evs []controlplane.Event, kind, says string) bool {
	for _, e := range evs {
		if e.Kind == kind && strings.Contains(e.Reason, says) {
			return true
		}
	}
	return false
}
