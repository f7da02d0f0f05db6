package agent_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
)

type produced struct {
	code int16
	err  error
}

// The forward deadline of a produce starts when the agent writes it
// upstream: a request held through MIGRATING for longer than the deadline
// and then sent must get the broker's answer, not the retriable error.
func TestForwardDeadlineStartsAtTheWrite(t *testing.T) {
	t.Parallel()
	const deadline = time.Second
	topic := "held-long"
	f := startFixture(t, []agent.Route{{Topic: topic, State: migration.Migrating, Mode: migration.Hold, HoldMax: time.Minute}},
		agent.ForwardDeadline(deadline))
	createTopic(t, f.src.Bootstrap(), topic, 1)

	cl := newClient(t, f.addr)
	out := make(chan produced, 1)
	go func() {
		code, err := produceOnce(t.Context(), cl, topic, "held")
		out <- produced{code, err}
	}()
	wait.For(t, 30*time.Second, "the agent to hold the produce", func() string {
		if n := f.agent.HeldForTest(); n != 1 {
			return fmt.Sprintf("%d held", n)
		}
		return ""
	})
	heldSince := time.Now()
	wait.For(t, time.Minute, "the produce to be held for twice the forward deadline", func() string {
		if d := time.Since(heldSince); d < 2*deadline {
			return fmt.Sprintf("held for %s", d)
		}
		return ""
	})
	f.agent.Routes().Replace([]agent.Route{{Topic: topic, State: migration.Proxy}}) // rollback: on to the source
	got := <-out
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.code != 0 {
		t.Fatalf("a produce held past the forward deadline, then sent, got %v; want the broker's success", kerr.ErrorForCode(got.code))
	}
}

// A produce that passes its forward deadline is answered retriable, but its
// pooled upstream connection stays: a produce from another client written
// behind it on that connection gets its own answer once the broker moves
// on, and the slow one counts in flight until the broker answered it.
func TestSlowProduceLeavesTheSharedConnection(t *testing.T) {
	t.Parallel()
	const deadline = 4 * time.Second
	f := startFixture(t, nil, agent.ForwardDeadline(deadline), agent.UpstreamConns(1))
	topic := "slow-shared"
	createTopic(t, f.src.Bootstrap(), topic, 1)
	if code := produceRaw(t, f.addr, topic, "warm-up"); code != 0 {
		t.Fatalf("warm-up produce: %v", kerr.ErrorForCode(code))
	}

	kc := f.src.Kfake()
	arrived, release := make(chan struct{}), make(chan struct{})
	var releaseOnce, sleepOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	kc.ControlKey(0, func(kmsg.Request) (kmsg.Response, error, bool) {
		// The first produce sleeps; the broker answers the connection's
		// later ones after it, in order.
		sleepOnce.Do(func() {
			close(arrived)
			kc.SleepControl(func() { <-release })
		})
		return nil, nil, false
	})

	slowClient, behindClient := newClient(t, f.addr), newClient(t, f.addr)
	slow, behind := make(chan produced, 1), make(chan produced, 1)
	go func() {
		code, err := produceOnce(t.Context(), slowClient, topic, "slow")
		slow <- produced{code, err}
	}()
	select {
	case <-arrived:
	case <-time.After(time.Minute):
		t.Fatal("the slow produce never reached the broker")
	}
	reached := time.Now()
	// Written half a deadline later, the second produce's own deadline
	// ends well after the slow one's: the broker answers it in between.
	wait.For(t, time.Minute, "half a forward deadline since the slow produce reached the broker", func() string {
		if d := time.Since(reached); d < deadline/2 {
			return d.String()
		}
		return ""
	})
	go func() {
		code, err := produceOnce(t.Context(), behindClient, topic, "behind")
		behind <- produced{code, err}
	}()
	wait.For(t, time.Minute, "both produces in flight at the source", func() string {
		if n := f.agent.InflightForTest(topic); n != 2 {
			return fmt.Sprintf("%d in flight", n)
		}
		return ""
	})

	got := <-slow
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("the produce past its forward deadline got %v, want NOT_LEADER_OR_FOLLOWER", kerr.ErrorForCode(got.code))
	}
	if n := f.agent.InflightForTest(topic); n != 2 {
		t.Errorf("after the slow produce was answered retriable, %d in flight, want 2: the broker may still write it", n)
	}
	unblock()
	if got := <-behind; got.err != nil || got.code != 0 {
		t.Fatalf("the produce written behind the slow one got %v, %v; want the broker's success on the same connection", kerr.ErrorForCode(got.code), got.err)
	}
	wait.For(t, time.Minute, "nothing in flight once the broker answered both", func() string {
		if n := f.agent.InflightForTest(topic); n != 0 {
			return fmt.Sprintf("%d in flight", n)
		}
		return ""
	})
}
