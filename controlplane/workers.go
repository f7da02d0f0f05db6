package controlplane

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
)

// WorkerPool is replication by replicator workers (`baton replicator
// --control-plane`, docs/design.md §7): it leases each partition of the
// replicated topics to one worker at a time, over the Replication service,
// and drives the cutover's Stop through them.
//
// A partition is a worker's from the Work call that gives it until lease +
// flight after the worker's last renewal; the worker stops writing flight
// before its lease ends, so two workers never write one partition. A dead
// worker's partitions go to the others once that time has passed. Free
// partitions go, in the replicator's Schedule order (MIGRATING first,
// shortest job first across topics, longest lag first within one), to the
// worker asking that holds fewer than its share; one holding more than its
// share gives the rest back.
//
// A pool that starts (a new leader) grants nothing new for the previous
// leader's takeover margin + lease + flight, since that leader's leases may
// still run; it keeps the partitions workers report holding (under a lease
// that runs) meanwhile, so their copy does not stop.
type WorkerPool struct {
	batonv1.UnimplementedReplicationServer

	source *kadm.Client
	lease  time.Duration
	flight time.Duration
	log    *slog.Logger
	now    func() time.Time

	mu       sync.Mutex
	quiet    time.Time // no new grants before it
	topics   map[string]*poolTopic
	workers  map[string]*poolWorker
	lastStop uint64
	wake     chan struct{} // closed and replaced when topics are added
	// diverged holds, by topic and partition, the first divergence a
	// worker reported. Like the replicator's, it outlives Stop and Start:
	// the destination's copy no longer mirrors the source's.
	diverged map[string]map[int32]string
}

type poolTopic struct {
	name       string
	partitions int32 // -1: not read from the source yet
	err        error // reading the source's partitions
	migrating  bool
	parts      map[int32]*poolPart
	stop       *poolStop
}

type poolPart struct {
	holder string
	// until: the holder's lease end plus flight (the pool's clock); with
	// no holder, the last one's, before which no other worker gets it.
	until    time.Time
	state    *batonv1.CopyState // the holder's last report
	reported bool
}

type poolWorker struct {
	id          string
	incarnation uint64
	until       time.Time // lease end plus flight of its last renewal
	// latency is its last report of the destination's ack latency, by
	// topic (reports with no samples left out).
	latency map[string]replicator.Latency
}

type poolStop struct {
	id         uint64
	partitions int32 // the topic's when the stop began
	stopped    map[int32]*batonv1.CopyState
	recent     []replicator.SourceBatch
	err        error
	done       chan struct{}
}

// NewWorkerPool returns a pool leasing partitions for lease (renewed every
// lease/3; default migration.DefaultLease) with flight (default
// migration.DefaultForwardDeadline) between a lease's end and another
// worker's grant. source reads the source's partitions and end offsets.
// takeover is how long a leader before this one may still have granted
// leases after this one started (TakeoverMargin; 0 for one process): the
// pool's quiet period is takeover + lease + flight.
func NewWorkerPool(source *kadm.Client, lease, flight, takeover time.Duration, log *slog.Logger) (*WorkerPool, error) {
	if lease == 0 {
		lease = migration.DefaultLease
	}
	if flight == 0 {
		flight = migration.DefaultForwardDeadline
	}
	switch {
	case source == nil:
		return nil, fmt.Errorf("%w: worker pool: a source client is required", ErrBadConfig)
	case lease < 300*time.Millisecond:
		return nil, fmt.Errorf("%w: worker pool: lease %v is under 300ms", ErrBadConfig, lease)
	case flight < 0 || flight >= lease:
		return nil, fmt.Errorf("%w: worker pool: flight %v must be positive and under the lease %v", ErrBadConfig, flight, lease)
	case takeover < 0:
		return nil, fmt.Errorf("%w: worker pool: takeover margin %v is negative", ErrBadConfig, takeover)
	}
	if log == nil {
		log = slog.Default()
	}
	p := &WorkerPool{source: source, lease: lease, flight: flight, log: log.With("component", "workers"), now: time.Now,
		topics: map[string]*poolTopic{}, workers: map[string]*poolWorker{}, wake: make(chan struct{})}
	p.quiet = p.now().Add(takeover + lease + flight)
	return p, nil
}

