package replication

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
)

// WorkerPool is replication by replicator workers (`baton replicator
// --control-plane`, docs/design.md §10): it leases each partition of the
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
	// onProgress is OnProgress's callback.
	onProgress atomic.Pointer[func(string)]
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

var _ batonv1.ReplicationServer = (*WorkerPool)(nil)

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

// Start implements controlplane.Replication.
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

// SetMigrating implements controlplane.Replication.
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

// Lag implements controlplane.Replication: unknown until a worker
// reported every partition resumed.
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

// Progress implements controlplane.Replication.
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

// Diverged implements controlplane.Replication.
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
	advanced := !pp.reported || pp.state.GetNext() != cs.GetNext()
	pp.state, pp.reported = cs, true
	if f := p.onProgress.Load(); f != nil && advanced {
		(*f)(cs.GetTopic())
	}
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

// OnProgress implements controlplane.ProgressNotifier: f is called, under
// the pool's lock, each time a worker reports a partition's copy further
// on; f must not block nor call the pool.
func (p *WorkerPool) OnProgress(f func(topic string)) {
	if f == nil {
		p.onProgress.Store(nil)
		return
	}
	p.onProgress.Store(&f)
}

// SourceEndOffsets implements controlplane.Replication.
func (p *WorkerPool) SourceEndOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	return sourceEndOffsets(ctx, p.source, topic)
}

// SourceTopics implements controlplane.SourceTopicLister.
func (p *WorkerPool) SourceTopics(ctx context.Context) ([]string, error) {
	return listTopics(ctx, p.source)
}

// DestinationLatency implements shadow.LatencySource from the
// workers' reports: several workers copying one topic each measure their
// own partitions, so the p50 is their p50s weighted by samples and the p99
// the largest p99 (an upper bound, which emulation errs towards).
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

// Workers implements controlplane.WorkerLister: the live workers by id,
// with what each holds.
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
