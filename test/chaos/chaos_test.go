package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/httpapi"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/test/chaos/history"
	"github.com/baton-kafka/baton/test/clients"
	"github.com/baton-kafka/baton/test/kafka"
)

// Environment of TestChaos, which test/chaos/run.sh sets.
const (
	envRuns         = "BATON_CHAOS_RUNS"      // runs; unset: the suite skips
	envSeed         = "BATON_CHAOS_SEED"      // first run's seed (run i uses seed+i); default from the clock
	envDuration     = "BATON_CHAOS_DURATION"  // producing time per run; default 40s
	envAgentLog     = "BATON_CHAOS_AGENT_LOG" // the agents' --log-level; default info
	defaultDuration = 40 * time.Second
	// producerSlack is how long past its last record's due time, and past
	// the moment the fault schedule healed (every process it stopped is
	// back: a broker's restart on a loaded machine was seen to take 74 s),
	// a producer may take to get every outcome; the worst cutover
	// (timeout 10 s) and hold (5 s) fit many times over.
	producerSlack = time.Minute
)

// suite is what every run of one TestChaos shares: the binary and the
// clusters (each run has its own topics, control plane and agents).
type suite struct {
	bin  string
	src  *kafka.Cluster
	dst  *kafka.Cluster
	dur  time.Duration
	netF func(cpPort int) (agentNet, error)
}

// TestChaos runs the fault-injection suite and prints one summary line,
// "chaos: N runs, A acked, L lost, R reordered, D duplicates, F fatal, max
// stall Xs", last.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: -short: the suite starts four Kafka JVMs and runs for minutes")
	}
	if os.Getenv(envRuns) == "" {
		// `go test ./...` runs the other packages' tests side by side on
		// the machine's cores; the suite runs on its own after them
		// (`make test` runs two runs, `make chaos` any number), both
		// through run.sh, which sets the runs.
		t.Skip("chaos: run by `make test` after the other tests, or `make chaos RUNS=N` (sets " + envRuns + ")")
	}
	seed, dur := uint64(time.Now().UnixNano()%1_000_000), defaultDuration
	runs, err := strconv.Atoi(os.Getenv(envRuns))
	if err != nil || runs < 1 {
		t.Fatalf("%s=%q: want a positive number of runs", envRuns, os.Getenv(envRuns))
	}
	if v := os.Getenv(envSeed); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an unsigned integer seed", envSeed, v)
		}
		seed = s
	}
	if v := os.Getenv(envDuration); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 20*time.Second {
			t.Fatalf("%s=%q: want a duration of at least 20s", envDuration, v)
		}
		dur = d
	}
	fmt.Printf("chaos: %d runs from seed %d, %v of producing each (%s=%d reproduces)\n", runs, seed, dur, envSeed, seed)

	s := &suite{dur: dur, bin: buildBaton(t)}
	if why := netnsSupport(); why != "" {
		fmt.Printf("chaos: agents run without network namespaces (%s): cut off from the control plane by a relay that holds every byte\n", why)
		s.netF = func(cpPort int) (agentNet, error) { return newRelayNet("127.0.0.1:" + strconv.Itoa(cpPort)) }
	} else {
		s.netF = func(cpPort int) (agentNet, error) { return newNetns(cpPort) }
	}
	s.src, s.dst = startClusters(t)

	var total history.Report
	failed := 0
	for i := 0; i < runs; i++ {
		runSeed := seed + uint64(i)
		var rep history.Report
		ok := t.Run(fmt.Sprintf("seed=%d", runSeed), func(t *testing.T) { rep = s.run(t, i, runSeed) })
		if !ok || !rep.OK() {
			failed++
		}
		total.Acked += rep.Acked
		total.Lost += rep.Lost
		total.Reordered += rep.Reordered
		total.Duplicates += rep.Duplicates
		total.Fatal += rep.Fatal
		total.Unanswered += rep.Unanswered
		total.Misplaced += rep.Misplaced
		total.LateSourceWrites += rep.LateSourceWrites
		if rep.MaxStall > total.MaxStall {
			total.MaxStall, total.StallProducer = rep.MaxStall, fmt.Sprintf("seed %d: %s", runSeed, rep.StallProducer)
		}
	}
	if total.Misplaced+total.LateSourceWrites+total.Unanswered > 0 {
		fmt.Printf("chaos: also %d misplaced (offset parity), %d written to the source after replication stopped, %d never answered (hung producers)\n",
			total.Misplaced, total.LateSourceWrites, total.Unanswered)
	}
	fmt.Printf("chaos: longest stall %s (%s); %d of %d runs failed\n", total.MaxStall.Round(time.Millisecond), total.StallProducer, failed, runs)
	fmt.Printf("chaos: %d runs, %d acked, %d lost, %d reordered, %d duplicates, %d fatal, max stall %.1fs\n",
		runs, total.Acked, total.Lost, total.Reordered, total.Duplicates, total.Fatal, total.MaxStall.Seconds())
}