var (
	_ Replication               = (*WorkerPool)(nil)
	_ LatencySource             = (*WorkerPool)(nil)
	_ batonv1.ReplicationServer = (*WorkerPool)(nil)
)

// Run reads the partitions of the replicated topics from the source (and
// again every 10 s, for partitions added) until ctx ends.
func (p *WorkerPool) Run(ctx context.Context) {
	last := time.Time{}
	for {
		p.mu.Lock()
		var names []string
		for name, t := range p.topics {
			if t.partitions < 0 || time.Since(last) >= 10*time.Second {
				names = append(names, name)
			}
		}
		wake := p.wake
		p.mu.Unlock()
		if len(names) > 0 {
			if time.Since(last) >= 10*time.Second {
				last = time.Now()
			}
			p.readPartitions(ctx, names)
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-time.After(time.Second):
		}
	}
}

func (p *WorkerPool) readPartitions(ctx context.Context, names []string) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	td, err := p.source.ListTopics(rctx, names...)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, name := range names {
		t := p.topics[name]
		if t == nil {
			continue
		}
		d, ok := td[name]
		switch {
		case err != nil:
			t.err = err
		case !ok || d.Err != nil:
			t.err = fmt.Errorf("%w: %s", replicator.ErrSourceTopicMissing, name)
			if ok {
				t.err = fmt.Errorf("%w: %s: %v", replicator.ErrSourceTopicMissing, name, d.Err)
			}
		default:
			t.err = nil
			n := int32(len(d.Partitions))
			if n > t.partitions {
				for i := max(t.partitions, 0); i < n; i++ {
					if t.parts[i] == nil { // or adopted from a report already
						t.parts[i] = &poolPart{}
					}
				}
				t.partitions = n
			}
		}
	}
}

// Start implements Replication.
func (p *WorkerPool) Start(topic string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.topics[topic]; ok {
		return nil
	}
	p.topics[topic] = &poolTopic{name: topic, partitions: -1, parts: map[int32]*poolPart{}}
	close(p.wake)
	p.wake = make(chan struct{})
	return nil
}

// SetMigrating implements Replication.
func (p *WorkerPool) SetMigrating(topic string, migrating bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.topics[topic]
	if !ok {
		return fmt.Errorf("%w: %s", replicator.ErrUnknownTopic, topic)
	}
	t.migrating = migrating
	return nil
}

// topicLocked returns topic's copy, or why it is not ready. p.mu is held.
func (p *WorkerPool) topicLocked(topic string) (*poolTopic, error) {
	t, ok := p.topics[topic]
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: %s", replicator.ErrUnknownTopic, topic)
	case t.err != nil:
		return t, fmt.Errorf("%w: %s: %v", ErrNotReady, topic, t.err)
	case t.partitions < 0:
		return t, fmt.Errorf("%w: %s: its partitions were not read from the source yet", ErrNotReady, topic)
	}
	return t, nil
}

// Lag implements Replication: unknown until a worker reported every
// partition resumed.
func (p *WorkerPool) Lag(topic string) (time.Duration, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, err := p.topicLocked(topic)
	if err != nil {
		return 0, err
	}
	var lag time.Duration
	for i := range t.partitions {
		pp := t.parts[i]
		switch {
		case pp.holder == "" || !pp.reported:
			return 0, fmt.Errorf("%w: %s/%d has no replicator worker yet (are workers running against this control plane?)", ErrNotReady, topic, i)
		case pp.state.GetNext() < 0:
			why := ""
			if e := pp.state.GetError(); e != "" {
				why = ": " + e
			}
			return 0, fmt.Errorf("%w: %s/%d has not resumed copying yet on worker %s%s", ErrNotReady, topic, i, pp.holder, why)
		}
		lag = max(lag, pp.state.GetLag().AsDuration())
	}
	return lag, nil
}

