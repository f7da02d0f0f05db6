package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
)

// tLease is the fake agents' lease.
const tLease = 1200 * time.Millisecond

// writtenFrom waits until Status shows each topic of want written from
// exactly the namespace want names.
func writtenFrom(t *testing.T, j *Job, want map[string]string) {
	t.Helper()
	wait.For(t, time.Minute, "every writer known", func() string {
		got := map[string]string{}
		for _, rt := range j.Status().Topics {
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

// TestBadWaveRefused: a wave with no namespace, or one that is not a
// namespace, is refused naming the field.
func TestBadWaveRefused(t *testing.T) {
	t.Parallel()
	j, _ := fakeRollout(t, newFakePlane("t-a"))
	for _, tc := range []struct {
		req  WaveRequest
		want string
	}{
		{WaveRequest{}, "namespaces: a wave names at least one namespace"},
		{WaveRequest{Wave: Wave{Namespaces: []string{"a,b"}}}, `namespaces: "a,b" is not a namespace`},
		{WaveRequest{Wave: Wave{Namespaces: []string{"a"}}, After: []string{" "}}, `after: " " is not a namespace`},
		{WaveRequest{Wave: Wave{Namespaces: []string{"a"}}, Force: []string{"no-such-gate"}}, "no-such-gate"},
	} {
		if _, err := j.RunWave(context.Background(), tc.req, "test"); !errors.Is(err, controlplane.ErrBadConfig) ||
			!strings.Contains(err.Error(), tc.want) {
			t.Errorf("RunWave(%+v): %v, want ErrBadConfig saying %q", tc.req, err, tc.want)
		}
	}
	if waves := j.Status().Waves; len(waves) != 0 {
		t.Errorf("waves %+v after refused requests, want none", waves)
	}
}

// TestWaveRetryKeepsConditions: asking for the last wave again by its name
// retries it; it must not drop the conditions that wave set (its until),
// nor turn into a wave of other namespaces that skips them.
func TestWaveRetryKeepsConditions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFakePlane("t-a", "t-b")
	j, w := fakeRollout(t, f)
	f.lease("a1", "a", time.Hour)
	f.lease("b1", "b", time.Hour)
	w.ObserveReport(wrote("a1", "t-a"), f.now())
	w.ObserveReport(wrote("b1", "t-b"), f.now())
	writtenFrom(t, j, map[string]string{"t-a": "a", "t-b": "b"})

	first := Wave{Name: "first", Namespaces: []string{"a"}, Until: WaveUntil{Complete: true}}
	if _, err := j.RunWave(ctx, WaveRequest{Wave: first}, "test"); err != nil {
		t.Fatal(err)
	}
	// t-a is MIGRATING, never COMPLETE: the next wave waits.
	for _, retry := range []Wave{
		{Name: "first", Namespaces: []string{"a"}},                                   // the same wave, its until left out
		{Name: "first", Namespaces: []string{"b"}, Until: WaveUntil{Complete: true}}, // another namespace under its name
	} {
		_, _ = j.RunWave(ctx, WaveRequest{Wave: retry}, "test") // refused or a retry; either way:
		if tp, _ := f.Topic("t-b"); tp.State != migration.Proxy {
			t.Errorf("after RunWave(%+v): t-b is %s, want PROXY: the wave of a set complete and t-a is not COMPLETE", retry, tp.State)
		}
		st := j.Status()
		if len(st.Waves) != 1 || !st.Waves[0].Until.Complete || len(st.Unmet) == 0 {
			t.Errorf("after RunWave(%+v): waves %+v, unmet %q; want wave first still until complete, unmet", retry, st.Waves, st.Unmet)
		}
		if _, err := j.RunWave(ctx, WaveRequest{Wave: Wave{Name: "second", Namespaces: []string{"b"}}}, "test"); !errors.Is(err, ErrWaveRefused) {
			t.Errorf("after RunWave(%+v): wave second: %v, want ErrWaveRefused (t-a not COMPLETE)", retry, err)
		}
	}
}

// TestConcurrentWavesHeld: waves asked for at once are still run one
// after the other: of several waves each setting complete over a topic
// that cannot complete, one runs and every other is refused, and each
// wave that ran is recorded.
func TestConcurrentWavesHeld(t *testing.T) {
	t.Parallel()
	const n = 6
	f := newFakePlane()
	j, w := fakeRollout(t, f)
	want := map[string]string{}
	for i := range n {
		topic, ns := fmt.Sprintf("t-%d", i), fmt.Sprintf("n%d", i)
		f.topics[topic] = controlplane.Topic{TopicSpec: controlplane.TopicSpec{Name: topic, State: migration.Proxy}}
		f.lease("agent-"+ns, ns, time.Hour)
		w.ObserveReport(wrote("agent-"+ns, topic), f.now()) // MIGRATING once moved, never COMPLETE
		want[topic] = ns
	}
	writtenFrom(t, j, want)

	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = j.RunWave(context.Background(), WaveRequest{Wave: Wave{Name: fmt.Sprintf("w%d", i),
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
	if waves := j.Status().Waves; ran != 1 || len(waves) != 1 {
		var names []string
		for _, w := range waves {
			names = append(names, w.Name)
		}
		t.Errorf("%d of %d concurrent waves ran, %d recorded (%v); want one run and recorded, the others refused "+
			"(each set complete over a topic that cannot complete)", ran, n, len(waves), names)
	}
}

// TestWaveSoak: a wave whose until sets a soak holds the next wave until
// every topic it moved has been COMPLETE that long (the rollout's clock,
// moved on by the test), and the soak travels the API as a Go duration.
func TestWaveSoak(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		json, want string
		soak       time.Duration
	}{
		{json: `{"complete":true,"soak":"90s"}`, soak: 90 * time.Second},
		{json: `{"soak":"ten minutes"}`, want: `until.soak: "ten minutes" is not a duration`},
		{json: `{"soak":"-1s"}`, want: `until.soak: "-1s" is not a duration`},
	} {
		var u WaveUntil
		err := json.Unmarshal([]byte(tc.json), &u)
		switch {
		case tc.want != "" && (!errors.Is(err, controlplane.ErrBadConfig) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want ErrBadConfig saying %q", tc.json, err, tc.want)
		case tc.want == "" && (err != nil || u.Soak != tc.soak):
			t.Errorf("%s: %+v, %v; want soak %v", tc.json, u, err, tc.soak)
		case tc.want == "":
			if b, _ := json.Marshal(u); string(b) != `{"complete":true,"soak":"1m30s"}` {
				t.Errorf("%+v marshals to %s", u, b)
			}
		}
	}

	ctx := context.Background()
	f := newFakePlane("t-s")
	f.refuse["t-s"] = 1 // as the time-lag gate does until replication is measured
	j, w := fakeRollout(t, f)
	f.lease("a1", "a", time.Hour)
	w.ObserveReport(wrote("a1", "t-s"), f.now())
	writtenFrom(t, j, map[string]string{"t-s": "a"})
	// The refused migrate is retried with the wave, by its name, which
	// adds no wave.
	w1 := WaveRequest{Wave: Wave{Name: "w1", Namespaces: []string{"a"}, Until: WaveUntil{Soak: time.Hour}}}
	wait.For(t, time.Minute, "wave a moves t-s", func() string {
		run, err := j.RunWave(ctx, w1, "test")
		if err != nil || !slices.Equal(namesOf(run.Moved), []string{"t-s"}) {
			return fmt.Sprintf("wave a: %+v, %v", run, err)
		}
		return ""
	})
	if waves := j.Status().Waves; len(waves) != 1 {
		t.Fatalf("waves %+v, want w1 once", waves)
	}
	f.complete("t-s")
	if unmet := j.Status().Unmet; len(unmet) != 1 || !strings.Contains(unmet[0], "soaking") {
		t.Errorf("unmet %q, want the soak", unmet)
	}
	if _, err := j.RunWave(ctx, WaveRequest{Wave: Wave{Name: "w2", Namespaces: []string{"b"}}}, "test"); !errors.Is(err, ErrWaveRefused) ||
		!strings.Contains(err.Error(), "soaking") {
		t.Fatalf("wave b while soaking: %v, want ErrWaveRefused saying soaking", err)
	}
	f.skew.Store(int64(time.Hour + time.Minute))
	if unmet := j.Status().Unmet; len(unmet) != 0 {
		t.Errorf("unmet %q after the soak, want none", unmet)
	}
	if run, err := j.RunWave(ctx, WaveRequest{Wave: Wave{Name: "w2", Namespaces: []string{"b"}}}, "test"); err != nil || len(run.Moved) != 0 {
		t.Fatalf("wave b after the soak: %+v, %v; want it run, moving nothing", run, err)
	}
}

// TestWriterMemoryOutlivesLease: an agent whose lease ran out still counts
// as a writer of what it wrote for the writer memory after its last write
// (a wave of other namespaces must not move the topic under it), then no
// longer (the rollout's clock, moved on by the test).
func TestWriterMemoryOutlivesLease(t *testing.T) {
	t.Parallel()
	f := newFakePlane("t-x")
	j, w := fakeRollout(t, f, WriterMemory(time.Hour))
	writersOf := func() string {
		for _, rt := range j.Status().Topics {
			if rt.Name == "t-x" {
				return strings.Join(rt.Writers, ",")
			}
		}
		return "t-x not shown"
	}
	f.lease("b1", "b", tLease)
	w.ObserveReport(wrote("b1", "t-x"), f.now())
	if got := writersOf(); got != "b" {
		t.Fatalf("writers %q, want b", got)
	}
	f.skew.Store(int64(10 * time.Minute)) // b1's lease long over
	if got := writersOf(); got != "b" {
		t.Errorf("10 minutes after b1's last write, lease over: writers %q, want b", got)
	}
	if run, err := j.RunWave(context.Background(), WaveRequest{Wave: Wave{Name: "a", Namespaces: []string{"a"}}}, "test"); err != nil ||
		len(run.Moved)+len(run.Refused) != 0 {
		t.Errorf("wave a moved %v (refused %v), %v; want t-x held back by b's write", namesOf(run.Moved), run.Refused, err)
	}
	f.skew.Store(int64(2 * time.Hour))
	if got := writersOf(); got != "" {
		t.Errorf("2 hours after b1's last write: writers %q, want none", got)
	}
}