// buildBaton builds the binary from this tree.
func buildBaton(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	bin := filepath.Join(t.TempDir(), "baton")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/baton")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building baton: %v\n%s", err, out)
	}
	return bin
}

// startClusters starts S (3 nodes, so that one may die) and D (1 node) at
// once.
func startClusters(t *testing.T) (src, dst *kafka.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), kafka.DefaultStartTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var serr, derr error
	sdir, ddir := t.TempDir(), t.TempDir()
	wg.Add(2)
	go func() {
		defer wg.Done()
		src, serr = kafka.Start(ctx, kafka.Brokers(3), kafka.Dir(sdir), kafka.Partitions(3))
	}()
	go func() {
		defer wg.Done()
		dst, derr = kafka.Start(ctx, kafka.Brokers(1), kafka.Dir(ddir), kafka.Partitions(3))
	}()
	wg.Wait()
	for _, c := range []*kafka.Cluster{src, dst} {
		if c != nil {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("kafka cluster %s, log tail:\n%s", c.Dir(), c.LogTail(5))
				}
				_ = c.Stop()
			})
		}
	}
	if serr != nil || derr != nil {
		t.Fatalf("starting clusters: source: %v; destination: %v", serr, derr)
	}
	return src, dst
}

// producerPlan is one producer of a run.
type producerPlan struct {
	id         string
	client     clients.Producer
	idempotent bool
	topic      string
	agent      int
}

// world is one run's processes.
type world struct {
	t       *testing.T
	s       *suite
	dir     string
	start   time.Time
	cp      *process
	cpPorts []int
	api     *httpapi.Client
	agents  []*process
	nets    []agentNet
	listen  []string // each agent's listen address, what its producers dial
	logMu   sync.Mutex
	lines   []string
}

// logf prints a timeline line (elapsed since the run began) now and keeps it
// for the run's report.
func (w *world) logf(format string, args ...any) {
	l := fmt.Sprintf("t+%5.1fs ", time.Since(w.start).Seconds()) + fmt.Sprintf(format, args...)
	w.logMu.Lock()
	w.lines = append(w.lines, l)
	w.logMu.Unlock()
	fmt.Println("chaos:   " + l)
}