// Progress implements Replication.
func (p *WorkerPool) Progress(topic string) (map[int32]int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, err := p.topicLocked(topic)
	if err != nil {
		return nil, err
	}
	out := make(map[int32]int64, t.partitions)
	for i := range t.partitions {
		out[i] = -1
		if pp := t.parts[i]; pp.reported {
			out[i] = pp.state.GetNext()
		}
	}
	return out, nil
}

// Diverged implements Replication.
func (p *WorkerPool) Diverged(topic string) map[int32]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.diverged[topic]) == 0 {
		return nil
	}
	return maps.Clone(p.diverged[topic])
}

// noteLocked keeps what a worker reported of a partition it held. p.mu is
// held.
func (p *WorkerPool) noteLocked(pp *poolPart, cs *batonv1.CopyState) {
	pp.state, pp.reported = cs, true
	if d := cs.GetDiverged(); d != "" {
		if p.diverged == nil {
			p.diverged = map[string]map[int32]string{}
		}
		if p.diverged[cs.GetTopic()] == nil {
			p.diverged[cs.GetTopic()] = map[int32]string{}
		}
		if _, ok := p.diverged[cs.GetTopic()][cs.GetPartition()]; !ok {
			p.diverged[cs.GetTopic()][cs.GetPartition()] = d
		}
	}
}

// SourceEndOffsets implements Replication.
func (p *WorkerPool) SourceEndOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	return sourceEndOffsets(ctx, p.source, topic)
}

// DestinationLatency implements LatencySource from the workers' reports:
// several workers copying one topic each measure their own partitions, so
// the p50 is their p50s weighted by samples and the p99 the largest p99 (an
// upper bound, which emulation errs towards).
func (p *WorkerPool) DestinationLatency(topic string) (replicator.Latency, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out replicator.Latency
	var weighted float64
	for _, w := range p.workers {
		l, ok := w.latency[topic]
		if !ok {
			continue
		}
		weighted += float64(l.P50) * float64(l.Samples)
		out.Samples += l.Samples
		out.P99 = max(out.P99, l.P99)
		if l.At.After(out.At) {
			out.At = l.At
		}
	}
	if out.Samples == 0 {
		return replicator.Latency{}, false
	}
	out.P50 = time.Duration(weighted / float64(out.Samples))
	return out, true
}

// Stop implements Replication: it asks every worker holding a partition of
// topic to stop it and waits until each partition's worker answered where
// it stopped. It fails (and the copy goes on) if a partition has no
// worker, or its worker's lease ends first.
func (p *WorkerPool) Stop(ctx context.Context, topic string) (map[int32]int64, []replicator.SourceBatch, error) {
	p.mu.Lock()
	t, err := p.topicLocked(topic)
	if err != nil {
		p.mu.Unlock()
		return nil, nil, err
	}
	if t.stop != nil {
		p.mu.Unlock()
		return nil, nil, fmt.Errorf("controlplane: %s is being stopped already", topic)
	}
	now := p.now()
	for i := range t.partitions {
		if pp := t.parts[i]; pp.holder == "" || !now.Before(pp.until) {
			p.mu.Unlock()
			return nil, nil, fmt.Errorf("%w: %s/%d has no replicator worker: where its copy stands is not known", ErrNotReady, topic, i)
		}
	}
	p.lastStop++
	st := &poolStop{id: p.lastStop, partitions: t.partitions, stopped: map[int32]*batonv1.CopyState{}, done: make(chan struct{})}
	t.stop = st
	p.mu.Unlock()

	// Leases lapse without renewals: a stop waits at most for them.
	wait := time.NewTimer(p.lease + p.flight)
	defer wait.Stop()
	for {
		select {
		case <-st.done:
		case <-ctx.Done():
			p.abortStop(t, st, ctx.Err())
		case <-wait.C:
			p.expire()
			wait.Reset(p.lease / 3)
			continue
		}
		break
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if st.err != nil {
		if t.stop == st {
			t.stop = nil
		}
		return nil, nil, st.err
	}
	out := make(map[int32]int64, len(st.stopped))
	for i, cs := range st.stopped {
		out[i] = cs.GetNext()
	}
	delete(p.topics, topic)
	sort.Slice(st.recent, func(i, j int) bool {
		a, b := st.recent[i], st.recent[j]
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.Offset < b.Offset
	})
	return out, st.recent, nil
}

// abortStop ends st with err unless it ended already.
func (p *WorkerPool) abortStop(t *poolTopic, st *poolStop, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endStopLocked(t, st, err)
}

// endStopLocked ends st (with err, nil when every partition answered).
// p.mu is held.
func (p *WorkerPool) endStopLocked(t *poolTopic, st *poolStop, err error) {
	select {
	case <-st.done:
		return
	default:
	}
	if err != nil {
		// The copy goes on: workers that stopped get their partitions
		// back (without the stop request they start the topic again).
		st.err = err
		if t.stop == st {
			t.stop = nil
		}
	}
	close(st.done)
}

// expire frees the partitions of workers whose lease ran out.
func (p *WorkerPool) expire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expireLocked(p.now())
}

