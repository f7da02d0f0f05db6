package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/internal/recordbatch"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/test/clients"
	"github.com/baton-kafka/baton/test/kafka"
)

// TestCutoverEveryClient cuts a topic over from the source to the
// destination while each client of the matrix produces to it through an
// agent, idempotent and not, on two pairs of clusters: kfake to kfake, and
// a three-broker Apache Kafka to a one-broker Apache Kafka. Each case gets
// its own agent with a static route table: PROXY while the client starts
// (600 keyed records at 120 a second); MIGRATING (hold mode) once a third
// are acked; COMPLETE once the agent holds a produce request and has an
// answer for every request it received before MIGRATING (the drain the
// control plane waits for). No replicator runs: the test is about the
// producer path (docs/design.md §3, §5 to §7; invariants 2, 4 and 7). The
// destination partitions are filled beforehand (see fillDestination).
//
// Every record must be acked without error; found at its acked partition
// and offset on the source or the destination, with its key there; stored
// once across both clusters (without idempotence a duplicate is excused
// only in a partition the agent answered with the retriable error); with
// idempotence, on the source up to some point of its partition and on the
// destination after it, under one source producer session. On the agent's
// side (a filter): no request received after MIGRATING was written to the
// source, and nothing answered after COMPLETE was acked from the source.
// One answer from the source is not a write: a retry of an idempotent batch
// the agent answered retriable before MIGRATING (its outcome unknown, a
// source slower than the forward deadline) is answered after COMPLETE with
// the offset the source holds it at (filter/pidmap).
func TestCutoverEveryClient(t *testing.T) {
	// The destination Kafka starts while the source (shared with the other
	// tests) does: starting JVMs is most of this test's time.
	dstKafka := startKafkaAsync(t, 1)
	targets := []struct {
		name     string
		clusters func(t *testing.T) (src, dst string, srcRF, dstRF int16)
	}{
		{"kfake", func(t *testing.T) (string, string, int16, int16) {
			e := envs[0].get(t)
			dst, err := destinationAddrs()
			if err != nil {
				t.Fatal(err)
			}
			return e.source, strings.Join(dst, ","), sourceBrokers, 1
		}},
		{"apache-kafka", func(t *testing.T) (string, string, int16, int16) {
			e := envs[1].get(t)
			return e.source, dstKafka(t).Bootstrap(), sourceBrokers, 1
		}},
	}
	// The cases run concurrently, bounded by runSlots (BATON_E2E_RUNS)
	// rather than -parallel (GOMAXPROCS, 2 here): a paced run mostly
	// waits. Subtests started from several goroutines without t.Parallel
	// are not counted against -parallel.
	var targetsDone sync.WaitGroup
	for _, tg := range targets {
		targetsDone.Add(1)
		go func() {
			defer targetsDone.Done()
			t.Run(tg.name, func(t *testing.T) {
				src, dst, srcRF, dstRF := tg.clusters(t)
				var casesDone sync.WaitGroup
				for _, c := range clients.Matrix() {
					for _, idempotent := range []bool{true, false} {
						casesDone.Add(1)
						go func() {
							defer casesDone.Done()
							t.Run(fmt.Sprintf("%s/idempotent=%v", c.Name(), idempotent), func(t *testing.T) {
								cutoverCase(t, cutoverSpec{
									target: tg.name, src: src, dst: dst, srcRF: srcRF, dstRF: dstRF,
									client: c, idempotent: idempotent,
								})
							})
						}()
					}
				}
				casesDone.Wait()
			})
		}()
	}
	targetsDone.Wait()
}

const (
	cutoverRecords = 600
	// cutoverPauseAt is the first record a client sends only after
	// MIGRATING, which the test pushes once a tenth of the records are
	// acked: a wide margin for acks a client reports late (kcat prints a
	// burst's delivery reports only when it reads the next one; on Apache
	// Kafka it had reported 160 of the 300 sent before the pause).
	cutoverPauseAt    = cutoverRecords / 2
	cutoverRate       = 120 // records per second: 5 s per run
	cutoverPartitions = 3
)

type cutoverSpec struct {
	target       string
	src, dst     string
	srcRF, dstRF int16
	client       clients.Client
	idempotent   bool
}

