// Package demo owns `baton demo`: the whole of Baton in one process on two
// embedded Kafka clusters. One producer per topic writes through an agent
// while the control plane moves the topics from the source to the
// destination: PROXY (forwarded to the source, replicated to the
// destination), then the cutover (MIGRATING: the agent holds produce while
// replication drains), then COMPLETE (writes go to the destination). One
// topic's first cutover is made to miss its timeout and roll back to PROXY,
// then it is migrated again. The events are narrated as they happen, under
// a per-topic view (view.go).
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/baton-kafka/baton/agent"
	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
	"github.com/baton-kafka/baton/xds"
)

// Errors of Run.
var (
	// ErrBadConfig: a Config field is out of range; the message names it.
	ErrBadConfig = errors.New("demo: bad config")
	// ErrCutover: a cutover did not end as the demo runs it (the rolled
	// back topic completed at once, another one rolled back, or nothing
	// settled in time).
	ErrCutover = errors.New("demo: cutover")
	// ErrVerify: an acked record is not in exactly one cluster position,
	// or a producer saw an error.
	ErrVerify = errors.New("demo: verify")
)

// Topic is one topic of the demo, written by a producer of its own.
type Topic struct {
	Name       string
	Partitions int32
}

// Config says what the demo runs. Start from DefaultConfig.
type Config struct {
	// Topics are created on the source and migrated together, each
	// written through the agent by a producer of its own.
	Topics []Topic
	// RollBack names the topic of Topics whose first cutover rolls back:
	// its replication is paused before it, so the destination cannot
	// reach the source's end offsets and the cutover times out. The
	// rollback restarts replication and the demo migrates it again. ""
	// rolls none back.
	RollBack string
	// Rate is records per second, per producer.
	Rate int
	// Phase is how long each of PROXY and COMPLETE lasts.
	Phase time.Duration
	// CutoverTimeout is the control plane's cutover timeout (its
	// CutoverTimeout option): how long RollBack's first cutover holds its
	// producer before it rolls back. The time-lag gate wants a lag of at
	// most a quarter of it before a cutover starts.
	CutoverTimeout time.Duration
	// Out receives the narration. A terminal (an *os.File that is one)
	// gets the per-topic view redrawn in place under it; anything else
	// gets plain lines, the view as one summary line per topic every
	// second and as each step starts.
	Out io.Writer
}

// DefaultConfig is what `baton demo` runs: three topics (orders with 6
// partitions, payments with 3, audit with 1) at 200 records/s each, 4 s
// in PROXY and 4 s in COMPLETE, a 3 s cutover timeout, payments' first
// cutover rolled back.
func DefaultConfig(out io.Writer) Config {
	return Config{
		Topics:   []Topic{{Name: "orders", Partitions: 6}, {Name: "payments", Partitions: 3}, {Name: "audit", Partitions: 1}},
		RollBack: "payments", Rate: 200, Phase: 4 * time.Second, CutoverTimeout: 3 * time.Second, Out: out,
	}
}

// ParseTopic reads a topic as NAME:PARTITIONS (orders:6).
func ParseTopic(s string) (Topic, error) {
	name, parts, ok := strings.Cut(s, ":")
	n, err := strconv.ParseInt(parts, 10, 32)
	if !ok || name == "" || err != nil || n < 1 {
		return Topic{}, fmt.Errorf("%w: topic %q: want NAME:PARTITIONS, PARTITIONS >= 1 (orders:6)", ErrBadConfig, s)
	}
	return Topic{Name: name, Partitions: int32(n)}, nil
}