func (s *suite) run(t *testing.T, idx int, seed uint64) history.Report {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	dir, err := os.MkdirTemp("", fmt.Sprintf("baton-chaos-%d-", seed))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			fmt.Printf("chaos: run seed=%d: logs kept in %s\n", seed, dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	if os.Getenv("BATON_RDKAFKA_DEBUG") != "" {
		// produce.py writes librdkafka's debug log there (runs are serial).
		os.Setenv("BATON_RDKAFKA_LOG_DIR", dir)
	}
	w := &world{t: t, s: s, dir: dir, start: time.Now()}
	ctx := t.Context()

	topics := []string{fmt.Sprintf("chaos-%d-%d-a", seed, idx), fmt.Sprintf("chaos-%d-%d-b", seed, idx), fmt.Sprintf("chaos-%d-%d-c", seed, idx)}
	for _, tp := range topics {
		if err := clients.CreateTopic(ctx, s.src.Bootstrap(), tp, 3, 3); err != nil {
			t.Fatal(err)
		}
	}
	plans := drawProducers(rng, topics)
	sched := drawSchedule(rng, s.dur, topics)
	fmt.Printf("chaos: run seed=%d: topics %s\n", seed, strings.Join(topics, " "))
	for _, p := range plans {
		fmt.Printf("chaos:   producer %s: %s idempotent=%v -> %s via agent-%d\n", p.id, p.client.Name(), p.idempotent, p.topic, p.agent)
	}
	for _, e := range sched {
		fmt.Printf("chaos:   planned t+%4.1fs %s\n", e.at.Seconds(), e)
	}

	w.startControlPlane()
	w.startAgents(2)
	for _, tp := range topics {
		if _, err := w.api.Add(ctx, controlplane.TopicSpec{Name: tp, State: migration.Proxy}, "chaos"); err != nil {
			t.Fatalf("adding %s: %v", tp, err)
		}
	}
	w.waitAgentsCurrent(60 * time.Second)
	w.start = time.Now()
	w.logf("topics in PROXY, agents current; producing for %v", s.dur)

	var rec history.Recorder
	producers := make([]history.Producer, len(plans))
	var pwg sync.WaitGroup
	// Producers stop producerSlack after the later of their last record's
	// due time and the schedule's healing (below): a bound on a hung
	// client, not on how fast this machine restarts a broker.
	stopCtx, stopProducers := context.WithCancel(ctx)
	defer stopProducers()
	const rate = 40
	for i, p := range plans {
		producers[i] = history.Producer{ID: p.id, Client: p.client.Name(), Idempotent: p.idempotent, Topic: p.topic, Start: time.Now()}
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			// Producers get far longer than they need: a client that
			// gives up on its own is the finding, not the bound.
			pctx := stopCtx
			cfg := clients.ProduceConfig{Bootstrap: w.listen[p.agent], Topic: p.topic,
				Records: rate * int(s.dur/time.Second), Rate: rate, Idempotent: p.idempotent, KeyPrefix: p.id,
				Persistent: true} // producers here are applications: an agent restart must not end them
			err := p.client.Produce(pctx, cfg, func(a clients.Ack) {
				// What the driver fails once the run stopped it is no
				// answer of the client's.
				stopped := a.Err != "" && pctx.Err() != nil
				rec.Add(history.Ack{Producer: p.id, Seq: a.Seq, Partition: a.Partition, Offset: a.Offset, Err: a.Err, Unanswered: stopped, At: a.At})
			})
			producers[i].End = time.Now()
			if err != nil && pctx.Err() != nil {
				w.logf("producer %s still had records without an outcome %v after its last record was due and the faults healed; stopped", p.id, producerSlack)
			} else if err != nil {
				producers[i].Err = err.Error()
				w.logf("producer %s ended with: %v", p.id, err)
			}
		}()
	}

	w.play(ctx, sched)
	w.logf("schedule done, every stopped process back; waiting for producers")
	stopAt := w.start.Add(s.dur + producerSlack)
	if healed := time.Now().Add(producerSlack); healed.After(stopAt) {
		stopAt = healed
	}
	stopTimer := time.AfterFunc(time.Until(stopAt), stopProducers)
	defer stopTimer.Stop()
	pwg.Wait()
	w.logf("producers done")

	// Let any cutover still running end (complete or roll back).
	var final []controlplane.Topic
	wait.For(t, 90*time.Second, "no topic in MIGRATING", func() string {
		ts, err := w.api.Topics(ctx)
		if err != nil {
			return err.Error()
		}
		final = ts
		for _, tp := range ts {
			if tp.State == migration.Migrating {
				return tp.Name + " is MIGRATING"
			}
		}
		return ""
	})
	completed := map[string]bool{}
	for _, tp := range final {
		completed[tp.Name] = tp.State == migration.Complete
		w.logf("final: %s %s (version %d, %d cutover attempts)", tp.Name, tp.State, tp.Version, tp.Attempts)
	}
	w.printEvents(topics)

	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	srcLog, err := history.Read(rctx, s.src.Addrs(), topics)
	if err != nil {
		t.Fatalf("reading the source: %v", err)
	}
	dstLog, err := history.Read(rctx, s.dst.Addrs(), topics)
	if err != nil {
		t.Fatalf("reading the destination: %v", err)
	}
	rep := history.Check(history.Input{Producers: producers, Acks: rec.Acks(), Completed: completed, Source: srcLog, Destination: dstLog})
	fmt.Printf("chaos: run seed=%d: %s\n", seed, strings.ReplaceAll(rep.String(), "\n", "\nchaos:   "))
	if !rep.OK() {
		w.dumpLogs()
		t.Errorf("seed %d broke an invariant (see the report above; %s=%d reproduces the schedule)", seed, envSeed, seed)
	}
	return rep
}

// drawProducers picks the run's producers: always franz-go and kcat
// (librdkafka), idempotent, plus two more from the matrix, idempotent or
// not, spread over the topics and agents.
func drawProducers(rng *rand.Rand, topics []string) []producerPlan {
	type kind struct {
		c    clients.Producer
		idem bool
	}
	pool := []kind{{clients.Franz{}, false}, {clients.Kcat{}, false}, {clients.Python{}, true}, {clients.Franz{}, true}}
	kinds := []kind{{clients.Franz{}, true}, {clients.Kcat{}, true}}
	for _, i := range rng.Perm(len(pool))[:2] {
		kinds = append(kinds, pool[i])
	}
	var out []producerPlan
	for i, k := range kinds {
		mode := "plain"
		if k.idem {
			mode = "idem"
		}
		out = append(out, producerPlan{id: fmt.Sprintf("p%d.%s.%s", i, k.c.Name(), mode), client: k.c, idempotent: k.idem,
			topic: topics[i%len(topics)], agent: i % 2})
	}
	return out
}