func (p *WorkerPool) expireLocked(now time.Time) {
	for id, w := range p.workers {
		if !now.Before(w.until) {
			delete(p.workers, id)
			p.log.Warn("replicator worker lost: its lease ran out; its partitions go to the other workers", "worker", id)
		}
	}
	for _, t := range p.topics {
		for i, pp := range t.parts {
			if pp.holder == "" || now.Before(pp.until) {
				continue
			}
			if t.stop != nil {
				if _, ok := t.stop.stopped[i]; !ok {
					p.endStopLocked(t, t.stop, fmt.Errorf("controlplane: stopping %s: the lease of worker %s on partition %d ran out before it said where the copy stopped; the copy goes on",
						t.name, pp.holder, i))
				}
			}
			pp.holder = ""
		}
	}
}

// Work implements batonv1.ReplicationServer.
func (p *WorkerPool) Work(_ context.Context, req *batonv1.WorkRequest) (*batonv1.WorkResponse, error) {
	id := req.GetNodeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "node_id is required")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	p.expireLocked(now)
	w := p.workers[id]
	if w != nil && w.incarnation != req.GetIncarnation() {
		return nil, status.Errorf(codes.FailedPrecondition,
			"worker id %q is in use by another process whose lease runs until %s: give each worker its own --worker-id",
			id, w.until.Format(time.RFC3339Nano))
	}
	if w == nil {
		w = &poolWorker{id: id, incarnation: req.GetIncarnation()}
		p.workers[id] = w
		p.log.Info("replicator worker joined", "worker", id)
	}
	w.until = now.Add(p.lease + p.flight)
	w.latency = make(map[string]replicator.Latency, len(req.GetLatency()))
	for _, l := range req.GetLatency() {
		if l.GetSamples() > 0 {
			w.latency[l.GetTopic()] = replicator.Latency{P50: l.GetP50().AsDuration(), P99: l.GetP99().AsDuration(),
				Samples: int(l.GetSamples()), At: now}
		}
	}

	p.reportedLocked(id, req.GetPartitions(), now)
	for _, s := range req.GetStopped() {
		p.stoppedLocked(id, s)
	}
	p.assignLocked(w, now)

	resp := &batonv1.WorkResponse{Lease: durationpb.New(p.lease), Flight: durationpb.New(p.flight), ServerTime: timestamppb.New(now)}
	for _, t := range p.sortedTopics() {
		asked := false
		for _, i := range slices.Sorted(maps.Keys(t.parts)) {
			pp := t.parts[i]
			if pp.holder != id {
				continue
			}
			pp.until = w.until
			resp.Leases = append(resp.Leases, &batonv1.PartitionLease{Topic: t.name, Partition: i, Migrating: t.migrating})
			if t.stop != nil && !asked {
				asked = true
				resp.Stop = append(resp.Stop, &batonv1.StopTopic{Topic: t.name, StopId: t.stop.id})
			}
		}
	}
	return resp, nil
}

