package rollout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/internal/kafkaenv"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
)

// The tests here that need a control plane with a cutover that runs use
// one on a source and a destination on kfake, with a running replicator,
// and embedded etcd (as package controlplane's own tests do); the
// heartbeats of the agents are the control plane's, so what the rollout
// learns goes through controlplane.ObserveReports.

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Short leases keep the tests quick; every check waits on a condition.
const (
	tForward = 300 * time.Millisecond
	tTimeout = 10 * time.Second
)

// kafkaEnv is a source and destination on kfake with a running replicator
// (package kafkaenv).
type kafkaEnv struct {
	src, dst *embedded.Cluster
	repl     *replication.ReplicatorAdapter
	prod     *kgo.Client
}

func startKafka(t *testing.T, ctx context.Context) *kafkaEnv {
	t.Helper()
	e := kafkaenv.Start(t, ctx)
	return &kafkaEnv{src: e.Src, dst: e.Dst, repl: e.Repl, prod: e.Prod}
}

func (k *kafkaEnv) produce(t *testing.T, ctx context.Context, topic string, n int) {
	t.Helper()
	kafkaenv.Produce(t, ctx, k.prod, topic, n)
}

// plane is a running control plane on embedded etcd in dir, and its
// rollout.
type plane struct {
	cp *controlplane.ControlPlane
	ro *Job
}

func startPlane(t *testing.T, ctx context.Context, dir string, k *kafkaEnv, opts ...Opt) *plane {
	t.Helper()
	st, err := controlplane.OpenEmbedded(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	w := &Writers{}
	cp, err := controlplane.New(ctx, controlplane.WithStore(st), controlplane.WithReplication(k.repl),
		controlplane.LeaseDuration(tLease), controlplane.ForwardDeadline(tForward), controlplane.CutoverTimeout(tTimeout),
		controlplane.Logger(quiet), controlplane.ObserveReports(w),
		controlplane.Clusters(&batonv1.Cluster{Name: "source", Bootstrap: k.src.Addrs()},
			&batonv1.Cluster{Name: "destination", Bootstrap: k.dst.Addrs()}))
	if err != nil {
		_ = st.Close()
		t.Fatal(err)
	}
	ro, err := New(PlaneOf(cp), w, opts...)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = cp.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done; _ = st.Close() })
	return &plane{cp: cp, ro: ro}
}

// heartbeater heartbeats the Lease service as an agent of a namespace
// does, every tLease/4, at the current config version: reporting source
// writes on the topics it writes until they are MIGRATING (then it reports
// them stopped and drained), or one request in flight on them for good
// when stuck (a cutover of them waits until it times out).
type heartbeater struct {
	stop func()
}

func beat(t *testing.T, ctx context.Context, cp *controlplane.ControlPlane, node, namespace string, stuck bool, writes ...string) *heartbeater {
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

// TestRolloutWriters: the rollout learns each topic's writer namespaces
// from the agents' heartbeats to the control plane (an agent that only
// routes a topic is no writer; one whose lease and writer memory ran out
// no longer counts), shows them per namespace and per topic (Status), runs
// a wave through the control plane's Migrate, refuses bad waves naming the
// field, and refuses the next wave while the wave before it set complete
// and its topic is not COMPLETE.
func TestRolloutWriters(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := startKafka(t, ctx)
	p := startPlane(t, ctx, t.TempDir(), k, WriterMemory(tLease))
	for _, topic := range []string{"t-a", "t-b", "t-ab", "t-none"} {
		k.produce(t, ctx, topic, 1)
		if _, err := p.cp.AddTopic(ctx, controlplane.TopicSpec{Name: topic}, "test"); err != nil {
			t.Fatal(err)
		}
	}
	beat(t, ctx, p.cp, "a1", "a", true, "t-a", "t-ab")
	b1 := beat(t, ctx, p.cp, "b1", "b", false, "t-b", "t-ab")
	beat(t, ctx, p.cp, "c1", "c", false)

	writers := func(ro Status) map[string]string {
		out := map[string]string{}
		for _, rt := range ro.Topics {
			out[rt.Name] = strings.Join(rt.Writers, ",")
		}
		return out
	}
	wait.For(t, time.Minute, "every writer known", func() string {
		ro := p.ro.Status()
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
		if _, err := p.ro.RunWave(ctx, tc.req, "test"); !errors.Is(err, controlplane.ErrBadConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("RunWave(%+v): %v, want ErrBadConfig saying %q", tc.req, err, tc.want)
		}
	}

	// a1 holds a request in flight on t-a: its cutover cannot complete.
	run, err := p.ro.RunWave(ctx, WaveRequest{Wave: Wave{Name: "first", Namespaces: []string{"a"}, Until: WaveUntil{Complete: true}}}, "test")
	if err != nil {
		t.Fatal(err)
	}
	moved := append(namesOf(run.Moved), stayedTopics(run.Refused)...)
	if !slices.Equal(moved, []string{"t-a"}) || !slices.Equal(stayedTopics(run.Stayed), []string{"t-ab", "t-b", "t-none"}) {
		t.Fatalf("wave a: moved %v, refused %v, stayed %v; want t-a moved (or refused by a gate), the others stayed",
			run.Moved, run.Refused, run.Stayed)
	}
	_, err = p.ro.RunWave(ctx, WaveRequest{Wave: Wave{Name: "second", Namespaces: []string{"b"}}}, "test")
	if !errors.Is(err, ErrWaveRefused) || !strings.Contains(err.Error(), "t-a") || !strings.Contains(err.Error(), "want COMPLETE") {
		t.Fatalf("wave b while t-a is not COMPLETE: %v, want ErrWaveRefused naming t-a", err)
	}
	if waves := p.ro.Status().Waves; len(waves) != 1 || waves[0].Name != "first" {
		t.Fatalf("waves %+v, want the first only", waves)
	}
	if tp, _ := p.cp.Topic("t-a"); tp.State == migration.Migrating {
		if _, err := p.cp.Abort(ctx, "t-a", "test", "the test is done with it"); err != nil {
			t.Fatal(err)
		}
	}

	b1.stop()
	wait.For(t, time.Minute, "b1's writes forgotten once its lease and the writer memory ran out", func() string {
		if got := writers(p.ro.Status()); got["t-b"] != "" || got["t-ab"] != "a" {
			return fmt.Sprintf("writers %v", got)
		}
		return ""
	})
}
