// Package worker runs a replicator as one worker among several: it holds
// partition leases from the control plane's Replication service, renews
// them every lease/3, tells the replicator which partitions it may write,
// and stops topics when the control plane asks, at a cutover (docs/design.md
// §7).
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/replicator"
)

// Errors.
var (
	// ErrBadConfig names the field at fault.
	ErrBadConfig = errors.New("worker: bad config")
)

// Copier is what a worker drives: a replicator.Replicator created with
// replicator.Leases(the worker).
type Copier interface {
	Start(topic string)
	Forget(topic string) error
	SetMigrating(topic string, migrating bool) error
	Stop(ctx context.Context, topic string) (replicator.Stopped, error)
	Status() []replicator.TopicStatus
	DestinationLatency(topic string) (replicator.Latency, bool)
}

var (
	_ Copier                     = (*replicator.Replicator)(nil)
	_ replicator.PartitionLeases = (*Worker)(nil)
)

// Worker holds partition leases for a Copier. Create it with New, hand it
// to the replicator with replicator.Leases, then set Copier and Run it.
type Worker struct {
	id          string
	incarnation uint64
	client      batonv1.ReplicationClient
	log         *slog.Logger

	// Copier MUST be set before Run.
	Copier Copier

	mu        sync.Mutex
	until     time.Time // the leases' end, this process's clock
	flight    time.Duration
	held      map[partition]bool
	started   map[string]bool // topics started (and not forgotten) on the copier
	migrating map[string]bool
	stops     map[string]*stop // by topic
}

type partition struct {
	topic string
	p     int32
}

type stop struct {
	id     uint64
	done   bool
	answer *batonv1.StoppedTopic
}

// New returns a worker named id (unique among running workers) that asks
// client for its leases.
func New(id string, client batonv1.ReplicationClient, log *slog.Logger) (*Worker, error) {
	switch {
	case id == "":
		return nil, fmt.Errorf("%w: a worker id is required", ErrBadConfig)
	case client == nil:
		return nil, fmt.Errorf("%w: a control plane client is required", ErrBadConfig)
	}
	if log == nil {
		log = slog.Default()
	}
	return &Worker{id: id, incarnation: rand.Uint64(), client: client, log: log.With("component", "worker", "worker", id),
		held: map[partition]bool{}, started: map[string]bool{}, migrating: map[string]bool{}, stops: map[string]*stop{}}, nil
}

// MayWrite implements replicator.PartitionLeases: the partition is held
// and its lease runs for at least the flight more.
func (w *Worker) MayWrite(topic string, p int32) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.held[partition{topic, p}] || time.Until(w.until) < w.flight {
		return time.Time{}, false
	}
	return w.until, true
}

// Run renews the worker's leases every lease/3 (every 100 ms to 1 s while
// the control plane is out of reach) until ctx ends.
func (w *Worker) Run(ctx context.Context) error {
	if w.Copier == nil {
		return fmt.Errorf("%w: Copier is not set", ErrBadConfig)
	}
	backoff := 100 * time.Millisecond
	warned := false
	for {
		next, err := w.renew(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !warned {
				w.mu.Lock()
				left := time.Until(w.until)
				w.mu.Unlock()
				w.log.Warn("renewing partition leases failed; copying stops when they run out: check that the control plane is up and this worker can reach it",
					"err", err, "leases_left", max(left, 0).Round(time.Millisecond))
				warned = true
			}
			next, backoff = backoff, min(2*backoff, time.Second)
		} else {
			if warned {
				w.log.Info("partition leases renewed again")
			}
			warned, backoff = false, 100*time.Millisecond
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(next):
		}
	}
}

// renew sends one Work request and applies its answer; it returns when to
// renew next.
func (w *Worker) renew(ctx context.Context) (time.Duration, error) {
	sent := time.Now()
	req := w.report(sent)
	w.mu.Lock()
	timeout := max(time.Until(w.until), time.Second)
	w.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := w.client.Work(rctx, req)
	if err != nil {
		return 0, err
	}
	lease := resp.GetLease().AsDuration()
	if lease <= 0 {
		return 0, fmt.Errorf("the control plane answered without a lease duration")
	}
	w.apply(ctx, sent, resp)
	return lease / 3, nil
}