func (cfg Config) validate() error {
	if len(cfg.Topics) == 0 {
		return fmt.Errorf("%w: Topics: none", ErrBadConfig)
	}
	seen := map[string]bool{}
	for i, t := range cfg.Topics {
		switch {
		case t.Name == "":
			return fmt.Errorf("%w: Topics[%d].Name: empty", ErrBadConfig, i)
		case seen[t.Name]:
			return fmt.Errorf("%w: Topics[%d].Name: %q twice", ErrBadConfig, i, t.Name)
		case t.Partitions < 1:
			return fmt.Errorf("%w: Topics[%d].Partitions: %d, want >= 1", ErrBadConfig, i, t.Partitions)
		}
		seen[t.Name] = true
	}
	switch {
	case cfg.RollBack != "" && !seen[cfg.RollBack]:
		return fmt.Errorf("%w: RollBack: %q is not one of Topics", ErrBadConfig, cfg.RollBack)
	case cfg.Rate < 1:
		return fmt.Errorf("%w: Rate: %d, want >= 1", ErrBadConfig, cfg.Rate)
	case cfg.Phase <= 0:
		return fmt.Errorf("%w: Phase: %v, want > 0", ErrBadConfig, cfg.Phase)
	case cfg.CutoverTimeout <= 0:
		return fmt.Errorf("%w: CutoverTimeout: %v, want > 0", ErrBadConfig, cfg.CutoverTimeout)
	case cfg.Out == nil:
		return fmt.Errorf("%w: Out: nil", ErrBadConfig)
	}
	return nil
}

// settleTimeout bounds each wait for the control plane: a cutover to end,
// a time lag to pass the gate.
const settleTimeout = time.Minute