func cutoverCase(t *testing.T, s cutoverSpec) {
	ctx, cancel := context.WithTimeout(t.Context(), caseTimeout)
	defer cancel()
	name := s.client.Name()
	what := fmt.Sprintf("cutover-%s-%s-idem%v", s.target, name, s.idempotent)
	topic := fmt.Sprintf("e2e-%s-%d-%d", what, os.Getpid(), topicSeq.Add(1))
	if err := clients.CreateTopic(ctx, s.src, topic, cutoverPartitions, s.srcRF); err != nil {
		t.Fatalf("on the source: %v", err)
	}
	if err := clients.CreateTopic(ctx, s.dst, topic, cutoverPartitions, s.dstRF); err != nil {
		t.Fatalf("on the destination: %v", err)
	}
	if err := fillDestination(ctx, s.dst, topic); err != nil {
		t.Fatalf("on the destination: %v", err)
	}
	routes := agent.NewRouteTable([]agent.Route{{Topic: topic, State: migration.Proxy}})
	reg := prometheus.NewRegistry()
	rec := newCutoverRecorder(topic)
	addr := startCutoverAgent(t, ctx, what, s.src, s.dst, routes, reg, rec)

	// The second half of the run waits for MIGRATING: a client that got
	// ahead of the test (a loaded machine, acks reported in bursts) would
	// otherwise send every record to the source before the cutover began.
	migrating := make(chan struct{})
	resume := sync.OnceFunc(func() { close(migrating) })
	cfg := clients.ProduceConfig{
		Bootstrap:  addr,
		Topic:      topic,
		Records:    cutoverRecords,
		Rate:       cutoverRate,
		Idempotent: s.idempotent,
		Headers:    s.client.Headers,
		KeyPrefix:  what,
		PauseAt:    cutoverPauseAt,
		Resume:     migrating,
	}

	select {
	case runSlots <- struct{}{}:
	case <-ctx.Done():
		t.Fatalf("waiting for a run slot: %v", ctx.Err())
	}
	defer func() { <-runSlots }()

	var (
		mu    sync.Mutex
		acks  []clients.Ack
		acked atomic.Int64
	)
	done := make(chan error, 1)
	go func() {
		done <- s.client.Produce(ctx, cfg, func(a clients.Ack) {
			mu.Lock()
			acks = append(acks, a)
			mu.Unlock()
			acked.Add(1)
		})
	}()

	// The cutover, mid-stream, as the control plane runs it
	// (docs/design.md §6) for one agent: MIGRATING; wait until the agent holds a
	// produce request and every request it received before MIGRATING is
	// answered (drained: nothing more can reach the source); COMPLETE. No
	// sleep decides anything, every wait has a deadline, and the producer
	// ending early fails the case.
	var produceErr error
	finished := false
	waitUntil := func(what string, limit time.Duration, cond func() bool) bool {
		deadline := time.NewTimer(limit)
		defer deadline.Stop()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for !cond() {
			select {
			case produceErr = <-done:
				finished = true
				t.Errorf("%s finished producing (%d of %d acks; err %v) before %s: the cutover did not happen mid-stream",
					name, acked.Load(), cutoverRecords, produceErr, what)
				return false
			case <-deadline.C:
				t.Errorf("no %s within %s (%d of %d acks)", what, limit, acked.Load(), cutoverRecords)
				return false
			case <-ctx.Done():
				t.Errorf("waiting for %s: %v", what, ctx.Err())
				return false
			case <-tick.C:
			}
		}
		return true
	}
	ackedAtMigrating := -1
	drained := false
	if waitUntil("a tenth of the acks", 2*time.Minute, func() bool { return acked.Load() >= cutoverRecords/10 }) {
		routes.Replace([]agent.Route{{Topic: topic, State: migration.Migrating, Mode: migration.Hold}})
		rec.mark(&rec.migratingAt)
		ackedAtMigrating = int(acked.Load())
		resume()
		// Drained by the forward deadline at the latest. A held request
		// comes once the resumed client sends again, which on a loaded
		// machine can take seconds; one held past the hold's 5 s is
		// answered retriable and resent, and held again: so the bound is
		// for liveness only, not the protocol's timing.
		drained = waitUntil("produce request held with the source drained", time.Minute, func() bool {
			return gauge(t, reg, "baton_agent_held_requests") > 0 && rec.outstandingBeforeMigrating() == 0
		})
	}
	// COMPLETE in every case (a failed wait above included), so that held
	// requests are released and the producer ends.
	resume()
	if !finished {
		routes.Replace([]agent.Route{{Topic: topic, State: migration.Complete}})
		rec.mark(&rec.completeAt)
		select {
		case produceErr = <-done:
		case <-ctx.Done():
			t.Fatalf("%s never finished producing: %v (%d of %d acks)", name, ctx.Err(), acked.Load(), cutoverRecords)
		}
	}
	if errors.Is(produceErr, clients.ErrUnavailable) {
		t.Fatalf("%s is not installed (make test runs test/clients/install.sh): %v", name, produceErr)
	}
	if produceErr != nil {
		t.Fatalf("%s through the agent: Produce: %v", name, produceErr)
	}
	mu.Lock()
	got := append([]clients.Ack(nil), acks...)
	mu.Unlock()

	mapped := int(gauge(t, reg, "baton_agent_producer_ids"))
	answers, errs, migratingAt, completeAt := rec.snapshot()
	t.Logf("%s: MIGRATING after %d acks, COMPLETE %s; %d produce partitions answered with an error by the agent %v; %d destination producer ids mapped",
		name, ackedAtMigrating, describeLater(migratingAt, completeAt), sum(errs), errs, mapped)
	// One source producer session across the cutover: a client that
	// re-initialised or bumped its epoch (Java does on a sequence error)
	// shows up as a second mapping.
	if want := map[bool]int{true: 1, false: 0}[s.idempotent]; mapped != want {
		t.Errorf("%s: the agent mapped %d source producer sessions to the destination, want %d (a new epoch or producer id after the cutover means the client met a sequence error)",
			name, mapped, want)
	}

	srcRecs, err := readKeys(ctx, s.src, topic)
	if err != nil {
		t.Fatalf("reading the source back: %v", err)
	}
	dstRecs, err := readKeys(ctx, s.dst, topic)
	if err != nil {
		t.Fatalf("reading the destination back: %v", err)
	}
	if err := checkCutover(got, cfg, srcRecs, dstRecs, answers, errs, migratingAt, completeAt, drained); err != nil {
		t.Errorf("%s across the cutover (%s): %v", name, s.target, err)
	}
}

