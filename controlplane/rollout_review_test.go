package controlplane

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
)

// writtenFrom waits until Rollout shows each topic of want written from
// exactly the namespace want names.
func writtenFrom(t *testing.T, cp *ControlPlane, want map[string]string) {
	t.Helper()
	wait.For(t, time.Minute, "every writer known", func() string {
		got := map[string]string{}
		for _, rt := range cp.Rollout().Topics {
			if _, ok := want[rt.Name]; ok {
				got[rt.Name] = strings.Join(rt.Writers, ",")
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Sprintf("writers %v, want %v", got, want)
		}
		return ""
	})
}

// TestWaveRetryKeepsConditions: asking for the last wave again by its name
// retries it; it must not drop the conditions that wave set (its until),
// nor turn into a wave of other namespaces that skips them.
func TestWaveRetryKeepsConditions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := startKafka(t, ctx)
	p := startPlane(t, ctx, t.TempDir(), "", k)
	for _, topic := range []string{"t-a", "t-b"} {
		k.produce(t, ctx, topic, 1)
		if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: topic}, "test"); err != nil {
			t.Fatal(err)
		}
	}
	// a1 holds a request in flight on t-a: its cutover cannot complete.
	beat(t, ctx, p.cp, "a1", "a", true, "t-a")
	beat(t, ctx, p.cp, "b1", "b", false, "t-b")
	writtenFrom(t, p.cp, map[string]string{"t-a": "a", "t-b": "b"})
	t.Cleanup(func() {
		if tp, _ := p.cp.Topic("t-a"); tp.State == migration.Migrating {
			_, _ = p.cp.Abort(context.Background(), "t-a", "test", "the test is done with it")
		}
	})

	first := Wave{Name: "first", Namespaces: []string{"a"}, Until: WaveUntil{Complete: true}}
	if _, err := p.cp.RunWave(ctx, WaveRequest{Wave: first}, "test"); err != nil {
		t.Fatal(err)
	}
	// t-a is not COMPLETE (moved and stuck, or refused by a gate): the
	// next wave waits.
	for _, retry := range []Wave{
		{Name: "first", Namespaces: []string{"a"}},                                   // the same wave, its until left out
		{Name: "first", Namespaces: []string{"b"}, Until: WaveUntil{Complete: true}}, // another namespace under its name
	} {
		_, _ = p.cp.RunWave(ctx, WaveRequest{Wave: retry}, "test") // refused or a retry; either way:
		if tp, _ := p.cp.Topic("t-b"); tp.State != migration.Proxy {
			t.Errorf("after RunWave(%+v): t-b is %s, want PROXY: the wave of a set complete and t-a is not COMPLETE", retry, tp.State)
		}
		ro := p.cp.Rollout()
		if len(ro.Waves) != 1 || !ro.Waves[0].Until.Complete || len(ro.Unmet) == 0 {
			t.Errorf("after RunWave(%+v): waves %+v, unmet %q; want wave first still until complete, unmet", retry, ro.Waves, ro.Unmet)
		}
		if _, err := p.cp.RunWave(ctx, WaveRequest{Wave: Wave{Name: "second", Namespaces: []string{"b"}}}, "test"); !errors.Is(err, ErrWaveRefused) {
			t.Errorf("after RunWave(%+v): wave second: %v, want ErrWaveRefused (t-a not COMPLETE)", retry, err)
		}
	}
}

// TestConcurrentWavesHeld: waves asked for at once are still run one
// after the other: of several waves each setting complete over a topic
// that cannot complete, one runs and every other is refused, and each
// wave that ran is recorded.
func TestConcurrentWavesHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := startKafka(t, ctx)
	p := startPlane(t, ctx, t.TempDir(), "", k)
	const n = 6
	want := map[string]string{}
	for i := range n {
		topic, ns := fmt.Sprintf("t-%d", i), fmt.Sprintf("n%d", i)
		k.produce(t, ctx, topic, 1)
		if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: topic}, "test"); err != nil {
			t.Fatal(err)
		}
		beat(t, ctx, p.cp, "agent-"+ns, ns, true, topic) // stuck: its cutover cannot complete
		want[topic] = ns
	}
	writtenFrom(t, p.cp, want)
	t.Cleanup(func() {
		for topic := range want {
			if tp, _ := p.cp.Topic(topic); tp.State == migration.Migrating {
				_, _ = p.cp.Abort(context.Background(), topic, "test", "the test is done with it")
			}
		}
	})

	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = p.cp.RunWave(ctx, WaveRequest{Wave: Wave{Name: fmt.Sprintf("w%d", i),
				Namespaces: []string{fmt.Sprintf("n%d", i)}, Until: WaveUntil{Complete: true}}}, "test")
		}()
	}
	close(start)
	wg.Wait()
	ran := 0
	for i, err := range errs {
		switch {
		case err == nil:
			ran++
		case !errors.Is(err, ErrWaveRefused):
			t.Errorf("wave w%d: %v, want it run or ErrWaveRefused", i, err)
		}
	}
	if waves := p.cp.Rollout().Waves; ran != 1 || len(waves) != 1 {
		var names []string
		for _, w := range waves {
			names = append(names, w.Name)
		}
		t.Errorf("%d of %d concurrent waves ran, %d recorded (%v); want one run and recorded, the others refused "+
			"(each set complete over a topic that cannot complete)", ran, n, len(waves), names)
	}
}