// Run runs the demo until it finishes or ctx ends. It returns an error if
// any acked record is not in exactly one cluster position at the end, or
// the cutovers did not end as described on Config.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	scr := newScreen(cfg.Out, isTerminal(cfg.Out))
	say := scr.say
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Two clusters.
	src, err := embedded.Start()
	if err != nil {
		return fmt.Errorf("starting source cluster: %w", err)
	}
	defer src.Close()
	dst, err := embedded.Start()
	if err != nil {
		return fmt.Errorf("starting destination cluster: %w", err)
	}
	defer dst.Close()
	say("source cluster:      %s (embedded, 3 brokers)", src.Bootstrap())
	say("destination cluster: %s (embedded, 3 brokers)", dst.Bootstrap())
	srcCl, err := kgo.NewClient(kgo.SeedBrokers(src.Addrs()...))
	if err != nil {
		return err
	}
	defer srcCl.Close()
	dstCl, err := kgo.NewClient(kgo.SeedBrokers(dst.Addrs()...))
	if err != nil {
		return err
	}
	defer dstCl.Close()
	srcAdm, dstAdm := kadm.NewClient(srcCl), kadm.NewClient(dstCl)
	for _, t := range cfg.Topics {
		if err := createTopic(ctx, srcAdm, src.Bootstrap(), t); err != nil {
			return err
		}
		say("topic %q created on the source with %d partitions", t.Name, t.Partitions)
	}

	// The replicator and the control plane, with embedded etcd.
	repl, err := replicator.New(replicator.Source(src.Addrs()...), replicator.Destination(dst.Addrs()...),
		replicator.Logger(quiet), replicator.SampleInterval(100*time.Millisecond))
	if err != nil {
		return err
	}
	go func() { _ = repl.Run(ctx) }()
	dir, err := os.MkdirTemp("", "baton-demo-etcd-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, err := controlplane.OpenEmbedded(ctx, dir)
	if err != nil {
		return err
	}
	defer store.Close()
	cp, err := controlplane.New(ctx, controlplane.WithStore(store), controlplane.Logger(quiet),
		controlplane.CutoverTimeout(cfg.CutoverTimeout),
		controlplane.WithReplication(&replication.ReplicatorAdapter{R: repl, Source: srcAdm}),
		controlplane.Clusters(&batonv1.Cluster{Name: "source", Bootstrap: src.Addrs()},
			&batonv1.Cluster{Name: "destination", Bootstrap: dst.Addrs()}))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	gs := grpc.NewServer()
	cp.Register(gs)
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()
	cpDone := make(chan struct{})
	go func() { defer close(cpDone); _ = cp.Run(ctx) }()
	say("control plane:       %s (xDS + leases, state in embedded etcd, cutover timeout %v)", ln.Addr(), cfg.CutoverTimeout)

	// The agent, a sidecar in front of the producers.
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ag, err := agent.New(agent.Listen("127.0.0.1:0"), agent.Source(src.Addrs()...), agent.Destination(dst.Addrs()...),
		agent.ControlPlane(conn, xds.NodeMeta("demo-agent", "shop", "shop-api")), agent.Logger(quiet))
	if err != nil {
		return err
	}
	agentDone := make(chan error, 1)
	go func() { agentDone <- ag.Run(ctx) }()
	select {
	case <-ag.Ready():
	case err := <-agentDone:
		return fmt.Errorf("agent: %w", err)
	}
	say("agent:               %s (the producers bootstrap from it, not from a cluster)", ag.Addr())

	events, err := cp.Follow(ctx, "", 0)
	if err != nil {
		return err
	}
	for _, t := range cfg.Topics {
		if _, err := cp.AddTopic(ctx, controlplane.TopicSpec{Name: t.Name, State: migration.Proxy}, "demo"); err != nil {
			return err
		}
	}

	prods := make([]*producer, len(cfg.Topics))
	prodDone := make(chan error, len(cfg.Topics))
	for i, t := range cfg.Topics {
		prods[i] = &producer{topic: t.Name}
		go func() { prodDone <- prods[i].run(ctx, ag.Addr(), cfg.Rate) }()
	}
	sh := &show{ctx: ctx, cfg: cfg, cp: cp, scr: scr, events: events, prods: prods,
		completed: map[string]int{}, rolledBack: map[string]int{}, timedOut: map[string]string{},
		lastAcked: make([]int64, len(prods)), lastFrame: time.Now()}

	say("\n1. PROXY: the agent forwards produce to the source; the replicator copies to the destination")
	if err := sh.run(cfg.Phase, nil); err != nil {
		return err
	}

	say("\n2. cutover: `baton topic migrate` of every topic")
	sh.draw()
	var others []string
	for _, t := range cfg.Topics {
		if t.Name != cfg.RollBack {
			others = append(others, t.Name)
		}
	}
	if rb := cfg.RollBack; rb != "" {
		// Paused before it resumed copying, the replication would not
		// know where it stands, and the gate would refuse the cutover.
		if err := sh.run(settleTimeout, func() bool { return sh.lagPasses(rb) }); err != nil {
			return fmt.Errorf("%w: waiting for %s's replication to copy: %w", ErrCutover, rb, err)
		}
		if err := repl.Pause(rb); err != nil {
			return err
		}
		say("  %s: its replication paused (as a stuck replicator would be): the destination cannot reach", rb)
		say("  the source's end offsets, so its cutover will miss the %v timeout and roll back", cfg.CutoverTimeout)
		behind := copyBehind(ctx, repl, srcAdm, rb)
		if err := sh.run(settleTimeout, behind); err != nil {
			return fmt.Errorf("%w: waiting for %s to have records its paused replication did not copy: %w", ErrCutover, rb, err)
		}
		if err := sh.migrate(rb); err != nil {
			return err
		}
	}
	for _, name := range others {
		if err := sh.migrate(name); err != nil {
			return err
		}
	}
	firstDone := func() bool {
		for _, name := range others {
			if sh.completed[name] == 0 {
				return false
			}
		}
		return cfg.RollBack == "" || sh.rolledBack[cfg.RollBack]+sh.completed[cfg.RollBack] > 0
	}
	if err := sh.run(settleTimeout, firstDone); err != nil {
		return fmt.Errorf("%w: the cutovers did not settle: %w", ErrCutover, err)
	}
	for _, name := range others {
		if sh.rolledBack[name] > 0 {
			return fmt.Errorf("%w: %s rolled back (see the events above)", ErrCutover, name)
		}
	}

	step := 3
	if rb := cfg.RollBack; rb != "" {
		step++
		if sh.completed[rb] > 0 {
			return fmt.Errorf("%w: %s completed although its replication was paused: the rollback the demo shows did not happen", ErrCutover, rb)
		}
		if sh.timedOut[rb] == "" {
			return fmt.Errorf("%w: %s rolled back, but not at its timeout (see the events above)", ErrCutover, rb)
		}
		say("\n3. %s rolled back to PROXY: its first cutover missed the %v timeout (%s).", rb, cfg.CutoverTimeout, sh.timedOut[rb])
		say("  Its producer's writes were held while it was MIGRATING (its longest stall), then the agent")
		say("  forwarded them to the source again, and the rollback restarted its replication.")
		say("  It is migrated again once its time lag is back within the gate (%v).", cfg.CutoverTimeout/4)
		sh.draw()
		if err := sh.run(settleTimeout, func() bool { return sh.lagPasses(rb) }); err != nil {
			return fmt.Errorf("%w: %s's time lag did not pass the gate again: %w", ErrCutover, rb, err)
		}
		if err := sh.migrate(rb); err != nil {
			return err
		}
		if err := sh.run(settleTimeout, func() bool { return sh.completed[rb] > 0 || sh.rolledBack[rb] > 1 }); err != nil {
			return fmt.Errorf("%w: %s's second cutover did not settle: %w", ErrCutover, rb, err)
		}
		if sh.completed[rb] == 0 {
			return fmt.Errorf("%w: %s's second cutover rolled back too (see the events above)", ErrCutover, rb)
		}
	}

	say("\n%d. COMPLETE: writes go to the destination", step)
	sh.draw()
	if err := sh.run(cfg.Phase, nil); err != nil {
		return err
	}

	for _, p := range prods {
		p.stop.Store(true)
	}
	for range prods {
		if err := <-prodDone; err != nil {
			return err
		}
	}
	sh.draw()
	scr.leave()
	if err := sh.verify(srcAdm, dstAdm, src.Addrs(), dst.Addrs()); err != nil {
		return err
	}
	say("The producers (idempotent) never restarted and saw no error: after each cutover the agent")
	say("wrote their batches under a producer id of the destination's, sequences from 0.")
	cancel()
	<-cpDone
	return <-agentDone
}