// describeLater says when then came after first: "<d> later", or "never"
// when then is unset, or "without MIGRATING" when first is; a zero
// time.Time subtracted would print as ±2562047h.
func describeLater(first, then time.Time) string {
	switch {
	case then.IsZero():
		return "never"
	case first.IsZero():
		return "without MIGRATING"
	}
	return then.Sub(first).Round(time.Millisecond).String() + " later"
}

func sum(m map[int32]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// cutoverRecorder is a filter on a case's agent that notes when each
// produce request for the topic arrived and what the agent answered per
// partition: the agent's side of the cutover, exact where a driver's ack
// times are not (kcat reports deliveries in bursts, for one).
type cutoverRecorder struct {
	topic string

	mu          sync.Mutex
	migratingAt time.Time // set right after the route went MIGRATING
	completeAt  time.Time // set right after the route went COMPLETE
	received    map[[2]uint64]arrival
	preOpen     int // requests received before MIGRATING, not answered yet
	answers     []partAnswer
	errs        map[int32]int // partitions answered with an error, by partition
}

// partAnswer is the agent's answer for one partition of one produce
// request.
type partAnswer struct {
	partition          int32
	code               int16
	baseOffset         int64
	received, answered time.Time
	pre                bool // received before MIGRATING
	// batch is the idempotent session and base sequence of the
	// partition's first batch in the request; idempotent says it had one.
	batch      recordbatch.Producer
	idempotent bool
}

func newCutoverRecorder(topic string) *cutoverRecorder {
	return &cutoverRecorder{topic: topic, received: map[[2]uint64]arrival{}, errs: map[int32]int{}}
}

// arrival is when a request arrived, and whether before MIGRATING.
type arrival struct {
	at  time.Time
	pre bool
}

func (r *cutoverRecorder) Name() string { return "e2e-cutover-recorder" }
func (r *cutoverRecorder) New(info filter.ConnInfo) any {
	return cutoverFilter{r: r, conn: info.ID}
}

// mark sets *at to now: after the route change it records took effect, so
// that a request noted later surely met the new route.
func (r *cutoverRecorder) mark(at *time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*at = time.Now()
}

func (r *cutoverRecorder) outstandingBeforeMigrating() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.preOpen
}

