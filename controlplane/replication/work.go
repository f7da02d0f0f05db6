package replication

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/replicator"
)

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
				pp.holder = ""
				if pp.until.Before(p.quiet) {
					pp.until = p.quiet
				}
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
		p.endStopLocked(t, st, fmt.Errorf("replication: stopping %s on worker %s: %s", t.name, id, s.GetError()))
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
		p.endStopLocked(t, st, fmt.Errorf("replication: stopping %s: worker %s did not say where partitions %s stopped (its lease lapsed, or it had not set them up again since they came back to it); the copy goes on",
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