// show narrates the control plane's events and redraws the view while the
// demo waits for something, and keeps what the events said.
type show struct {
	ctx    context.Context
	cfg    Config
	cp     *controlplane.ControlPlane
	scr    *screen
	events <-chan controlplane.Event
	prods  []*producer

	// completed and rolledBack count each topic's completed and
	// rolled_back events; timedOut is its last timed_out event's reason.
	completed, rolledBack map[string]int
	timedOut              map[string]string

	lastAcked []int64
	lastFrame time.Time
}

// pollInterval is how often run checks its condition.
const pollInterval = 20 * time.Millisecond

// run narrates events and draws frames (live: 4 a second; plain: one a
// second) until done holds (checked after every event and every
// pollInterval) or, with done nil, until d passed. A done that still does
// not hold after d is an error.
func (s *show) run(d time.Duration, done func() bool) error {
	every := time.Second
	if s.scr.live {
		every = 250 * time.Millisecond
	}
	end := time.NewTimer(d)
	defer end.Stop()
	frames := time.NewTicker(every)
	defer frames.Stop()
	poll := time.NewTicker(pollInterval)
	defer poll.Stop()
	for {
		if done != nil && done() {
			return nil
		}
		select {
		case <-s.ctx.Done():
			return s.ctx.Err()
		case <-end.C:
			if done != nil {
				return fmt.Errorf("not within %v", d)
			}
			return nil
		case <-frames.C:
			s.draw()
		case <-poll.C:
		case e, ok := <-s.events:
			if !ok {
				return errors.New("the control plane's event stream ended")
			}
			s.event(e)
		}
	}
}

// event narrates e and keeps what run's conditions ask about.
func (s *show) event(e controlplane.Event) {
	switch e.Kind {
	case controlplane.EventCompleted:
		s.completed[e.Topic]++
	case controlplane.EventRolledBack:
		s.rolledBack[e.Topic]++
	case controlplane.EventTimedOut:
		s.timedOut[e.Topic] = e.Reason
	case controlplane.EventGateRefused:
		// migrate narrates the refusal it waits out.
		return
	}
	line := "  event: " + e.Topic + " " + e.Kind
	switch {
	case e.From != "" && e.To != "":
		line += " " + e.From + " -> " + e.To
	case e.To != "":
		line += " -> " + e.To
	}
	if e.Attempt > 0 {
		line += " attempt=" + strconv.Itoa(e.Attempt)
	}
	if e.Agent != "" {
		line += " agent=" + e.Agent
	}
	if e.Reason != "" {
		line += " (" + e.Reason + ")"
	}
	s.scr.say("%s", line)
}

