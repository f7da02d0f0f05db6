package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/test/clients"
	"github.com/baton-kafka/baton/test/kafka"
)

// TestLeaderMoves moves partition leaders of the source while idempotent
// producers write through the agent: kfake by MoveTopicPartition, real
// Kafka by reassigning the replica order and electing the preferred leader.
// Every record must be acked once, stored once, where it was acked; and
// leaders must have moved while each producer ran.
func TestLeaderMoves(t *testing.T) {
	for _, l := range envs {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			e := l.get(t)
			ctx, cancel := context.WithTimeout(t.Context(), caseTimeout)
			defer cancel()
			const partitions = 3
			topic := freshTopic(t, ctx, e, "leader-moves", partitions)

			var mover func(ctx context.Context, round int) (int, error)
			if e.kfake != nil {
				mover = kfakeMover(t, e, topic, partitions)
			} else {
				mover = kafkaMover(t, e, topic, partitions)
			}
			moves := &moveLog{}
			moveCtx, stopMoves := context.WithCancel(ctx)
			moverDone := make(chan error, 1)
			moverStopped := make(chan struct{})
			go func() { moverDone <- moves.run(moveCtx, mover); close(moverStopped) }()

			// franz-go, Java and librdkafka (kcat's 2.0.2 and the Python
			// client's own) retry a leader move for as long as it takes.
			// sarama (3 retries) and kafkajs (5) with their defaults give
			// up on this much leader movement directly against Kafka too,
			// without the agent: they are left out.
			var producers []clients.Client
			for _, c := range clients.Matrix() {
				switch c.Name() {
				case "franz", "java", "kcat", "python":
					producers = append(producers, c)
				}
			}
			cfgs := make([]clients.ProduceConfig, len(producers))
			acks := make([][]clients.Ack, len(producers))
			var wg sync.WaitGroup
			starts := make([]time.Time, len(producers))
			for i, p := range producers {
				cfgs[i] = clients.ProduceConfig{
					Bootstrap:  e.agent,
					Topic:      topic,
					Records:    3000,
					Rate:       500, // about 6 s of production per client
					Idempotent: true,
					Headers:    p.Headers,
					KeyPrefix:  "moves-" + p.Name(),
				}
				// The second half waits for a leader move after the run
				// began: a client quicker than the moves (real Kafka's wait
				// for a full ISR on a loaded machine) would otherwise end
				// before any, and the check below would fail.
				resume := make(chan struct{})
				cfgs[i].PauseAt, cfgs[i].Resume = cfgs[i].Records/2, resume
				wg.Add(1)
				go func() {
					defer wg.Done()
					acks[i] = produceNoFatal(t, ctx, p, cfgs[i], &starts[i], func(start time.Time) {
						resumeAfterMove(ctx, moves, start, moverStopped, resume)
					})
				}()
			}
			wg.Wait()
			stopMoves()
			if err := <-moverDone; err != nil {
				t.Fatalf("moving leaders of %s: %v", topic, err)
			}
			if t.Failed() {
				return
			}
			t.Logf("%d leader moves on the %s source", moves.count(), e.name)
			// Right after an election Kafka answers ListOffsets with
			// OFFSET_NOT_AVAILABLE until the new leader's high watermark
			// catches up: let the topic settle before reading it back.
			if err := settled(t, ctx, e, topic); err != nil {
				t.Fatalf("%s on the %s source after the moves: %v", topic, e.name, err)
			}
			for i, p := range producers {
				if err := clients.Verify(ctx, e.source, topic, acks[i], cfgs[i]); err != nil {
					t.Errorf("%s through the agent while leaders moved: %v; the agent answered the topic's produce requests (all clients): %s",
						p.Name(), err, ingress.answers(topic))
					continue
				}
				// While it ran: from the Produce call, which starts feeding
				// records at the run's rate, to the last ack. (franz-go
				// stalls for MetadataMinAge after a move and may then ack
				// everything at once: the span of its acks alone can be
				// empty of moves although moves held it up.)
				first, last := starts[i], lastAck(acks[i])
				if n := moves.between(first, last); n == 0 {
					t.Errorf("%s: no leader moved between the start of its run (%s) and its last ack (%s): the test proved nothing (%d moves in all)",
						p.Name(), first.Format(time.StampMicro), last.Format(time.StampMicro), moves.count())
				} else {
					t.Logf("%s: %d leader moves while it produced, from %s to %s", p.Name(), n, first.Format(time.StampMilli), last.Format(time.StampMilli))
				}
			}
		})
	}
}

