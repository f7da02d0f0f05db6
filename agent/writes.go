package agent

import (
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/internal/offsetset"
	"github.com/baton-kafka/baton/migration"
)

// Bounds of the write ranges an agent keeps for bypass detection
// (docs/design.md §12).
const (
	// DefaultWriteRangesHeld bounds the ranges held across partitions
	// until a report carrying them is answered (a control plane out of
	// reach): past it the lowest ranges of the partition written are
	// dropped and the partition's attribution is marked unknown instead.
	DefaultWriteRangesHeld = 65536
	// DefaultWriteRangesPerReport bounds the ranges one heartbeat carries;
	// the rest go in the next ones.
	DefaultWriteRangesPerReport = 4096
)

// WriteRangesMode says when an agent keeps the source offset ranges its
// produce acks name, which the control plane matches against what the
// replicator reads from the source to find producers that bypass the
// agents (docs/design.md §12).
type WriteRangesMode int

const (
	// WriteRangesAuto keeps them with a control plane (which collects them
	// with the heartbeats), not with static routes. The default.
	WriteRangesAuto WriteRangesMode = iota
	// WriteRangesOn keeps them even with static routes, where nothing
	// collects them (bounded by DefaultWriteRangesHeld): to measure their
	// cost.
	WriteRangesOn
	// WriteRangesOff keeps none: the control plane then sees every write
	// through this agent as a bypass.
	WriteRangesOff
)

// WriteRanges sets when the agent keeps its write ranges (default
// WriteRangesAuto).
func WriteRanges(m WriteRangesMode) Opt { return optFunc(func(c *config) { c.writeRanges = m }) }

// sourceWrites is, per topic and partition, what the agent wrote to the
// source since its last report the control plane answered: the acked
// offset ranges (merged) and when it wrote offsets it never learned.
// Only topics routed PROXY or MIGRATING are kept: bypass detection watches
// those.
type sourceWrites struct {
	on        bool
	held      int // bound on ranges held, across partitions
	perReport int
	routes    *RouteTable

	mu    sync.Mutex
	n     int // ranges held
	since time.Time
	parts map[string]map[int32]*partWrites
}

type partWrites struct {
	acked                     offsetset.Set
	unknownFrom, unknownUntil time.Time
}

func newSourceWrites(on bool, routes *RouteTable) *sourceWrites {
	return &sourceWrites{on: on, held: DefaultWriteRangesHeld, perReport: DefaultWriteRangesPerReport, routes: routes,
		since: time.Now(), parts: map[string]map[int32]*partWrites{}}
}

// watched says whether topic's writes are kept.
func (w *sourceWrites) watched(topic string) bool {
	if !w.on {
		return false
	}
	s := w.routes.Lookup(topic).State
	return s == migration.Proxy || s == migration.Migrating
}

func (w *sourceWrites) partLocked(topic string, partition int32) *partWrites {
	ps := w.parts[topic]
	if ps == nil {
		ps = map[int32]*partWrites{}
		w.parts[topic] = ps
	}
	p := ps[partition]
	if p == nil {
		p = &partWrites{}
		ps[partition] = p
	}
	return p
}

// acked notes that the source acked [start, end) of topic's partition to
// this agent. On the produce answer path: one lock, and usually an append
// or the last range extended in place.
func (w *sourceWrites) acked(topic string, partition int32, start, end int64) {
	if !w.watched(topic) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.partLocked(topic, partition)
	before := p.acked.Len()
	p.acked.Add(start, end)
	w.n += p.acked.Len() - before
	if w.n > w.held {
		// Nobody has taken the reports for a while: forget the oldest of
		// this partition, and say its attribution is unknown since the
		// last answered report rather than have them look like bypasses.
		drop := min(p.acked.Len()-1, w.n-w.held)
		if drop > 0 {
			p.acked.DropLowest(p.acked.Len() - drop)
			w.n -= drop
			p.unknownLocked(w.since, time.Now())
		}
	}
}

// unknown notes that the agent wrote to topic's partition at at without
// learning the offsets (acks=0, or an answer lost).
func (w *sourceWrites) unknown(topic string, partition int32, at time.Time) {
	if !w.watched(topic) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partLocked(topic, partition).unknownLocked(at, at)
}

// unknownSpan notes that a write to topic's partition the agent gave up on
// at from may have been appended until until (its call settled then).
func (w *sourceWrites) unknownSpan(topic string, partition int32, from, until time.Time) {
	if !w.watched(topic) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partLocked(topic, partition).unknownLocked(from, until)
}

func (p *partWrites) unknownLocked(from, until time.Time) {
	if p.unknownFrom.IsZero() || from.Before(p.unknownFrom) {
		p.unknownFrom = from
	}
	if until.After(p.unknownUntil) {
		p.unknownUntil = until
	}
}

// report returns, per topic, what to carry in the next heartbeat, at most
// perReport ranges in all (lowest offsets first per partition), and
// whether that bound left some out. Topics no route names any more are
// dropped.
func (w *sourceWrites) report() (_ map[string][]*batonv1.PartitionWrites, truncated bool) {
	if !w.on {
		return nil, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	budget := w.perReport
	out := map[string][]*batonv1.PartitionWrites{}
	for topic, ps := range w.parts {
		if w.routes.Lookup(topic).State == migration.Unmanaged {
			for _, p := range ps {
				w.n -= p.acked.Len()
			}
			delete(w.parts, topic)
			continue
		}
		for partition, p := range ps {
			pw := &batonv1.PartitionWrites{Partition: partition}
			for _, r := range p.acked.Ranges() {
				if budget == 0 {
					truncated = true
					break
				}
				pw.Acked = append(pw.Acked, &batonv1.OffsetRange{Start: r.Start, End: r.End})
				budget--
			}
			if !p.unknownFrom.IsZero() {
				pw.UnknownFrom, pw.UnknownUntil = timestamppb.New(p.unknownFrom), timestamppb.New(p.unknownUntil)
			}
			if len(pw.Acked) > 0 || pw.UnknownFrom != nil {
				out[topic] = append(out[topic], pw)
			}
		}
	}
	return out, truncated
}

// delivered forgets what an answered heartbeat carried: its ranges, and
// the unknown spans it reported whole.
func (w *sourceWrites) delivered(topics []*batonv1.TopicDrain) {
	if !w.on {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.since = time.Now()
	for _, d := range topics {
		ps := w.parts[d.GetTopic()]
		for _, pw := range d.GetWrites() {
			p := ps[pw.GetPartition()]
			if p == nil {
				continue
			}
			before := p.acked.Len()
			for _, r := range pw.GetAcked() {
				p.acked.Remove(r.GetStart(), r.GetEnd())
			}
			w.n -= before - p.acked.Len()
			if u := pw.GetUnknownUntil(); u != nil && !p.unknownUntil.After(u.AsTime()) {
				p.unknownFrom, p.unknownUntil = time.Time{}, time.Time{}
			}
			if p.acked.Len() == 0 && p.unknownFrom.IsZero() {
				delete(ps, pw.GetPartition())
			}
		}
		if len(ps) == 0 {
			delete(w.parts, d.GetTopic())
		}
	}
}