// snapshot returns the answers so far, the errors answered per partition,
// and when the route went MIGRATING and COMPLETE.
func (r *cutoverRecorder) snapshot() (_ []partAnswer, _ map[int32]int, migratingAt, completeAt time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	errs := map[int32]int{}
	for p, n := range r.errs {
		errs[p] = n
	}
	return append([]partAnswer(nil), r.answers...), errs, r.migratingAt, r.completeAt
}

func (r *cutoverRecorder) has(pr *kmsg.ProduceRequest) bool {
	for _, t := range pr.Topics {
		if t.Topic == r.topic {
			return true
		}
	}
	return false
}

type cutoverFilter struct {
	r    *cutoverRecorder
	conn uint64
}

func (f cutoverFilter) OnRequest(_ context.Context, x *filter.Exchange) filter.Status {
	pr, ok := x.Req.(*kmsg.ProduceRequest)
	if !ok || pr.Acks == 0 || !f.r.has(pr) {
		return filter.Continue
	}
	r := f.r
	r.mu.Lock()
	defer r.mu.Unlock()
	pre := r.migratingAt.IsZero()
	r.received[[2]uint64{f.conn, uint64(uint32(x.Header.CorrelationID))}] = arrival{time.Now(), pre}
	if pre {
		r.preOpen++
	}
	return filter.Continue
}

func (f cutoverFilter) OnResponse(_ context.Context, x *filter.Exchange) filter.Status {
	pr, ok := x.Req.(*kmsg.ProduceRequest)
	if !ok || pr.Acks == 0 || !f.r.has(pr) {
		return filter.Continue
	}
	r := f.r
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	k := [2]uint64{f.conn, uint64(uint32(x.Header.CorrelationID))}
	arr, ok := r.received[k]
	if !ok {
		return filter.Continue
	}
	delete(r.received, k)
	if arr.pre {
		r.preOpen--
	}
	resp, _ := x.Resp.(*kmsg.ProduceResponse)
	if resp == nil {
		return filter.Continue // the connection is closing: the client sees no answer
	}
	batches := map[int32]recordbatch.Producer{}
	for _, t := range pr.Topics {
		if t.Topic != r.topic {
			continue
		}
		for _, p := range t.Partitions {
			if b, ok := recordbatch.ReadProducer(p.Records); ok && b.ID >= 0 {
				batches[p.Partition] = b
			}
		}
	}
	for _, t := range resp.Topics {
		if t.Topic != r.topic {
			continue
		}
		for _, p := range t.Partitions {
			b, idem := batches[p.Partition]
			r.answers = append(r.answers, partAnswer{partition: p.Partition, code: p.ErrorCode, baseOffset: p.BaseOffset,
				received: arr.at, pre: arr.pre, answered: now, batch: b, idempotent: idem})
			if p.ErrorCode != 0 {
				r.errs[p.Partition]++
			}
		}
	}
	return filter.Continue
}

// fillerPrefix keys the records fillDestination writes.
const fillerPrefix = "filler"

// fillPerPartition is how many records fillDestination writes to each
// partition: twice a run, so that the source's offsets (a run's records
// and what retries duplicate) stay below the destination's.
const fillPerPartition = 2 * cutoverRecords

// fillDestination writes fillPerPartition records to every partition of
// topic on the destination, directly, before the run: the destination's
// offsets then start above any the source can reach in the run, as after
// a real cutover, where the replicator brought D.T up to S.T's end. Without
// the replicator D.T would start at offset 0 and a client's offsets in a
// partition would go back at the cutover; with the fill an acked offset
// names its cluster unambiguously.
func fillDestination(ctx context.Context, dst, topic string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(dst, ",")...), kgo.ClientID("baton-e2e-cutover-fill"),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	var recs []*kgo.Record
	for p := range int32(cutoverPartitions) {
		for i := range fillPerPartition {
			k := clients.Key(fmt.Sprintf("%s-%d", fillerPrefix, p), i)
			recs = append(recs, &kgo.Record{Partition: p, Key: []byte(k), Value: []byte(k)})
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("filling %s: %w", topic, err)
	}
	return nil
}