// produceNoFatal is produce for a goroutine other than the test's: it
// reports failures with t.Errorf and returns nil acks.
func produceNoFatal(t *testing.T, ctx context.Context, p clients.Producer, cfg clients.ProduceConfig, start *time.Time, started func(time.Time)) []clients.Ack {
	select {
	case runSlots <- struct{}{}:
	case <-ctx.Done():
		t.Errorf("%s: waiting for a run slot: %v", p.Name(), ctx.Err())
		return nil
	}
	defer func() { <-runSlots }()
	var acks []clients.Ack
	*start = time.Now()
	go started(*start)
	err := p.Produce(ctx, cfg, func(a clients.Ack) { acks = append(acks, a) })
	if errors.Is(err, clients.ErrUnavailable) {
		t.Errorf("%s is not installed (make test runs test/clients/install.sh): %v", p.Name(), err)
		return nil
	}
	if err != nil {
		t.Errorf("%s through the agent: Produce: %v", p.Name(), err)
		return nil
	}
	return acks
}

func lastAck(acks []clients.Ack) time.Time {
	var last time.Time
	for _, a := range acks {
		if a.At.After(last) {
			last = a.At
		}
	}
	return last
}

// resumeAfterMove closes resume once a leader move was seen done after
// from, or the mover stopped, or ctx ended.
func resumeAfterMove(ctx context.Context, moves *moveLog, from time.Time, moverStopped <-chan struct{}, resume chan<- struct{}) {
	defer close(resume)
	tick := time.NewTicker(wait.Poll)
	defer tick.Stop()
	for moves.between(from, time.Now()) == 0 {
		select {
		case <-ctx.Done():
			return
		case <-moverStopped:
			return
		case <-tick.C:
		}
	}
}

// moveLog runs a mover in rounds and remembers when each move was seen
// done.
type moveLog struct {
	mu sync.Mutex
	at []time.Time
}

// run calls mover round after round until ctx ends. A round that fails
// is retried; run fails only when rounds keep failing without any move.
func (m *moveLog) run(ctx context.Context, mover func(ctx context.Context, round int) (int, error)) error {
	var lastErr error
	failures := 0
	tick := time.NewTicker(200 * time.Millisecond) // pacing, so clients produce between moves
	defer tick.Stop()
	for round := 0; ; round++ {
		n, err := mover(ctx, round)
		if ctx.Err() != nil {
			return nil
		}
		if n > 0 {
			m.mu.Lock()
			now := time.Now()
			for range n {
				m.at = append(m.at, now)
			}
			m.mu.Unlock()
		}
		if err != nil {
			lastErr = err
			failures++
			if failures >= 20 && m.count() == 0 {
				return fmt.Errorf("%d rounds failed and no leader moved; last: %w", failures, lastErr)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (m *moveLog) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.at)
}

// between counts moves seen done strictly inside (from, to).
func (m *moveLog) between(from, to time.Time) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, at := range m.at {
		if at.After(from) && at.Before(to) {
			n++
		}
	}
	return n
}

// kfakeMover moves the leader of one partition per round to the next
// broker.
func kfakeMover(t *testing.T, e *env, topic string, partitions int32) func(context.Context, int) (int, error) {
	kc := e.kfake.Kfake()
	var nodes []int32
	brokers, err := kadm.NewClient(sourceClient(t, e)).ListBrokers(t.Context())
	if err != nil {
		t.Fatalf("listing kfake brokers: %v", err)
	}
	for _, b := range brokers {
		nodes = append(nodes, b.NodeID)
	}
	slices.Sort(nodes)
	return func(_ context.Context, round int) (int, error) {
		p := int32(round) % partitions
		cur := kc.LeaderFor(topic, p)
		i := slices.Index(nodes, cur)
		next := nodes[(i+1)%len(nodes)]
		if err := kc.MoveTopicPartition(topic, p, next); err != nil {
			return 0, fmt.Errorf("moving %s/%d to %d: %w", topic, p, next, err)
		}
		if got := kc.LeaderFor(topic, p); got != next {
			return 0, fmt.Errorf("moved %s/%d to %d but its leader is %d", topic, p, next, got)
		}
		return 1, nil
	}
}

// kafkaMover moves the leader of one partition per round on real Kafka,
// taking turns (see kafka.MoveLeader).
func kafkaMover(t *testing.T, e *env, topic string, partitions int32) func(context.Context, int) (int, error) {
	// kgo serves the metadata of sharded requests (kadm's) from a cache
	// up to MetadataMinAge old: keep it fresh, to see the new leaders.
	adm := kadm.NewClient(sourceClient(t, e, kgo.MetadataMinAge(10*time.Millisecond)))
	return func(ctx context.Context, round int) (int, error) {
		return kafka.MoveLeader(ctx, adm, topic, int32(round)%partitions)
	}
}

// settled waits until the source lists topic's start and end offsets
// without error.
func settled(t *testing.T, ctx context.Context, e *env, topic string) error {
	adm := kadm.NewClient(sourceClient(t, e))
	return waitFor(ctx, 30*time.Second, func() error {
		starts, err := adm.ListStartOffsets(ctx, topic)
		if err == nil {
			err = starts.Error()
		}
		if err != nil {
			return err
		}
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		return err
	})
}

// waitFor polls cond until it returns nil, ctx ends or limit passes
// (kafka.PollUntil).
func waitFor(ctx context.Context, limit time.Duration, cond func() error) error {
	return kafka.PollUntil(ctx, limit, cond)
}
