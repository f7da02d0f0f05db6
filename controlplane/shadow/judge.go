package shadow

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/baton-kafka/baton/migration"
)

// writer is an agent process that may have written a batch: its newest
// lease's expiry, how far its reports reach, and whether more may come.
type writer struct {
	expires, through time.Time
	replaced         bool
}

// verdict is what is known of a batch's writers.
type verdict int

const (
	verdictReported verdict = iota // every writer reported past it
	verdictWait                    // a writer may still report it
	verdictUnknown                 // a writer will never report it
)

// of judges sr (appended after after) against the writers. unleased is
// how long after its lease's end an agent may still write the topic:
// migration.UnleasedForward for a topic the source fences at the cutover
// (agents forward it without a lease), else zero.
func (sr sourceRead) of(writers []writer, after time.Time, f, unleased time.Duration) verdict {
	v := verdictReported
	for _, w := range writers {
		last := w.expires.Add(unleased) // its last write sent by then
		if last.Add(f).Before(after) {
			continue // its writes were all appended before this batch
		}
		// A write sent before last is answered by last + F, and one
		// appended by sr.last was sent before it: a report made after the
		// earlier of the two plus F holds the write, or its unknown span.
		if w.through.After(minTime(sr.last, last).Add(f)) {
			continue
		}
		if w.replaced {
			return verdictUnknown
		}
		v = verdictWait
	}
	return v
}

// found is a forgotten producer judged, to be recorded.
type found struct {
	topic string
	info  BypassInfo
	why   string
}

// judge decides every batch its writers have reported past, and those the
// grace ran out on. topics are the managed topics (for their fences).
func (j *Job) judge(now time.Time, topics []Topic) {
	fenced := map[string]bool{}
	for _, t := range topics {
		if t.FenceAtCutover {
			fenced[t.Name] = true
		}
	}
	leases := j.view.Leases()
	var events []found
	b := j.byp
	b.mu.Lock()
	writers := b.writersLocked(now, leases)
	for topic, w := range b.proxy {
		if !w.ready {
			continue
		}
		unleased := time.Duration(0)
		if fenced[topic] {
			unleased = migration.UnleasedForward
		}
		for p, a := range w.parts {
			if a.start < 0 {
				continue // a partition added after the watch began
			}
			events = append(events, j.judgePartition(now, topic, p, w.began, a, writers, unleased)...)
		}
	}
	b.mu.Unlock()
	for _, e := range events {
		info := e.info
		reason := e.why + ": a producer writes the source around the agents and would be forgotten at the cutover " +
			"(nobody copies the source after it). Find it by its producer id (kafka-producers --describe, or the " +
			"broker's request log) and point it at its Baton agent before migrating"
		j.log.Warn("forgotten producer: "+e.why, "topic", e.topic, "partition", info.Partition, "offset", info.Offset,
			"producer_id", info.ProducerID, "records", info.Records,
			"what_to_do", "find the producer by its id and point it at its Baton agent before migrating")
		j.rec.Record(j.ctx, Event{Topic: e.topic, Kind: EventForgottenProducer, Reason: reason, Bypass: &info})
	}
}

// writersLocked is every agent process that may have written a batch:
// the leased ones and the replaced ones kept. b.mu is held.
func (b *bypass) writersLocked(now time.Time, leases []Lease) []writer {
	// A replaced process wrote nothing appended after its expiry + F, but
	// the copy may read such a batch much later (a lagging replicator):
	// it is kept for a day, at most maxReplaced of them.
	b.replaced = slices.DeleteFunc(b.replaced, func(r replacedAgent) bool { return now.Sub(r.expires) > replacedKept })
	if n := len(b.replaced); n > maxReplaced {
		b.replaced = b.replaced[n-maxReplaced:]
	}
	writers := make([]writer, 0, len(leases)+len(b.replaced))
	for _, l := range leases {
		w := writer{expires: l.ExpiresAt}
		if ar := b.reports[l.Node]; ar != nil {
			w.through = ar.through
		}
		writers = append(writers, w)
	}
	for _, r := range b.replaced {
		writers = append(writers, writer{expires: r.expires, through: r.through, replaced: true})
	}
	return writers
}

