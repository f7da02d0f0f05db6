package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/xds"
)

// TestSelectWave: a wave moves exactly the PROXY topics whose writer
// namespaces are all in it or in earlier waves; everything else stays,
// with why.
func TestSelectWave(t *testing.T) {
	t.Parallel()
	p := migration.Proxy
	topics := []WaveTopic{
		{Name: "t-ab", State: p, Writers: []string{"b", "a"}},
		{Name: "t-a", State: p, Writers: []string{"a", "a"}},
		{Name: "t-b", State: p, Writers: []string{"b"}},
		{Name: "t-none", State: p},
		{Name: "t-done", State: migration.Complete, Writers: []string{"a"}},
		{Name: "t-parked", State: migration.Reject, Writers: []string{"a"}},
		{Name: "t-unlabelled", State: p, Writers: []string{""}},
	}
	for _, tc := range []struct {
		name           string
		earlier, wave  []string
		move           []string
		stayed, reason map[string]string
	}{
		{name: "first wave a", wave: []string{"a"}, move: []string{"t-a"}, stayed: map[string]string{
			"t-ab": "also written from b, in no wave yet", "t-b": "also written from b", "t-none": "no agent reported writing it",
			"t-done": "COMPLETE, not PROXY", "t-parked": "REJECT, not PROXY", "t-unlabelled": "(no namespace)"}},
		{name: "wave b after a", earlier: []string{"a"}, wave: []string{"b"}, move: []string{"t-a", "t-ab", "t-b"},
			stayed: map[string]string{"t-none": "no agent", "t-done": "COMPLETE", "t-parked": "REJECT", "t-unlabelled": "(no namespace)"}},
		{name: "one wave of both", wave: []string{"b", "a"}, move: []string{"t-a", "t-ab", "t-b"},
			stayed: map[string]string{"t-none": "no agent", "t-done": "COMPLETE", "t-parked": "REJECT", "t-unlabelled": "(no namespace)"}},
		{name: "wave b alone", wave: []string{"b"}, move: []string{"t-b"},
			stayed: map[string]string{"t-a": "also written from a", "t-ab": "also written from a", "t-none": "no agent",
				"t-done": "COMPLETE", "t-parked": "REJECT", "t-unlabelled": "(no namespace)"}},
		{name: "a namespace no topic is written from", wave: []string{"c"}, move: []string{},
			stayed: map[string]string{"t-a": "also written from a", "t-ab": "also written from a, b", "t-b": "also written from b",
				"t-none": "no agent", "t-done": "COMPLETE", "t-parked": "REJECT", "t-unlabelled": "(no namespace)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sel := SelectWave(topics, tc.earlier, tc.wave)
			if !slices.Equal(sel.Move, tc.move) {
				t.Errorf("moves %v, want %v", sel.Move, tc.move)
			}
			got := map[string]string{}
			for _, s := range sel.Stay {
				got[s.Topic] = s.Reason
			}
			if len(got) != len(tc.stayed) {
				t.Errorf("stays %v, want the topics of %v", got, tc.stayed)
			}
			for topic, want := range tc.stayed {
				if !strings.Contains(got[topic], want) {
					t.Errorf("%s stays for %q, want a reason containing %q", topic, got[topic], want)
				}
			}
		})
	}
}

// heartbeater heartbeats the Lease service as an agent of a namespace
// does, every tLease/4, at the current config version: reporting source
// writes on the topics it writes until they are MIGRATING (then it reports
// them stopped and drained), or one request in flight on them for good
// when stuck (a cutover of them waits until it times out).
type heartbeater struct {
	stop func()
}

func beat(t *testing.T, ctx context.Context, cp *ControlPlane, node, namespace string, stuck bool, writes ...string) *heartbeater {
	t.Helper()
	bctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	offset := int64(0)
	go func() {
		defer wg.Done()
		for {
			var ds []*batonv1.TopicDrain
			for _, topic := range writes {
				d := &batonv1.TopicDrain{Topic: topic}
				switch tp, _ := cp.Topic(topic); {
				case stuck:
					d.InFlight = 1
				case tp.State == migration.Migrating || tp.State == migration.Complete:
					d.StoppedForwarding = true // writes no more to the source
				}
				if !d.StoppedForwarding {
					d.Writes = []*batonv1.PartitionWrites{{Partition: 0,
						Acked: []*batonv1.OffsetRange{{Start: offset, End: offset + 1}}}}
				}
				ds = append(ds, d)
			}
			ds = append(ds, &batonv1.TopicDrain{Topic: "t-none"}) // routed, never written
			offset++
			_, _ = cp.Heartbeat(bctx, &batonv1.HeartbeatRequest{NodeId: node, Namespace: namespace, Workload: "app",
				AckedVersion: cp.Version(), Topics: ds, Incarnation: 1})
			select {
			case <-bctx.Done():
				return
			case <-time.After(tLease / 4):
			}
		}
	}()
	h := &heartbeater{stop: sync.OnceFunc(func() { cancel(); wg.Wait() })}
	t.Cleanup(h.stop)
	return h
}