// reportedLocked takes what worker id reports of the partitions it holds.
// In the quiet period after a leader change it keeps for the worker what it
// claims (a previous leader granted it), and only while it claims it: a
// claim delivered late (its sender gave up on the answer) must not hold a
// partition the old leader gave another worker since; dropped, it waits
// for the quiet's end. p.mu is held.
func (p *WorkerPool) reportedLocked(id string, reports []*batonv1.CopyState, now time.Time) {
	quiet := now.Before(p.quiet)
	claimed := map[*poolPart]bool{}
	for _, cs := range reports {
		t := p.topics[cs.GetTopic()]
		if t == nil || cs.GetPartition() < 0 {
			continue
		}
		pp := t.parts[cs.GetPartition()]
		switch {
		case pp == nil && quiet && t.partitions < 0:
			// Before this leader read the topic's partitions.
			pp = &poolPart{holder: id}
			t.parts[cs.GetPartition()] = pp
		case pp == nil:
			continue
		case pp.holder == id:
		case pp.holder == "" && quiet:
			pp.holder = id
		default:
			continue
		}
		claimed[pp] = true
		p.noteLocked(pp, cs)
	}
	if !quiet {
		return
	}
	for _, t := range p.topics {
		for _, pp := range t.parts {
			if pp.holder == id && !claimed[pp] && t.stop == nil {
				pp.holder, pp.until = "", maxTime(pp.until, p.quiet)
			}
		}
	}
}

// stoppedLocked takes a worker's answer to a stop. p.mu is held.
func (p *WorkerPool) stoppedLocked(id string, s *batonv1.StoppedTopic) {
	t := p.topics[s.GetTopic()]
	if t == nil || t.stop == nil || t.stop.id != s.GetStopId() {
		return // an older stop's answer, sent again
	}
	st := t.stop
	if s.GetError() != "" {
		p.endStopLocked(t, st, fmt.Errorf("controlplane: stopping %s on worker %s: %s", t.name, id, s.GetError()))
		return
	}
	got := map[int32]*batonv1.CopyState{}
	for _, cs := range s.GetPartitions() {
		got[cs.GetPartition()] = cs
	}
	var missing []string
	now := map[int32]bool{} // recorded by this answer
	for i, pp := range t.parts {
		if pp.holder != id {
			continue
		}
		cs, ok := got[i]
		if !ok || cs.GetNext() < 0 {
			// Not answered, or not set up again since it came back to
			// the worker: where its copy stands is not known.
			missing = append(missing, fmt.Sprint(i))
			continue
		}
		p.noteLocked(pp, cs)
		st.stopped[i] = cs
		now[i] = true
		pp.holder = "" // stopped: nothing more to lease
	}
	for _, b := range s.GetRecent() {
		if now[b.GetPartition()] { // an answer sent again adds nothing
			st.recent = append(st.recent, replicator.SourceBatch{Partition: b.GetPartition(), ProducerID: b.GetProducerId(),
				Epoch: int16(b.GetProducerEpoch()), BaseSeq: b.GetBaseSequence(), Records: b.GetRecords(), Offset: b.GetOffset()})
		}
	}
	if len(missing) > 0 {
		p.endStopLocked(t, st, fmt.Errorf("controlplane: stopping %s: worker %s did not say where partitions %s stopped (its lease lapsed, or it had not set them up again since they came back to it); the copy goes on",
			t.name, id, strings.Join(missing, ", ")))
		return
	}
	if int32(len(st.stopped)) >= st.partitions {
		p.endStopLocked(t, st, nil)
	}
}