// judgePartition judges partition p of topic (watched since began) in
// order, up to the first batch that still waits for a report, and returns
// the forgotten producers to record. j.byp.mu is held.
func (j *Job) judgePartition(now time.Time, topic string, p int32, began time.Time, a *attribution, writers []writer,
	unleased time.Duration) []found {
	grace, f := j.bypassGrace(), j.forward
	var events []found
	n := 0
	for ; n < len(a.pending); n++ {
		r := a.pending[n]
		after := r.after
		if after.IsZero() {
			after = began
		}
		v := r.of(writers, after, f, unleased)
		if v == verdictWait {
			if now.Before(r.first.Add(grace)) {
				break // judged in order: the next ones wait too
			}
			v = verdictUnknown // a writer that reports late is no evidence
		}
		from := max(r.start, a.judged)
		if from >= r.end {
			continue
		}
		missing := a.acked.Missing(from, r.end)
		a.judged = r.end
		if missing == 0 {
			continue
		}
		if v == verdictUnknown || a.incomplete(r.after, r.last) {
			j.metrics.unknown.WithLabelValues(topic).Add(float64(missing))
			continue
		}
		j.metrics.unattributed.WithLabelValues(topic).Add(float64(missing))
		what := fmt.Sprintf("partition %d offset %d: %d records of producer id %d that no agent wrote", p, from, missing, r.pid)
		j.byp.last[topic] = lastBypass{at: now, what: what}
		if last, ok := a.evented[r.pid]; ok && now.Sub(last) < DefaultBypassDedupe {
			continue
		}
		a.evented[r.pid] = now
		events = append(events, found{topic, BypassInfo{Partition: p, Offset: from, Records: missing, ProducerID: r.pid}, what})
	}
	a.pending = a.pending[n:]
	a.acked.DropBelow(a.judged)
	// Kept as long as replaced writers: the copy may read a batch from
	// inside a span long after it (maxUnknownSpans bounds them).
	a.unknown = slices.DeleteFunc(a.unknown, func(u timeSpan) bool { return now.Sub(u.until) > replacedKept })
	maps.DeleteFunc(a.evented, func(_ int64, at time.Time) bool { return now.Sub(at) >= DefaultBypassDedupe })
	return events
}

// pollComplete reads S.T's end offsets every poll for topics COMPLETE for
// less than the watch, and raises growth. A restarted control plane starts
// again from the ends it reads then, until the stored COMPLETE time plus
// the watch.
func (j *Job) pollComplete(topics []Topic) {
	if j.cfg.watch <= 0 {
		return
	}
	now := j.now()
	b := j.byp
	live := map[string]bool{}
	for _, t := range topics {
		if t.State != migration.Complete || now.Sub(t.CompletedAt) >= j.cfg.watch {
			continue
		}
		live[t.Name] = true
		b.mu.Lock()
		w := b.complete[t.Name]
		if w == nil {
			w = &completeWatch{}
			b.complete[t.Name] = w
		}
		due := !now.Before(w.nextPoll)
		b.mu.Unlock()
		if due {
			j.pollOne(now, t.Name, w)
		}
	}
	b.mu.Lock()
	for name := range b.complete {
		if !live[name] {
			delete(b.complete, name)
		}
	}
	b.mu.Unlock()
}

// pollOne reads the source ends of name, COMPLETE and watched by w, and
// raises growth once per episode.
func (j *Job) pollOne(now time.Time, name string, w *completeWatch) {
	b := j.byp
	ctx, cancel := context.WithTimeout(j.ctx, j.cfg.poll)
	ends, err := j.source.SourceEndOffsets(ctx, name)
	cancel()
	b.mu.Lock()
	w.nextPoll = now.Add(j.cfg.poll)
	if err != nil {
		b.mu.Unlock()
		j.log.Debug("watching the source after COMPLETE: reading end offsets", "topic", name, "err", err)
		return
	}
	if w.ends == nil {
		w.ends = ends
		b.mu.Unlock()
		return
	}
	grown := map[int32]int64{}
	var total int64
	for p, end := range ends {
		if d := end - w.ends[p]; d > 0 {
			grown[p] = d
			total += d
		}
	}
	w.ends = ends
	if total == 0 {
		if w.inEpisode && now.Sub(w.lastGrown) >= bypassEpisodeQuiet {
			w.inEpisode = false
		}
		b.mu.Unlock()
		return
	}
	j.metrics.afterComplete.WithLabelValues(name).Add(float64(total))
	w.lastGrown = now
	first := !w.inEpisode
	w.inEpisode = true
	b.mu.Unlock()
	if !first {
		return
	}
	parts := make([]string, 0, len(grown))
	for _, p := range slices.Sorted(maps.Keys(grown)) {
		parts = append(parts, fmt.Sprintf("%d: %d", p, grown[p]))
	}
	what := fmt.Sprintf("%d records written to the source after COMPLETE (partition: records %s)", total, strings.Join(parts, ", "))
	j.log.Warn("source written after COMPLETE: "+what, "topic", name,
		"what_to_do", "a producer still writes the source around the agents and nobody copies it: find it (the source's "+
			"DescribeProducers for the partitions named, or the broker's request log), point it at its Baton agent, and copy "+
			"or replay what it wrote to the destination")
	j.rec.Record(j.ctx, Event{Topic: name, Kind: EventSourceWrittenAfterComplete, Reason: what,
		Bypass: &BypassInfo{Grown: grown, Records: total}})
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