// TestRolloutWriters: the control plane learns each topic's writer
// namespaces from the agents' heartbeats (an agent that only routes a
// topic is no writer; one whose lease and writer memory ran out no longer
// counts), shows
// them per namespace and per topic (Rollout), runs a wave through Migrate,
// refuses bad waves naming the field, and refuses the next wave while the
// wave before it set complete and its topic is not COMPLETE.
func TestRolloutWriters(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := startKafka(t, ctx)
	p := startPlane(t, ctx, t.TempDir(), "", k, RolloutWriterMemory(tLease))
	for _, topic := range []string{"t-a", "t-b", "t-ab", "t-none"} {
		k.produce(t, ctx, topic, 1)
		if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: topic}, "test"); err != nil {
			t.Fatal(err)
		}
	}
	beat(t, ctx, p.cp, "a1", "a", true, "t-a", "t-ab")
	b1 := beat(t, ctx, p.cp, "b1", "b", false, "t-b", "t-ab")
	beat(t, ctx, p.cp, "c1", "c", false)

	writers := func(ro Rollout) map[string]string {
		out := map[string]string{}
		for _, rt := range ro.Topics {
			out[rt.Name] = strings.Join(rt.Writers, ",")
		}
		return out
	}
	wait.For(t, time.Minute, "every writer known", func() string {
		ro := p.cp.Rollout()
		got := writers(ro)
		if want := map[string]string{"t-a": "a", "t-ab": "a,b", "t-b": "b", "t-none": ""}; fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Sprintf("writers %v, want %v", got, want)
		}
		var nss []string
		for _, ns := range ro.Namespaces {
			nss = append(nss, fmt.Sprintf("%s:%s", ns.Namespace, strings.Join(ns.Topics, "+")))
			if len(ns.Agents) != 1 || !ns.Agents[0].LeaseValid || ns.Agents[0].Workload != "app" {
				return fmt.Sprintf("namespace %s agents %+v, want one holding a lease", ns.Namespace, ns.Agents)
			}
		}
		if got, want := strings.Join(nss, " "), "a:t-a+t-ab b:t-ab+t-b c:"; got != want {
			return fmt.Sprintf("namespaces %s, want %s", got, want)
		}
		return ""
	})

	for _, tc := range []struct {
		req  WaveRequest
		want string
	}{
		{WaveRequest{}, "namespaces: a wave names at least one namespace"},
		{WaveRequest{Wave: Wave{Namespaces: []string{"a,b"}}}, `namespaces: "a,b" is not a namespace`},
		{WaveRequest{Wave: Wave{Namespaces: []string{"a"}}, After: []string{" "}}, `after: " " is not a namespace`},
	} {
		if _, err := p.cp.RunWave(ctx, tc.req, "test"); !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("RunWave(%+v): %v, want ErrBadConfig saying %q", tc.req, err, tc.want)
		}
	}

	// a1 holds a request in flight on t-a: its cutover cannot complete.
	run, err := p.cp.RunWave(ctx, WaveRequest{Wave: Wave{Name: "first", Namespaces: []string{"a"}, Until: WaveUntil{Complete: true}}}, "test")
	if err != nil {
		t.Fatal(err)
	}
	moved := append(namesOf(run.Moved), stayedTopics(run.Refused)...)
	if !slices.Equal(moved, []string{"t-a"}) || !slices.Equal(stayedTopics(run.Stayed), []string{"t-ab", "t-b", "t-none"}) {
		t.Fatalf("wave a: moved %v, refused %v, stayed %v; want t-a moved (or refused by a gate), the others stayed",
			run.Moved, run.Refused, run.Stayed)
	}
	_, err = p.cp.RunWave(ctx, WaveRequest{Wave: Wave{Name: "second", Namespaces: []string{"b"}}}, "test")
	if !errors.Is(err, ErrWaveRefused) || !strings.Contains(err.Error(), "t-a") || !strings.Contains(err.Error(), "want COMPLETE") {
		t.Fatalf("wave b while t-a is not COMPLETE: %v, want ErrWaveRefused naming t-a", err)
	}
	if waves := p.cp.Rollout().Waves; len(waves) != 1 || waves[0].Name != "first" {
		t.Fatalf("waves %+v, want the first only", waves)
	}
	if tp, _ := p.cp.Topic("t-a"); tp.State == migration.Migrating {
		if _, err := p.cp.Abort(ctx, "t-a", "test", "the test is done with it"); err != nil {
			t.Fatal(err)
		}
	}

	b1.stop()
	wait.For(t, time.Minute, "b1's writes forgotten once its lease and the writer memory ran out", func() string {
		if got := writers(p.cp.Rollout()); got["t-b"] != "" || got["t-ab"] != "a" {
			return fmt.Sprintf("writers %v", got)
		}
		return ""
	})
}

