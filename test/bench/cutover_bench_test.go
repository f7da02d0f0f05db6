package bench

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/cutover"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/test/clients"
	"github.com/baton-kafka/baton/test/kafka"
)

// Cutover-stall workload. Each cutover's producers are paced at
// rate/len(producers) each for cutoverRun; the cutover starts once every
// producer has acked for cutoverWarm and the topic's replication lag passes
// the time-lag gate, and must complete cutoverTail before the last ack of
// every producer, so that the whole cutover is inside the producers' run.
const (
	cutoverRate  = 5000 // records/s, the producers together (BATON_BENCH_CUTOVER_RATE)
	cutoverCount = 20   // cutovers per mode (BATON_BENCH_CUTOVERS)
	cutoverRun   = 16 * time.Second
	cutoverWarm  = 3 * time.Second
	cutoverTail  = time.Second
)

// cutoverModes are the MIGRATING modes compared (TopicSpec.Mode): the agent
// holds produce until COMPLETE, or answers NOT_LEADER_OR_FOLLOWER at once.
var cutoverModes = []string{"hold", "retriable"}

// BenchmarkCutoverStall: a 3-broker Apache Kafka source (RF 3, 6
// partitions), a 1-broker Apache Kafka destination, a `baton controlplane`
// process (embedded etcd, the in-process replicator) and two `baton agent`
// processes connected to it over xDS. Per cutover a fresh topic is added in
// PROXY, written through the agents by idempotent producers (acks=all),
// franz-go through one and the Java producer through the other, together
// cutoverRate records/s; once replication has caught up it is migrated
// through the control plane's HTTP API, the producers writing on to
// COMPLETE and after. The cutovers alternate between the modes, N of each.
//
// Per cutover: the longest gap between two acks any producer saw in the
// window from the initiated event to the completed one (and, for scale, in
// as long a window just before it, in PROXY); the window's length; each
// step's Took; records the client reported failed (client-visible errors);
// and the partition errors the agents answered produce with (retried by
// the clients without telling the application). Every acked record must be
// on the destination where its ack says, once (clients.Verify).
func BenchmarkCutoverStall(b *testing.B) {
	if b.N > 1 {
		b.Skip("runs a fixed workload once; use -benchtime 1x")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	if _, err := kafka.Java(); err != nil {
		b.Skipf("no Apache Kafka or Java producer without java: %v", err)
	}
	if _, err := kafka.Classpath(ctx); errors.Is(err, kafka.ErrUnavailable) {
		b.Skipf("no Apache Kafka jars: %v", err)
	}
	n := envInt(b, "BATON_BENCH_CUTOVERS", cutoverCount)
	rate := envInt(b, "BATON_BENCH_CUTOVER_RATE", cutoverRate)
	src, dst := kafka.StartT(b, kafka.Brokers(3)), kafka.StartT(b, kafka.Brokers(1))
	st := startCutoverStack(b, buildBaton(b), src.Bootstrap(), dst.Bootstrap(), "bench-a", "bench-b")
	results := map[string][]cutoverResult{}
	for i := range n {
		for _, mode := range cutoverModes {
			r := runCutover(b, ctx, st, cutoverCase{
				topic: fmt.Sprintf("cutover-%s-%02d", mode, i), mode: mode, rate: rate,
				src: src.Bootstrap(), dst: dst.Bootstrap(),
			})
			results[mode] = append(results[mode], r)
			b.Logf("%s: gap %v (PROXY %v), cutover %v, %d acked, %d errors, %.0f agent error answers",
				r.topic, r.gap, r.before, r.took, r.acked, r.errors, r.errorAnswers)
		}
	}
	reportCutovers(b, results, n, rate)
}

// cutoverCase is one cutover to run.
type cutoverCase struct {
	topic, mode string
	rate        int // records/s, the producers together
	src, dst    string
}

// cutoverResult is what one cutover measured.
type cutoverResult struct {
	topic string
	// gap is the longest gap between two acks any producer saw in the
	// cutover's window; before, in a window as long just before it.
	gap, before  time.Duration
	gapBy        map[string]time.Duration // client name -> its gap
	took         time.Duration            // initiated to completed
	steps        map[string]time.Duration // event kind -> Took
	acked        int
	errors       int     // records a client reported failed
	errorAnswers float64 // partition errors the agents answered produce with
}

// snapshot is a copy of the acks p has reported so far.
func (p *stallProducer) snapshot() []clients.Ack {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]clients.Ack(nil), p.acks...)
}

