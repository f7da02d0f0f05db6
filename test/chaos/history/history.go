// Package history is the chaos suite's independent history checker: given
// what every producer was told (its acknowledgments) and what the source and
// destination clusters hold at the end of a run, it reports each invariant of
// a migration on its own. It shares no code with the agent, the replicator or
// the control plane, so a bug there cannot hide itself here; it reads the
// clusters with franz-go directly (Read).
//
// Records are identified by their key, "<producer>-<seq>": producers write
// that key and report every record they were told about.
package history

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Sentinel errors.
var (
	// ErrBadKey means a record key is not "<producer>-<seq>".
	ErrBadKey = errors.New("history: record key is not <producer>-<seq>")
)

// Producer describes one producer of a run.
type Producer struct {
	// ID prefixes every key the producer writes; unique in a run.
	ID string
	// Client names the client library (franz, kcat, ...), for reports.
	Client string
	// Idempotent producers must not leave duplicates.
	Idempotent bool
	// Topic is the one topic the producer writes.
	Topic string
	// Start is when it began producing; the first stall is measured from
	// it.
	Start time.Time
	// End is when its client returned; from the last ack to End counts as
	// a stall (a producer the run had to stop stalled until then).
	End time.Time
	// Err is the error the producer's client itself ended with (it could
	// not run, or crashed); empty when it ran to the end.
	Err string
}

// Ack is what a producer was told about one record, in the order the client
// reported it.
type Ack struct {
	Producer  string
	Seq       int
	Partition int32
	Offset    int64
	// Err is the client's error when the record failed; empty when acked.
	Err string
	// Unanswered marks a record the client still had no outcome for when
	// the run stopped it (its Err is the driver's, not the client's).
	Unanswered bool
	At         time.Time
}

// Record is one record read back from a cluster.
type Record struct {
	Partition int32
	Offset    int64
	Key       string
}

// Recorder collects acknowledgments from many producers at once.
type Recorder struct {
	mu   sync.Mutex
	acks []Ack
}

// Add records a.
func (r *Recorder) Add(a Ack) {
	r.mu.Lock()
	r.acks = append(r.acks, a)
	r.mu.Unlock()
}

// Acks returns every acknowledgment so far, in the order added.
func (r *Recorder) Acks() []Ack {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Ack(nil), r.acks...)
}

// Input is one run's history and the clusters' final contents.
type Input struct {
	Producers []Producer
	// Acks in the order each producer's client reported them.
	Acks []Ack
	// Completed names the topics whose cutover completed: their records
	// must be in Destination, the others' in Source.
	Completed map[string]bool
	// Source and Destination hold each topic's records, per topic.
	Source, Destination map[string][]Record
}

// Report is the verdict per invariant. Examples holds up to MaxExamples
// lines per invariant describing the first violations found.
type Report struct {
	// Acked counts records acknowledged to their producer.
	Acked int
	// Failed counts records whose client gave up on them (not acked, so
	// not required anywhere).
	Failed int
	// Lost: acked records absent from the topic's final cluster (D after
	// COMPLETE, S otherwise), or absent from the partition they were acked
	// on.
	Lost int
	// Misplaced: acked records found in their partition but not at the
	// offset they were acked at (offset parity broken).
	Misplaced int
	// Reordered: acked records of one producer to one partition that sit
	// before a record acked earlier.
	Reordered int
	// Duplicates: extra copies of idempotent producers' records.
	Duplicates int
	// PlainDuplicates: extra copies of non-idempotent producers' records
	// (allowed: such a producer may retry a write that landed).
	PlainDuplicates int
	// LateSourceWrites: records in S.T of a completed topic that D.T does
	// not hold at the same offset: written to S after replication of T
	// stopped (or never replicated).
	LateSourceWrites int
	// Unanswered counts records still without an outcome when the run
	// stopped their producer, long after it should have finished: the
	// producer hung.
	Unanswered int
	// Fatal counts records the client failed plus producers whose client
	// ended with an error: every producer here retries until it succeeds,
	// so a failure is an error the client gave up on.
	Fatal int
	// MaxStall is the longest time any producer waited between two acks
	// (or from its start to its first ack), and StallProducer is whose.
	MaxStall      time.Duration
	StallProducer string
	Examples      map[string][]string
}

// MaxExamples bounds Report.Examples per invariant.
const MaxExamples = 5