// startCutoverAgent starts an agent from src to dst with routes and stops
// it with the test.
func startCutoverAgent(t *testing.T, ctx context.Context, name, src, dst string, routes *agent.RouteTable, reg *prometheus.Registry, rec *cutoverRecorder) string {
	t.Helper()
	a := runAgent(t, ctx, name, agent.Source(strings.Split(src, ",")...), agent.Destination(strings.Split(dst, ",")...),
		agent.Routes(routes), agent.Registry(reg), agent.Filters(rec))
	if err := pingAgent(ctx, a.Addr()); err != nil {
		t.Fatalf("agent %s never answered: %v", name, err)
	}
	return a.Addr()
}

// gauge is the sum of a metric's values in reg (0 when absent).
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		t.Errorf("gathering metrics: %v", err)
		return 0
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// startKafkaAsync starts an Apache Kafka cluster of brokers nodes with
// opts in the background and returns a function that waits for it
// (failing the calling test if it did not come up). The cluster stops with
// t.
func startKafkaAsync(t *testing.T, brokers int, opts ...kafka.Opt) func(t *testing.T) *kafka.Cluster {
	dir := t.TempDir()
	var (
		c   *kafka.Cluster
		err error
	)
	ready := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), kafka.DefaultStartTimeout)
	go func() {
		defer close(ready)
		defer cancel()
		c, err = kafka.Start(ctx, append(append([]kafka.Opt(nil), opts...), kafka.Brokers(brokers), kafka.Dir(dir))...)
	}()
	t.Cleanup(func() {
		<-ready
		if c == nil {
			return
		}
		if t.Failed() {
			t.Logf("kafka in %s, log tail:\n%s", c.Dir(), c.LogTail(40))
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stopping kafka in %s: %v", c.Dir(), err)
		}
	})
	return func(t *testing.T) *kafka.Cluster {
		t.Helper()
		select {
		case <-ready:
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
		if err != nil {
			t.Fatalf("starting a %d-broker Apache Kafka: %v", brokers, err)
		}
		return c
	}
}

// pos is where a record sits: cluster ("S" or "D"), partition, offset.
type pos struct {
	cluster string
	p       int32
	o       int64
}

func (p pos) String() string { return fmt.Sprintf("%s %d/%d", p.cluster, p.p, p.o) }

// readKeys returns the key of every record of topic, by position.
func readKeys(ctx context.Context, bootstrap, topic string) (map[clients.Position]string, error) {
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	recs, err := clients.ReadTopic(rctx, bootstrap, topic)
	if err != nil {
		return nil, err
	}
	out := make(map[clients.Position]string, len(recs))
	for pos, r := range recs {
		out[pos] = string(r.Key)
	}
	return out, nil
}