// report is the worker's state for a Work request sent at sent.
func (w *Worker) report(sent time.Time) *batonv1.WorkRequest {
	req := &batonv1.WorkRequest{NodeId: w.id, Incarnation: w.incarnation, SentAt: timestamppb.New(sent)}
	w.mu.Lock()
	for _, s := range w.stops {
		if s.done {
			req.Stopped = append(req.Stopped, s.answer)
		}
	}
	w.mu.Unlock()
	status := map[partition]replicator.PartitionStatus{}
	for _, t := range w.Copier.Status() {
		for _, p := range t.Partitions {
			status[partition{t.Topic, p.Partition}] = p
		}
		if l, ok := w.Copier.DestinationLatency(t.Topic); ok {
			req.Latency = append(req.Latency, &batonv1.TopicLatency{Topic: t.Topic, P50: durationpb.New(l.P50),
				P99: durationpb.New(l.P99), Samples: int64(l.Samples)})
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !sent.Before(w.until) {
		// Lapsed leases are no claim: a new leader would keep them for
		// this worker while another's may still run.
		return req
	}
	for k := range w.held {
		cs := &batonv1.CopyState{Topic: k.topic, Partition: k.p, Next: -1, DestinationEnd: -1}
		if st, ok := status[k]; ok {
			cs = copyState(k.topic, st)
		}
		req.Partitions = append(req.Partitions, cs)
	}
	return req
}

func copyState(topic string, p replicator.PartitionStatus) *batonv1.CopyState {
	cs := &batonv1.CopyState{Topic: topic, Partition: p.Partition, Next: p.Next, DestinationEnd: p.DestinationEnd,
		Lag: durationpb.New(p.Lag)}
	if p.Err != nil {
		cs.Error = p.Err.Error()
	}
	if p.Diverged != nil {
		cs.Diverged = p.Diverged.Error()
	}
	return cs
}

// apply takes the control plane's answer to a request sent at sent.
func (w *Worker) apply(ctx context.Context, sent time.Time, resp *batonv1.WorkResponse) {
	held := map[partition]bool{}
	topics := map[string]bool{}
	migrating := map[string]bool{}
	for _, l := range resp.GetLeases() {
		held[partition{l.GetTopic(), l.GetPartition()}] = true
		topics[l.GetTopic()] = true
		migrating[l.GetTopic()] = migrating[l.GetTopic()] || l.GetMigrating()
	}
	asked := map[string]uint64{}
	for _, s := range resp.GetStop() {
		asked[s.GetTopic()] = s.GetStopId()
	}

	// The copier calls MayWrite under its own lock: it is called here
	// only after w.mu is let go.
	var start, forget []string
	setMigrating := map[string]bool{}
	var newStops []string
	w.mu.Lock()
	w.until = sent.Add(resp.GetLease().AsDuration())
	w.flight = resp.GetFlight().AsDuration()
	w.held = held
	// Stops answered and no longer asked for are over (the topic may be
	// copied again below).
	for topic, s := range w.stops {
		if _, ok := asked[topic]; !ok && s.done {
			delete(w.stops, topic)
		}
	}
	for topic, id := range asked {
		if s, ok := w.stops[topic]; ok && (s.id == id || !s.done) {
			continue // answered, or an older stop still running: asked again once it is done
		}
		if s, ok := w.stops[topic]; ok {
			// An earlier stop's answer (the control plane gave up on it)
			// still holds: the topic was not copied since.
			s.id = id
			s.answer.StopId = id
			continue
		}
		w.stops[topic] = &stop{id: id}
		delete(w.started, topic)
		newStops = append(newStops, topic)
	}
	for topic := range topics {
		if _, stopping := w.stops[topic]; stopping {
			continue
		}
		if !w.started[topic] {
			start = append(start, topic)
			w.started[topic] = true
		}
		if migrating[topic] != w.migrating[topic] {
			setMigrating[topic] = migrating[topic]
			w.migrating[topic] = migrating[topic]
		}
	}
	for topic := range w.started {
		if !topics[topic] {
			forget = append(forget, topic)
			delete(w.started, topic)
		}
	}
	stops := make(map[string]*stop, len(newStops))
	for _, topic := range newStops {
		stops[topic] = w.stops[topic]
	}
	w.mu.Unlock()

	for topic, s := range stops {
		go w.stop(ctx, topic, s)
	}
	for _, topic := range start {
		w.Copier.Start(topic)
		w.log.Info("copying", "topic", topic)
	}
	for topic, m := range setMigrating {
		_ = w.Copier.SetMigrating(topic, m) // started above, or earlier
	}
	// Its partitions are other workers' now: their holders copy them, sync
	// their groups and stop them at the cutover. One coming back starts
	// the topic afresh.
	for _, topic := range forget {
		_ = w.Copier.Forget(topic)
	}
}

// stop stops topic on the copier and keeps the answer for the next
// requests.
func (w *Worker) stop(ctx context.Context, topic string, s *stop) {
	w.log.Info("stopping at the control plane's request", "topic", topic)
	st, err := w.Copier.Stop(ctx, topic)
	answer := &batonv1.StoppedTopic{Topic: topic, StopId: s.id}
	switch {
	case errors.Is(err, replicator.ErrUnknownTopic):
		// Never started here: nothing copied, nothing to answer for.
	case err != nil:
		answer.Error = err.Error()
	default:
		for _, p := range st.Partitions {
			answer.Partitions = append(answer.Partitions, copyState(topic, p))
		}
		for _, b := range st.Recent {
			answer.Recent = append(answer.Recent, &batonv1.SourceBatch{Partition: b.Partition, ProducerId: b.ProducerID,
				ProducerEpoch: int32(b.Epoch), BaseSequence: b.BaseSeq, Records: b.Records, Offset: b.Offset})
		}
	}
	w.mu.Lock()
	s.done, s.answer = true, answer
	delete(w.migrating, topic)
	w.mu.Unlock()
}