func (r *Report) example(invariant, format string, args ...any) {
	if r.Examples == nil {
		r.Examples = map[string][]string{}
	}
	if len(r.Examples[invariant]) < MaxExamples {
		r.Examples[invariant] = append(r.Examples[invariant], fmt.Sprintf(format, args...))
	}
}

// OK says whether no invariant that fails a run is broken: nothing lost,
// misplaced, reordered or written to S late, no idempotent duplicate and
// no fatal client error, no producer left hanging.
func (r Report) OK() bool {
	return r.Lost == 0 && r.Misplaced == 0 && r.Reordered == 0 && r.Duplicates == 0 &&
		r.LateSourceWrites == 0 && r.Fatal == 0 && r.Unanswered == 0
}

// String renders the report, one invariant a line, with examples.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "acked %d (failed %d)\n", r.Acked, r.Failed)
	line := func(name string, n int) {
		fmt.Fprintf(&b, "  %-18s %d\n", name, n)
		for _, e := range r.Examples[name] {
			fmt.Fprintf(&b, "      %s\n", e)
		}
	}
	line("acked-missing", r.Lost)
	line("misplaced", r.Misplaced)
	line("reordered", r.Reordered)
	line("duplicates", r.Duplicates)
	line("plain-duplicates", r.PlainDuplicates)
	line("late-source-writes", r.LateSourceWrites)
	line("fatal", r.Fatal)
	line("unanswered", r.Unanswered)
	fmt.Fprintf(&b, "  %-18s %s (%s)", "longest-stall", r.MaxStall.Round(time.Millisecond), r.StallProducer)
	return b.String()
}

// ParseKey splits a record key into producer id and sequence number.
func ParseKey(key string) (producer string, seq int, err error) {
	i := strings.LastIndexByte(key, '-')
	if i <= 0 {
		return "", 0, fmt.Errorf("%w: %q", ErrBadKey, key)
	}
	seq, err = strconv.Atoi(key[i+1:])
	if err != nil || seq < 0 {
		return "", 0, fmt.Errorf("%w: %q", ErrBadKey, key)
	}
	return key[:i], seq, nil
}

// Key is the key producer writes for record seq.
func Key(producer string, seq int) string { return producer + "-" + strconv.Itoa(seq) }

// index is one topic's final log, by key and by position.
type index struct {
	byKey map[string][]Record
	at    map[int32]map[int64]string
}

func newIndex(recs []Record) index {
	ix := index{byKey: map[string][]Record{}, at: map[int32]map[int64]string{}}
	for _, r := range recs {
		ix.byKey[r.Key] = append(ix.byKey[r.Key], r)
		if ix.at[r.Partition] == nil {
			ix.at[r.Partition] = map[int64]string{}
		}
		ix.at[r.Partition][r.Offset] = r.Key
	}
	return ix
}