func (w *world) startControlPlane() {
	t := w.t
	ports, release, err := kafka.ReservePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	w.cpPorts = ports
	grpcAddr, httpAddr := "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1])
	data := filepath.Join(w.dir, "etcd")
	args := []string{"controlplane", "--source", w.s.src.Bootstrap(), "--destination", w.s.dst.Bootstrap(),
		"--grpc", grpcAddr, "--http", httpAddr, "--data-dir", data, "--write-guard", "none"}
	w.cp = &process{name: "controlplane", log: filepath.Join(w.dir, "controlplane.log"),
		cmd: func() *exec.Cmd { return exec.Command(w.s.bin, args...) }}
	w.api = &httpapi.Client{Base: "http://" + httpAddr}
	if err := w.cp.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.cp.kill)
	w.waitControlPlane(60 * time.Second)
}

func (w *world) waitControlPlane(d time.Duration) {
	wait.For(w.t, d, "the control plane's HTTP API", func() string {
		if err := w.cp.alive(); err != nil {
			return err.Error()
		}
		ctx, cancel := context.WithTimeout(w.t.Context(), 2*time.Second)
		defer cancel()
		if _, err := w.api.Topics(ctx); err != nil {
			return err.Error()
		}
		return ""
	})
}

func (w *world) startAgents(n int) {
	t := w.t
	for i := 0; i < n; i++ {
		an, err := w.s.netF(w.cpPorts[0])
		if err != nil {
			t.Fatalf("agent-%d's network: %v", i, err)
		}
		t.Cleanup(func() { _ = an.Close() })
		listen, admin := an.Host()+":9092", an.Host()+":9404"
		if an.Host() == "127.0.0.1" {
			ports, release, err := kafka.ReservePorts(2)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(release)
			listen, admin = "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1])
		}
		args := []string{"agent", "--listen", listen, "--admin", admin, "--source", w.s.src.Bootstrap(),
			"--destination", w.s.dst.Bootstrap(), "--control-plane", an.ControlPlane(), "--node-id", fmt.Sprintf("agent-%d", i),
			// The pod's emptyDir: it outlives each kill of the agent.
			"--state-dir", filepath.Join(w.dir, fmt.Sprintf("agent-%d.state", i))}
		if lvl := os.Getenv(envAgentLog); lvl != "" {
			args = append(args, "--log-level", lvl)
		}
		p := &process{name: fmt.Sprintf("agent-%d", i), log: filepath.Join(w.dir, fmt.Sprintf("agent-%d.log", i)),
			cmd: func() *exec.Cmd { return an.Wrap(w.s.bin, args) }}
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.kill)
		w.agents = append(w.agents, p)
		w.nets = append(w.nets, an)
		w.listen = append(w.listen, listen)
	}
}

// waitAgentsCurrent waits until every agent holds a valid lease and acked
// the newest topic version.
func (w *world) waitAgentsCurrent(d time.Duration) {
	wait.For(w.t, d, "every agent leased and current", func() string {
		ctx, cancel := context.WithTimeout(w.t.Context(), 2*time.Second)
		defer cancel()
		ts, err := w.api.Topics(ctx)
		if err != nil {
			return err.Error()
		}
		var v uint64
		for _, tp := range ts {
			v = max(v, tp.Version)
		}
		as, err := w.api.Agents(ctx)
		if err != nil {
			return err.Error()
		}
		seen := map[string]bool{}
		for _, a := range as {
			if a.LeaseValid && a.AckedVersion >= v {
				seen[a.Node] = true
			}
		}
		for i := range w.agents {
			if err := w.agents[i].alive(); err != nil {
				return err.Error()
			}
			if !seen[fmt.Sprintf("agent-%d", i)] {
				return fmt.Sprintf("agent-%d not leased at version %d yet (%d agents known)", i, v, len(as))
			}
		}
		return ""
	})
}

// printEvents prints each topic's cutover events, in one line per topic.
func (w *world) printEvents(topics []string) {
	for _, tp := range topics {
		var kinds []string
		ctx, cancel := context.WithTimeout(w.t.Context(), 5*time.Second)
		err := w.api.Events(ctx, tp, false, func(e controlplane.Event) error {
			k := e.Kind
			if e.To != "" {
				k += "->" + e.To
			}
			if e.Reason != "" {
				k += "(" + e.Reason + ")"
			}
			kinds = append(kinds, fmt.Sprintf("%s@%.1fs", k, e.Time.Sub(w.start).Seconds()))
			return nil
		})
		cancel()
		if err != nil {
			w.logf("events of %s: %v", tp, err)
			continue
		}
		w.logf("events %s: %s", tp, strings.Join(kinds, " "))
	}
}

// dumpLogs prints the tail of every process's log of a failed run.
func (w *world) dumpLogs() {
	for _, p := range append([]*process{w.cp}, w.agents...) {
		b, err := os.ReadFile(p.log)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		w.t.Logf("%s log tail (%s):\n%s", p.name, p.log, strings.Join(lines, "\n"))
	}
}