// draw shows a frame of every topic's row.
func (s *show) draw() {
	now := time.Now()
	elapsed := now.Sub(s.lastFrame).Seconds()
	rows := make([]row, len(s.prods))
	for i, p := range s.prods {
		acked := p.acked.Load()
		r := row{Topic: p.topic, State: "?", Lag: -1, Stall: p.stall(now), Acked: acked}
		if elapsed > 0 {
			r.Rate = float64(acked-s.lastAcked[i]) / elapsed
		}
		s.lastAcked[i] = acked
		if st, err := s.cp.Status(p.topic); err == nil {
			r.State = st.State.String()
			if st.State != migration.Complete && st.LagError == "" {
				r.Lag = st.Lag
			}
		}
		rows[i] = r
	}
	s.lastFrame = now
	s.scr.frame(rows)
}

// lagPasses reports whether topic's time lag is known and within the
// time-lag gate (a quarter of the cutover timeout).
func (s *show) lagPasses(topic string) bool {
	st, err := s.cp.Status(topic)
	return err == nil && st.LagError == "" && st.Lag <= s.cfg.CutoverTimeout/4
}

// maxRefusals bounds how often migrate asks again after a refusal.
const maxRefusals = 20

// migrate starts topic's cutover; a gate that refuses it is narrated and
// waited out (the time lag back within the gate), then asked again.
func (s *show) migrate(topic string) error {
	s.scr.say("  `baton topic migrate %s`", topic)
	for range maxRefusals {
		_, err := s.cp.Migrate(s.ctx, topic, "demo")
		if !errors.Is(err, controlplane.ErrGateRefused) {
			if err != nil {
				return fmt.Errorf("migrate %s: %w", topic, err)
			}
			return nil
		}
		s.scr.say("  %s: refused, waiting: %v", topic, err)
		if err := s.run(settleTimeout, func() bool { return s.lagPasses(topic) }); err != nil {
			return fmt.Errorf("%w: %s's gates did not open: %w", ErrCutover, topic, err)
		}
	}
	return fmt.Errorf("%w: %s: refused %d times", ErrCutover, topic, maxRefusals)
}

// copyBehind is a condition that holds once topic's paused replication
// has stopped short of records the producer wrote: a partition whose copy
// progress did not move since the previous check while the source holds
// records past it. Its cutover then cannot reach the source's end offsets.
func copyBehind(ctx context.Context, repl *replicator.Replicator, srcAdm *kadm.Client, topic string) func() bool {
	var prev map[int32]int64
	return func() bool {
		var next map[int32]int64
		for _, st := range repl.Status() {
			if st.Topic == topic {
				next = map[int32]int64{}
				for _, p := range st.Partitions {
					next[p.Partition] = p.Next
				}
			}
		}
		ends, err := srcAdm.ListEndOffsets(ctx, topic)
		if err != nil || next == nil {
			return false
		}
		behind := false
		ends.Each(func(o kadm.ListedOffset) {
			n, ok := next[o.Partition]
			if was, seen := prev[o.Partition]; ok && seen && n >= 0 && n == was && o.Offset > n {
				behind = true
			}
		})
		prev = next
		return behind
	}
}

// verify checks every topic's acked records are in exactly one cluster
// position and prints the final table; it returns every failure.
func (s *show) verify(srcAdm, dstAdm *kadm.Client, srcAddrs, dstAddrs []string) error {
	var errs []error
	sums := make([]summary, len(s.cfg.Topics))
	type split struct{ before, after int64 }
	splits := make([]split, len(s.cfg.Topics))
	for i, t := range s.cfg.Topics {
		p := s.prods[i]
		m := summary{Topic: t.Name, Partitions: t.Partitions, Acked: p.acked.Load(), Stall: p.longestStall()}
		if tp, err := s.cp.Topic(t.Name); err == nil {
			m.Attempts = tp.Attempts
		}
		if evs, err := s.cp.Events(s.ctx, t.Name, 0); err == nil {
			for _, e := range evs {
				if e.Kind == controlplane.EventRolledBack {
					m.RolledBack++
				}
			}
		}
		srcEnd, err := endOffsets(s.ctx, srcAdm, t.Name)
		if err != nil {
			return err
		}
		dstEnd, err := endOffsets(s.ctx, dstAdm, t.Name)
		if err != nil {
			return err
		}
		m.Lost = max(0, m.Acked-dstEnd)
		sums[i], splits[i] = m, split{srcEnd, dstEnd - srcEnd}
		if n := p.failed.Load(); n > 0 {
			errs = append(errs, fmt.Errorf("%w: %s: %d records failed; the first with: %v", ErrVerify, t.Name, n, p.firstErr.Load()))
		}
		if dstEnd != m.Acked {
			errs = append(errs, fmt.Errorf("%w: %s: %d records acked but the destination holds %d", ErrVerify, t.Name, m.Acked, dstEnd))
		}
		// Parity: the destination holds the source's records at the same
		// offsets, then only what was written after the cutover.
		rep, err := replicator.Verify(s.ctx, srcAddrs, dstAddrs, t.Name, replicator.DefaultOffsetMapTopic)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: parity: %w", ErrVerify, t.Name, err))
			continue
		}
		if i := slices.IndexFunc(rep.Mismatches, func(m replicator.Mismatch) bool { return m.SourceOffset != -1 }); i >= 0 {
			errs = append(errs, fmt.Errorf("%w: %s: parity: %s", ErrVerify, t.Name, rep.Mismatches[i]))
		} else if int64(rep.Count) != dstEnd-srcEnd {
			errs = append(errs, fmt.Errorf("%w: %s: parity: %d differences, want only the %d records written after the cutover",
				ErrVerify, t.Name, rep.Count, dstEnd-srcEnd))
		}
	}
	s.scr.say("")
	s.scr.table(sums)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	s.scr.say("")
	for i, t := range s.cfg.Topics {
		s.scr.say("%s: every acked record is in the destination, the %d written before the cutover at the same",
			t.Name, splits[i].before)
		s.scr.say("  offsets as on the source (verify parity), then the %d written after it.", splits[i].after)
	}
	return nil
}