// checkCutover checks one run's acks against what the source and the
// destination hold, and the agent's answers (see TestCutoverEveryClient).
// drained says the source was drained before COMPLETE.
func checkCutover(acks []clients.Ack, cfg clients.ProduceConfig, src, dst map[clients.Position]string, answers []partAnswer, errs map[int32]int, migratingAt, completeAt time.Time, drained bool) error {
	var problems []string
	total := 0
	problem := func(format string, args ...any) {
		total++
		if len(problems) < 25 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}

	// Where each key of the run is, on both clusters.
	where := map[string][]pos{}
	for _, side := range []struct {
		name string
		recs map[clients.Position]string
	}{{"S", src}, {"D", dst}} {
		for a, k := range side.recs {
			if side.name == "D" && strings.HasPrefix(k, fillerPrefix+"-") {
				continue
			}
			where[k] = append(where[k], pos{side.name, a.Partition, a.Offset})
			if !strings.HasPrefix(k, cfg.KeyPrefix+"-") {
				problem("%s %d/%d holds key %q, not of this run", side.name, a.Partition, a.Offset, k)
			}
			if side.name == "S" && a.Offset >= fillPerPartition {
				problem("S %d/%d: the source ran past the destination's first offset %d: the agent's answers cannot be told apart by offset", a.Partition, a.Offset, fillPerPartition)
			}
		}
	}

	bySeq := map[int][]clients.Ack{}
	for _, a := range acks {
		bySeq[a.Seq] = append(bySeq[a.Seq], a)
	}
	onS, onD := 0, 0
	// Per partition: the highest seq found on the source and the lowest on
	// the destination, for the order check.
	maxS, minD := map[int32]int{}, map[int32]int{}
	for seq := 0; seq < cfg.Records; seq++ {
		as := bySeq[seq]
		if len(as) != 1 {
			problem("record %d acknowledged %d times", seq, len(as))
			if len(as) == 0 {
				continue
			}
		}
		a := as[0]
		key := clients.Key(cfg.KeyPrefix, seq)
		if a.Err != "" {
			problem("record %d failed: %s", seq, a.Err)
			continue
		}
		if a.Key != key {
			problem("record %d acked with key %q, want %q", seq, a.Key, key)
		}
		ap := clients.Position{Partition: a.Partition, Offset: a.Offset}
		switch {
		case src[ap] == key:
			onS++
			if m, ok := maxS[ap.Partition]; !ok || seq > m {
				maxS[ap.Partition] = seq
			}
		case dst[ap] == key:
			onD++
			if m, ok := minD[ap.Partition]; !ok || seq < m {
				minD[ap.Partition] = seq
			}
		default:
			problem("record %d acked at %d/%d, where S holds %q and D holds %q (key %s is at %s)",
				seq, ap.Partition, ap.Offset, src[ap], dst[ap], key, describePos(where[key]))
		}
	}
	// Stored once. Without idempotence a write the agent answered with the
	// retriable error (its outcome unknown: forward deadline, dead
	// connection) may be stored again by the client's retry (invariant 7);
	// a duplicate in a partition the agent never answered with an error
	// has no such excuse.
	for seq := 0; seq < cfg.Records; seq++ {
		key := clients.Key(cfg.KeyPrefix, seq)
		ps := where[key]
		if len(ps) <= 1 {
			continue
		}
		excused := !cfg.Idempotent
		for _, p := range ps {
			if errs[p.p] == 0 {
				excused = false
			}
		}
		if !excused {
			problem("record %d (%s) stored %d times: at %s", seq, key, len(ps), describePos(ps))
		}
	}
	if cfg.Idempotent {
		for p, m := range maxS {
			if d, ok := minD[p]; ok && d < m {
				problem("partition %d: record %d is on the destination but the later record %d on the source (order across the cutover)", p, d, m)
			}
		}
	}

	// The agent's side. A successful answer's base offset names its
	// cluster: the destination's offsets start at fillPerPartition. A
	// retry of an idempotent batch answered retriable before MIGRATING may
	// be answered from the source, where that earlier send wrote it: that
	// answer wrote nothing.
	type sentBatch struct {
		partition int32
		batch     recordbatch.Producer
	}
	uncertain := map[sentBatch]bool{}
	for _, a := range answers {
		if a.pre && a.code != 0 && a.idempotent {
			uncertain[sentBatch{a.partition, a.batch}] = true
		}
	}
	for _, a := range answers {
		if a.code != 0 {
			continue
		}
		onSource := a.baseOffset < fillPerPartition
		switch {
		case onSource && !a.pre && a.idempotent && uncertain[sentBatch{a.partition, a.batch}]:
			// The retry of a batch sent before MIGRATING: answered with
			// where the source holds it. The ack checks above verified
			// that its records are there, once.
		case onSource && !a.pre:
			problem("a produce request received %s after MIGRATING was written to the source at %d/%d (one writer)",
				a.received.Sub(migratingAt).Round(time.Microsecond), a.partition, a.baseOffset)
		case onSource && drained && !completeAt.IsZero() && a.answered.After(completeAt):
			problem("a produce request answered %s after COMPLETE (the source drained before) was acked from the source at %d/%d",
				a.answered.Sub(completeAt).Round(time.Microsecond), a.partition, a.baseOffset)
		}
	}
	if total == 0 && (onS == 0 || onD == 0) {
		problem("%d records on the source and %d on the destination: the cutover was not mid-stream", onS, onD)
	}
	if total == 0 {
		return nil
	}
	return fmt.Errorf("%d records (%d acks; %d found on S, %d on D): %d problems, first:\n  %s",
		cfg.Records, len(acks), onS, onD, total, strings.Join(problems, "\n  "))
}

func describePos(ps []pos) string {
	if len(ps) == 0 {
		return "nowhere"
	}
	sort.Slice(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if a.cluster != b.cluster {
			return a.cluster > b.cluster // S first
		}
		return a.p < b.p || a.p == b.p && a.o < b.o
	})
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}