// sortedTopics returns the topics by name. p.mu is held.
func (p *WorkerPool) sortedTopics() []*poolTopic {
	out := make([]*poolTopic, 0, len(p.topics))
	for _, t := range p.topics {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// assignLocked gives w its share of the partitions: free ones in Schedule
// order up to the share, and back what it holds over the share. p.mu is
// held.
func (p *WorkerPool) assignLocked(w *poolWorker, now time.Time) {
	total := 0
	var held, free []replicator.Candidate
	for _, t := range p.topics {
		if t.partitions < 0 {
			continue
		}
		for i := range t.partitions {
			pp := t.parts[i]
			total++
			c := replicator.Candidate{Topic: t.name, Partition: i, Migrating: t.migrating, Lag: pp.state.GetLag().AsDuration()}
			if !pp.reported {
				c.Lag = time.Duration(1 << 62) // not known: as far behind as can be
			}
			switch {
			case pp.holder == w.id:
				held = append(held, c)
			case pp.holder == "" && t.stop == nil && !now.Before(pp.until):
				free = append(free, c)
			}
		}
	}
	if total == 0 || now.Before(p.quiet) {
		return
	}
	share := (total + len(p.workers) - 1) / len(p.workers)
	if len(held) > share {
		// The end of its own order goes back; the others take it once
		// this worker's lease on it has run out.
		var back []string
		for _, c := range replicator.Schedule(held)[share:] {
			if t := p.topics[c.Topic]; t.stop == nil {
				t.parts[c.Partition].holder = "" // until stays: nobody else before it
				back = append(back, fmt.Sprintf("%s/%d", c.Topic, c.Partition))
			}
		}
		if len(back) > 0 {
			p.log.Info("partitions given back, for the other workers once this one's lease on them ends",
				"worker", w.id, "partitions", strings.Join(back, ","), "workers", len(p.workers))
		}
		return
	}
	var got []string
	for _, c := range replicator.Schedule(free) {
		if len(held) >= share {
			break
		}
		pp := p.topics[c.Topic].parts[c.Partition]
		pp.holder, pp.reported, pp.state = w.id, false, nil
		held = append(held, c)
		got = append(got, fmt.Sprintf("%s/%d", c.Topic, c.Partition))
	}
	if len(got) > 0 {
		p.log.Info("partitions leased", "worker", w.id, "partitions", strings.Join(got, ","), "workers", len(p.workers))
	}
}

// sourceEndOffsets reads topic's end offsets on the source.
func sourceEndOffsets(ctx context.Context, source *kadm.Client, topic string) (map[int32]int64, error) {
	l, err := source.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	if err := l.Error(); err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	l.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	if len(out) == 0 {
		return nil, fmt.Errorf("controlplane: no partitions of %s on the source", topic)
	}
	return out, nil
}

// WorkerView is one replicator worker as `GET /v1/workers` shows it.
type WorkerView struct {
	ID string `json:"id"`
	// Partitions are the partitions it holds, "topic/partition".
	Partitions []string `json:"partitions"`
	// LeaseUntil is when its lease (plus flight) ends unless renewed.
	LeaseUntil time.Time `json:"lease_until"`
	// Lag is the largest time lag it reported.
	Lag time.Duration `json:"lag_ns"`
	// Errors are its partitions' copy errors, "topic/partition: error".
	Errors []string `json:"errors,omitempty"`
}

// Workers lists the live workers by id, with what each holds.
func (p *WorkerPool) Workers() []WorkerView {
	p.mu.Lock()
	defer p.mu.Unlock()
	byID := map[string]*WorkerView{}
	out := make([]WorkerView, 0, len(p.workers))
	for id, w := range p.workers {
		byID[id] = &WorkerView{ID: id, LeaseUntil: w.until, Partitions: []string{}}
	}
	for _, t := range p.sortedTopics() {
		for i := range max(t.partitions, 0) {
			pp := t.parts[i]
			v := byID[pp.holder]
			if v == nil {
				continue
			}
			name := fmt.Sprintf("%s/%d", t.name, i)
			v.Partitions = append(v.Partitions, name)
			v.Lag = max(v.Lag, pp.state.GetLag().AsDuration())
			if e := pp.state.GetError(); e != "" {
				v.Errors = append(v.Errors, name+": "+e)
			}
		}
	}
	for _, v := range byID {
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Workers is how the control plane replicates: "in-process", or
// "workers" with the workers (`GET /v1/workers`).
type Workers struct {
	Replication string       `json:"replication"`
	Workers     []WorkerView `json:"workers"`
}

// Workers returns how the control plane replicates and its workers.
func (cp *ControlPlane) Workers() Workers {
	if p, ok := cp.cfg.repl.(*WorkerPool); ok {
		return Workers{Replication: "workers", Workers: p.Workers()}
	}
	return Workers{Replication: "in-process", Workers: []WorkerView{}}
}