// runCutover runs one cutover of c under load and measures it.
func runCutover(b *testing.B, ctx context.Context, st *cutoverStack, c cutoverCase) cutoverResult {
	createTopic(b, c.src, c.topic, 3)
	t, err := st.api.Add(ctx, controlplane.TopicSpec{Name: c.topic, State: migration.Proxy, Mode: c.mode}, "bench")
	if err != nil {
		b.Fatalf("adding %s: %v", c.topic, err)
	}
	st.waitAgents(b, t.Version)
	ps := startCutoverProducers(b, ctx, st, c)
	waitWarm(b, ps)
	st.waitLag(b, c.topic)
	answered := st.errorAnswers(b)
	st.migrate(b, ctx, c.topic)
	evs := st.cutoverEvents(b, ctx, c.topic, 2*time.Minute)
	for _, p := range ps {
		<-p.done
	}
	r := cutoverResult{topic: c.topic, errorAnswers: st.errorAnswers(b) - answered,
		steps: map[string]time.Duration{}, gapBy: map[string]time.Duration{}}
	var from, to time.Time
	for _, e := range evs {
		switch {
		case e.Kind == controlplane.EventInitiated:
			from = e.Time
		case e.Kind == controlplane.EventCompleted:
			to = e.Time
		}
		if e.Took > 0 {
			r.steps[e.Kind] = e.Took
		}
	}
	r.took = to.Sub(from)
	for _, p := range ps {
		r.measure(b, ctx, p, from, to, c.dst)
	}
	return r
}

// measure adds producer p's acks to r and verifies them on dst.
func (r *cutoverResult) measure(b *testing.B, ctx context.Context, p *stallProducer, from, to time.Time, dst string) {
	name := p.p.Name() + " on " + p.cfg.Topic
	if errors.Is(p.err, clients.ErrUnavailable) {
		b.Skipf("%s: %v", name, p.err)
	}
	if p.err != nil {
		b.Errorf("%s: %v", name, p.err)
	}
	var at []time.Time
	for _, a := range p.acks {
		if a.Err != "" {
			r.errors++
			continue
		}
		at = append(at, a.At)
	}
	r.acked += len(at)
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	if len(at) == 0 || at[len(at)-1].Before(to.Add(cutoverTail)) {
		b.Errorf("%s: its last ack came less than %v after the cutover completed: raise cutoverRun", name, cutoverTail)
	}
	d := to.Sub(from)
	r.gapBy[p.p.Name()] = windowGap(at, from, to)
	r.gap = max(r.gap, r.gapBy[p.p.Name()])
	// Before the window: the gaps that ended by its start (one that
	// spans the start is the cutover's).
	inProxy := at[:sort.Search(len(at), func(i int) bool { return at[i].After(from) })]
	r.before = max(r.before, windowGap(inProxy, from.Add(-min(d, cutoverWarm)), from))
	if err := clients.Verify(ctx, dst, p.cfg.Topic, p.acks, p.cfg); err != nil {
		b.Errorf("%s: %v", name, err)
	}
}

// startCutoverProducers starts one producer per agent of st on c's topic,
// franz-go and the Java producer in turn, each once the one before it has
// acked a record: the slow start of a JVM on a loaded machine does not
// eat into the others' runs.
func startCutoverProducers(b *testing.B, ctx context.Context, st *cutoverStack, c cutoverCase) []*stallProducer {
	kinds := []clients.Producer{clients.Java{}, clients.Franz{}}
	per := c.rate / len(st.agents)
	var ps []*stallProducer
	for i, a := range st.agents {
		k := kinds[i%len(kinds)]
		p := &stallProducer{name: k.Name(), via: a.node, p: k, done: make(chan struct{}), cfg: clients.ProduceConfig{
			Bootstrap: a.addr, Topic: c.topic, Records: per * int(cutoverRun/time.Second), Rate: per,
			Idempotent: true, KeyPrefix: c.topic + "-" + k.Name(),
		}}
		go func() {
			defer close(p.done)
			p.err = p.p.Produce(ctx, p.cfg, func(a clients.Ack) { p.mu.Lock(); p.acks = append(p.acks, a); p.mu.Unlock() })
		}()
		ps = append(ps, p)
		wait.For(b, 2*time.Minute, p.name+"'s first ack on "+c.topic, func() string {
			select {
			case <-p.done:
				if errors.Is(p.err, clients.ErrUnavailable) {
					b.Skipf("%s: %v", p.name, p.err)
				}
				b.Fatalf("%s on %s ended before its first ack: %v", p.name, c.topic, p.err)
			default:
			}
			if len(p.snapshot()) == 0 {
				return "none yet"
			}
			return ""
		})
	}
	return ps
}

// waitWarm waits until every producer has acked records for cutoverWarm
// (a JVM's start is not in the measurement).
func waitWarm(b *testing.B, ps []*stallProducer) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		warm := true
		for _, p := range ps {
			select {
			case <-p.done:
				b.Fatalf("%s on %s ended before the cutover: %v", p.p.Name(), p.cfg.Topic, p.err)
			default:
			}
			acks := p.snapshot()
			warm = warm && len(acks) > 0 && time.Since(acks[0].At) >= cutoverWarm
		}
		if warm {
			return
		}
		if time.Now().After(deadline) {
			b.Fatal("a producer did not ack for long enough before the cutover")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// windowGap is the longest gap between two successive times of sorted at
// that ends after from and starts before to: the stall a producer saw
// during the window, including the one it was in at the window's start or
// end.
func windowGap(at []time.Time, from, to time.Time) time.Duration {
	var g time.Duration
	for i := 1; i < len(at); i++ {
		if at[i].After(from) && !at[i-1].After(to) {
			g = max(g, at[i].Sub(at[i-1]))
		}
	}
	return g
}

// cutoverStepKinds are the events whose Took is reported, in order.
var cutoverStepKinds = append(append([]string(nil), cutover.Steps...), controlplane.EventCompleted)