func stayedTopics(ss []WaveStay) []string {
	out := []string{}
	for _, s := range ss {
		out = append(out, s.Topic)
	}
	return out
}

// TestWaveSoak: a wave whose until sets a soak holds the next wave until
// every topic it moved has been COMPLETE that long (the control plane's
// clock, moved on by the test), and the soak travels the API as a Go
// duration.
func TestWaveSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
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
		case tc.want != "" && (!errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want ErrBadConfig saying %q", tc.json, err, tc.want)
		case tc.want == "" && (err != nil || u.Soak != tc.soak):
			t.Errorf("%s: %+v, %v; want soak %v", tc.json, u, err, tc.soak)
		case tc.want == "":
			if b, _ := json.Marshal(u); string(b) != `{"complete":true,"soak":"1m30s"}` {
				t.Errorf("%+v marshals to %s", u, b)
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var skew atomic.Int64
	k := startKafka(t, ctx)
	p := startPlane(t, ctx, t.TempDir(), "", k, Clock(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }))
	k.produce(t, ctx, "t-s", 1)
	if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: "t-s"}, "test"); err != nil {
		t.Fatal(err)
	}
	beat(t, ctx, p.cp, "a1", "a", false, "t-s")
	wait.For(t, time.Minute, "t-s written from a", func() string {
		for _, rt := range p.cp.Rollout().Topics {
			if rt.Name == "t-s" && slices.Equal(rt.Writers, []string{"a"}) {
				return ""
			}
		}
		return fmt.Sprintf("topics %+v", p.cp.Rollout().Topics)
	})
	// The time-lag gate refuses t-s until replication is measured: the
	// wave is retried by its name, which adds no wave.
	w1 := WaveRequest{Wave: Wave{Name: "w1", Namespaces: []string{"a"}, Until: WaveUntil{Soak: time.Hour}}}
	wait.For(t, time.Minute, "wave a moves t-s", func() string {
		run, err := p.cp.RunWave(ctx, w1, "test")
		if err != nil || !slices.Equal(namesOf(run.Moved), []string{"t-s"}) {
			return fmt.Sprintf("wave a: %+v, %v", run, err)
		}
		return ""
	})
	if waves := p.cp.Rollout().Waves; len(waves) != 1 {
		t.Fatalf("waves %+v, want w1 once", waves)
	}
	wait.For(t, time.Minute, "t-s COMPLETE", func() string {
		if tp, _ := p.cp.Topic("t-s"); tp.State != migration.Complete {
			return fmt.Sprintf("t-s is %s", tp.State)
		}
		return ""
	})
	if unmet := p.cp.Rollout().Unmet; len(unmet) != 1 || !strings.Contains(unmet[0], "soaking") {
		t.Errorf("unmet %q, want the soak", unmet)
	}
	if _, err := p.cp.RunWave(ctx, WaveRequest{Wave: Wave{Name: "w2", Namespaces: []string{"b"}}}, "test"); !errors.Is(err, ErrWaveRefused) ||
		!strings.Contains(err.Error(), "soaking") {
		t.Fatalf("wave b while soaking: %v, want ErrWaveRefused saying soaking", err)
	}
	skew.Store(int64(time.Hour + time.Minute))
	if unmet := p.cp.Rollout().Unmet; len(unmet) != 0 {
		t.Errorf("unmet %q after the soak, want none", unmet)
	}
	if run, err := p.cp.RunWave(ctx, WaveRequest{Wave: Wave{Name: "w2", Namespaces: []string{"b"}}}, "test"); err != nil || len(run.Moved) != 0 {
		t.Fatalf("wave b after the soak: %+v, %v; want it run, moving nothing", run, err)
	}
}

