package replication

import (
	"context"
	"fmt"
	"sort"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/replicator"
)

// Stop implements controlplane.Replication: it asks every worker holding
// a partition of topic to stop it and waits until each partition's worker
// answered where it stopped. It fails (and the copy goes on) if a
// partition has no worker, or its worker's lease ends first.
func (p *WorkerPool) Stop(ctx context.Context, topic string) (map[int32]int64, []replicator.SourceBatch, error) {
	p.mu.Lock()
	t, err := p.topicLocked(topic)
	if err != nil {
		p.mu.Unlock()
		return nil, nil, err
	}
	if t.stop != nil {
		p.mu.Unlock()
		return nil, nil, fmt.Errorf("replication: %s is being stopped already", topic)
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
					p.endStopLocked(t, t.stop, fmt.Errorf("replication: stopping %s: the lease of worker %s on partition %d ran out before it said where the copy stopped; the copy goes on",
						t.name, pp.holder, i))
				}
			}
			pp.holder = ""
		}
	}
}