// Check evaluates in.
func Check(in Input) Report {
	var rep Report
	producers := map[string]Producer{}
	for _, p := range in.Producers {
		producers[p.ID] = p
		if p.Err != "" {
			rep.Fatal++
			rep.example("fatal", "producer %s (%s): client ended with: %s", p.ID, p.Client, p.Err)
		}
	}
	final := map[string]index{}
	for _, p := range in.Producers {
		if _, ok := final[p.Topic]; ok {
			continue
		}
		if in.Completed[p.Topic] {
			final[p.Topic] = newIndex(in.Destination[p.Topic])
		} else {
			final[p.Topic] = newIndex(in.Source[p.Topic])
		}
	}

	// Per producer, in ack order: where each acked record sits.
	type stream struct {
		producer  string
		partition int32
	}
	lastPos := map[stream]int64{}
	lastSeq := map[stream]int{}
	lastAt := map[string]time.Time{}
	for _, a := range in.Acks {
		p, ok := producers[a.Producer]
		if !ok {
			rep.Fatal++
			rep.example("fatal", "ack from unknown producer %q", a.Producer)
			continue
		}
		if a.Unanswered {
			rep.Unanswered++
			rep.example("unanswered", "%s seq %d (%s): no outcome when the run stopped the producer", a.Producer, a.Seq, p.Client)
			continue
		}
		if a.Err != "" {
			rep.Failed++
			rep.Fatal++
			rep.example("fatal", "%s seq %d (%s): %s", a.Producer, a.Seq, p.Client, a.Err)
			continue
		}
		rep.Acked++
		prev, ok := lastAt[a.Producer]
		if !ok {
			prev = p.Start
		}
		if !prev.IsZero() && a.At.Sub(prev) > rep.MaxStall {
			rep.MaxStall, rep.StallProducer = a.At.Sub(prev), a.Producer
		}
		if a.At.After(prev) {
			lastAt[a.Producer] = a.At
		}

		key := Key(a.Producer, a.Seq)
		ix := final[p.Topic]
		where := "source"
		if in.Completed[p.Topic] {
			where = "destination"
		}
		var pos int64 = -1
		if ix.at[a.Partition][a.Offset] == key {
			pos = a.Offset
		} else {
			for _, r := range ix.byKey[key] {
				if r.Partition == a.Partition {
					pos = r.Offset
					break
				}
			}
			if pos < 0 {
				rep.Lost++
				rep.example("acked-missing", "%s (%s) acked at %s/%d@%d, not in the %s", key, p.Client, p.Topic, a.Partition, a.Offset, where)
				continue
			}
			// An ack without an offset (librdkafka's -1001: messages
			// "implicitly acked" by a later batch's success, or answered
			// DUPLICATE_SEQUENCE_NUMBER) claims only that the record is in.
			if a.Offset >= 0 {
				rep.Misplaced++
				rep.example("misplaced", "%s (%s) acked at %s/%d@%d, found in the %s at offset %d", key, p.Client, p.Topic, a.Partition, a.Offset, where, pos)
			}
		}
		s := stream{a.Producer, a.Partition}
		if last, ok := lastPos[s]; ok && pos <= last {
			rep.Reordered++
			rep.example("reordered", "%s (%s) acked after seq %d but sits at %s/%d@%d, before it (@%d)", key, p.Client, lastSeq[s], p.Topic, a.Partition, pos, last)
			continue // compare the next ack with the furthest position seen
		}
		lastPos[s], lastSeq[s] = pos, a.Seq
	}

	for _, p := range in.Producers {
		last, ok := lastAt[p.ID]
		if !ok {
			last = p.Start
		}
		if !p.End.IsZero() && !last.IsZero() && p.End.Sub(last) > rep.MaxStall {
			rep.MaxStall, rep.StallProducer = p.End.Sub(last), p.ID
		}
	}

	// Duplicates: every copy of a producer's key beyond the first, in the
	// topic's final cluster.
	topics := make([]string, 0, len(final))
	for t := range final {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	for _, t := range topics {
		ix := final[t]
		keys := make([]string, 0, len(ix.byKey))
		for k := range ix.byKey {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			copies := ix.byKey[k]
			if len(copies) < 2 {
				continue
			}
			id, _, err := ParseKey(k)
			p, known := producers[id]
			switch {
			case err != nil || !known:
				rep.Duplicates += len(copies) - 1
				rep.example("duplicates", "%s: %d copies of a key no producer of the run writes (%q)", t, len(copies), k)
			case p.Idempotent:
				rep.Duplicates += len(copies) - 1
				rep.example("duplicates", "%s (%s, idempotent): %d copies in %s at %v", k, p.Client, len(copies), t, positions(copies))
			default:
				rep.PlainDuplicates += len(copies) - 1
				rep.example("plain-duplicates", "%s (%s): %d copies in %s at %v", k, p.Client, len(copies), t, positions(copies))
			}
		}
	}

	// One writer: after COMPLETE, S.T must hold nothing D.T does not hold
	// at the same offset (the replicator copies with offset parity up to
	// where it stopped; anything else reached S after that).
	for _, t := range topics {
		if !in.Completed[t] {
			continue
		}
		dst := final[t]
		for _, r := range in.Source[t] {
			if dst.at[r.Partition][r.Offset] != r.Key {
				rep.LateSourceWrites++
				got := dst.at[r.Partition][r.Offset]
				if got == "" {
					got = "nothing"
				}
				rep.example("late-source-writes", "%s/%d@%d: S holds %s, D holds %s there", t, r.Partition, r.Offset, r.Key, got)
			}
		}
	}
	return rep
}

func positions(rs []Record) string {
	var b strings.Builder
	for i, r := range rs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d@%d", r.Partition, r.Offset)
	}
	return b.String()
}