// producer is one topic's producer through the agent, and what it saw.
type producer struct {
	topic         string
	acked, failed atomic.Int64
	stop          atomic.Bool
	firstErr      atomic.Value

	mu      sync.Mutex
	lastAck time.Time
	longest time.Duration // between two acks
}

func (p *producer) acknowledged(at time.Time) {
	p.mu.Lock()
	if !p.lastAck.IsZero() {
		p.longest = max(p.longest, at.Sub(p.lastAck))
	}
	p.lastAck = at
	p.mu.Unlock()
	p.acked.Add(1)
}

// longestStall is the longest gap between two acks.
func (p *producer) longestStall() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.longest
}

// stall is the longest gap between two acks as of now: while the producer
// writes, the gap since its last ack counts, so a hold shows as it grows.
func (p *producer) stall(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lastAck.IsZero() || p.stop.Load() {
		return p.longest
	}
	return max(p.longest, now.Sub(p.lastAck))
}

func (p *producer) fail(err string) {
	if p.failed.Add(1) == 1 {
		p.firstErr.Store(err)
	}
}

// run writes through the agent until p.stop, with franz-go's default
// idempotent producer: the agent maps its source producer id to one of the
// destination's at the cutover (docs/agent.md).
func (p *producer) run(ctx context.Context, bootstrap string, rate int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.DefaultProduceTopic(p.topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// franz-go takes a sequence error quietly (it bumps its epoch
		// and carries on); count it as the failure it would be for
		// librdkafka.
		kgo.ProducerOnDataLossDetected(func(topic string, partition int32) {
			p.fail(fmt.Sprintf("data loss detected on %s/%d (a sequence error)", topic, partition))
		}))
	if err != nil {
		return err
	}
	defer cl.Close()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var n int64
	for !p.stop.Load() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		n++
		key := "customer-" + strconv.FormatInt(n%50, 10)
		cl.Produce(ctx, &kgo.Record{Key: []byte(key), Value: []byte(p.topic + " " + strconv.FormatInt(n, 10))},
			func(_ *kgo.Record, err error) {
				if err != nil {
					p.fail(err.Error())
				} else {
					p.acknowledged(time.Now())
				}
			})
	}
	return cl.Flush(ctx)
}

func createTopic(ctx context.Context, adm *kadm.Client, bootstrap string, t Topic) error {
	resp, err := adm.CreateTopic(ctx, t.Partitions, 1, nil, t.Name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("creating topic %q on %s: %w", t.Name, bootstrap, err)
	}
	return nil
}

func endOffsets(ctx context.Context, adm *kadm.Client, topic string) (int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	if err := ends.Error(); err != nil {
		return 0, err
	}
	var sum int64
	ends.Each(func(o kadm.ListedOffset) { sum += o.Offset })
	return sum, nil
}