// TestShadowTargetWidens: a topic's shadow features go to the agents of
// its target's namespaces only, and SetShadow with a target widens them
// to the next namespace of a rollout, at a new version.
func TestShadowTargetWidens(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := startKafka(t, ctx)
	p := startPlane(t, ctx, t.TempDir(), "", k)
	a1 := startAgentIn(t, ctx, p.addr, "a1", "a", "app")
	b1 := startAgentIn(t, ctx, p.addr, "b1", "b", "app")
	if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: "orders", Target: xds.Target{Namespaces: []string{"a"}},
		Shadow: Shadow{LatencyEmulation: true}}, "test"); err != nil {
		t.Fatal(err)
	}
	emulates := func(a *standIn) bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.routes["orders"].GetShadow().GetLatencyEmulation()
	}
	routed := func(want string) func() string {
		return func() string {
			if got := fmt.Sprintf("a:%v b:%v", emulates(a1), emulates(b1)); got != want {
				return "latency emulation " + got
			}
			return ""
		}
	}
	wait.For(t, time.Minute, "latency emulation in namespace a only", routed("a:true b:false"))
	before := p.cp.Version()
	tp, err := p.cp.SetShadow(ctx, "orders", ShadowChange{Target: &xds.Target{Namespaces: []string{"a", "b"}}}, "test")
	if err != nil || !slices.Equal(tp.Target.Namespaces, []string{"a", "b"}) || tp.Version <= before {
		t.Fatalf("widening the target: %+v, %v; want namespaces a,b at a version after %d", tp.Target, err, before)
	}
	wait.For(t, time.Minute, "latency emulation in namespaces a and b", routed("a:true b:true"))
	again, err := p.cp.SetShadow(ctx, "orders", ShadowChange{Target: &xds.Target{Namespaces: []string{"b", "a"}}}, "test")
	if err != nil || again.Version != tp.Version {
		t.Errorf("the same target again: version %d, %v; want no new version (%d)", again.Version, err, tp.Version)
	}
}

// TestWriterMemoryOutlivesLease: an agent whose lease ran out still counts
// as a writer of what it wrote for the writer memory after its last write
// (a wave of other namespaces must not move the topic under it), then no
// longer (the control plane's clock, moved on by the test).
func TestWriterMemoryOutlivesLease(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var skew atomic.Int64
	k := startKafka(t, ctx)
	p := startPlane(t, ctx, t.TempDir(), "", k, RolloutWriterMemory(time.Hour),
		Clock(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }))
	k.produce(t, ctx, "t-x", 1)
	if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: "t-x"}, "test"); err != nil {
		t.Fatal(err)
	}
	writersOf := func() string {
		for _, rt := range p.cp.Rollout().Topics {
			if rt.Name == "t-x" {
				return strings.Join(rt.Writers, ",")
			}
		}
		return "t-x not shown"
	}
	b1 := beat(t, ctx, p.cp, "b1", "b", false, "t-x")
	wait.For(t, time.Minute, "t-x written from b", func() string {
		if got := writersOf(); got != "b" {
			return "writers " + got
		}
		return ""
	})
	b1.stop()
	skew.Store(int64(10 * time.Minute)) // b1's lease long over
	if got := writersOf(); got != "b" {
		t.Errorf("10 minutes after b1's last write, lease over: writers %q, want b", got)
	}
	if run, err := p.cp.RunWave(ctx, WaveRequest{Wave: Wave{Name: "a", Namespaces: []string{"a"}}}, "test"); err != nil ||
		len(run.Moved)+len(run.Refused) != 0 {
		t.Errorf("wave a moved %v (refused %v), %v; want t-x held back by b's write", namesOf(run.Moved), run.Refused, err)
	}
	skew.Store(int64(2 * time.Hour))
	if got := writersOf(); got != "" {
		t.Errorf("2 hours after b1's last write: writers %q, want none", got)
	}
}
