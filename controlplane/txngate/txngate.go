// Package txngate owns what the control plane asks the source about a
// topic's transactional producers (docs/design.md §9, "Transactional
// producers"): who they are (Reader; Source reads them with Kafka's admin
// requests), the transactional-producer gate's refusal (Gate.Check), and
// which open transactions held a cutover that rolls back (Gate.HeldBy).
//
// A transaction lives on the source's coordinator; the agents refuse
// transactional writes to a COMPLETE topic (filter/txnguard), so no
// transaction is ever split across the clusters. What is left to the
// control plane is to not cut over a topic that a transactional producer
// writes, and to say, when a cutover rolls back, which open transactions
// held it.
//
// It does not import the control plane: the control plane builds a Gate
// from its options (WithTransactions, TransactionalProducerWindow), its
// clock and its logger, and calls it from its gates and its rollback.
package txngate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Errors.
var (
	// ErrRead: the source's transactional producers of a topic could not
	// be read (DescribeProducers, ListTransactions, DescribeTransactions);
	// the message says which and why.
	ErrRead = errors.New("controlplane: reading the source's transactions")
)

// Reader is what the transactional-producer gate and a rolled-back
// cutover ask the source about a topic's transactional producers.
type Reader interface {
	// Writers returns topic's transactional producers on the source:
	// every one with an open transaction on a partition of it and, unless
	// since is zero, every one whose last write to a partition of it is
	// at or after since.
	Writers(ctx context.Context, topic string, since time.Time) ([]Writer, error)
}

// Writer is one transactional producer of a topic.
type Writer struct {
	// TransactionalID is "" when no coordinator names the producer id:
	// a hanging transaction, or one the control plane may not DESCRIBE.
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	// State is the coordinator's state of its transaction (Ongoing,
	// PrepareCommit, CompleteCommit, ...), "" if unknown.
	State string
	// Open holds, per partition of the topic in its open transaction, the
	// transaction's first offset there (-1: added to it, none of its
	// records seen there when the source was read).
	Open map[int32]int64
	// LastWrite is its last write to the topic the source's partition
	// leaders remember (the record timestamps, a marker's time); zero if
	// none.
	LastWrite time.Time
}

// describe says who w is and what it does, at now.
func (w Writer) describe(now time.Time) string {
	var b strings.Builder
	if w.TransactionalID != "" {
		fmt.Fprintf(&b, "transactional id %q (producer %d, epoch %d", w.TransactionalID, w.ProducerID, w.ProducerEpoch)
	} else {
		fmt.Fprintf(&b, "producer %d (epoch %d, no coordinator names its transactional id: a hanging transaction, or the "+
			"control plane's source principal lacks DESCRIBE on it", w.ProducerID, w.ProducerEpoch)
	}
	if w.State != "" {
		b.WriteString(", " + w.State)
	}
	b.WriteString(")")
	if len(w.Open) > 0 {
		b.WriteString(" has a transaction open on partition")
		if len(w.Open) > 1 {
			b.WriteString("s")
		}
		for i, p := range slices.Sorted(maps.Keys(w.Open)) {
			if i > 0 {
				b.WriteString(",")
			}
			if o := w.Open[p]; o >= 0 {
				fmt.Fprintf(&b, " %d (from offset %d)", p, o)
			} else {
				fmt.Fprintf(&b, " %d (added to it, none of its records seen there)", p)
			}
		}
	} else {
		b.WriteString(" has no transaction open")
	}
	if !w.LastWrite.IsZero() {
		fmt.Fprintf(&b, ", last wrote the topic %v ago", now.Sub(w.LastWrite).Round(time.Second))
	}
	return b.String()
}

// describeWriters is ws described, at most a few in full.
func describeWriters(ws []Writer, now time.Time) string {
	const shown = 3
	parts := make([]string, 0, min(len(ws), shown)+1)
	for _, w := range ws[:min(len(ws), shown)] {
		parts = append(parts, w.describe(now))
	}
	if len(ws) > shown {
		parts = append(parts, fmt.Sprintf("and %d more", len(ws)-shown))
	}
	return strings.Join(parts, "; ")
}

// Source reads a topic's transactional producers from the
// source with Kafka's admin requests: DescribeProducers on its partitions
// (each leader's producer state: open transactions and last writes),
// ListTransactions by producer id (which of them are transactional, and
// their ids), and the coordinators' Ongoing transactions that added a
// partition of it (ListTransactions, DescribeTransactions). The admin's
// principal needs READ on the topic and DESCRIBE on the transactional ids
// (others are not listed: an open transaction of one is named by its
// producer id only, a finished one not at all).
type Source struct{ Admin *kadm.Client }

var _ Reader = (*Source)(nil)

// ongoing are the coordinator states of a transaction not finished.
var ongoing = []string{"Ongoing", "PrepareCommit", "PrepareAbort"}

// Writers implements Reader.
func (s *Source) Writers(ctx context.Context, topic string, since time.Time) ([]Writer, error) {
	described, err := s.Admin.DescribeProducers(ctx, kadm.TopicsSet{topic: nil})
	if err != nil {
		return nil, fmt.Errorf("%w: DescribeProducers of %s: %w", ErrRead, topic, err)
	}
	dt, ok := described[topic]
	if !ok || len(dt.Partitions) == 0 {
		return nil, fmt.Errorf("%w: DescribeProducers of %s: the source answered for no partition of it", ErrRead, topic)
	}
	var producers []kadm.DescribedProducer
	var pids []int64
	for _, p := range dt.Partitions.Sorted() {
		if p.Err != nil {
			return nil, fmt.Errorf("%w: DescribeProducers of %s partition %d: %w", ErrRead, topic, p.Partition, p.Err)
		}
		for _, d := range p.ActiveProducers.Sorted() {
			producers = append(producers, d)
			if candidate(d, since) && !slices.Contains(pids, d.ProducerID) {
				pids = append(pids, d.ProducerID)
			}
		}
	}
	var named kadm.ListedTransactions
	if len(pids) > 0 {
		if named, err = s.Admin.ListTransactions(ctx, pids, nil); err != nil {
			return nil, fmt.Errorf("%w: ListTransactions of producers %v: %w", ErrRead, pids, err)
		}
	}
	open, err := s.Admin.ListTransactions(ctx, nil, ongoing)
	if err != nil {
		return nil, fmt.Errorf("%w: ListTransactions %v: %w", ErrRead, ongoing, err)
	}
	var txns kadm.DescribedTransactions
	if len(open) > 0 {
		if txns, err = s.Admin.DescribeTransactions(ctx, open.TransactionalIDs()...); err != nil {
			return nil, fmt.Errorf("%w: DescribeTransactions: %w", ErrRead, err)
		}
	}
	return writersOf(topic, producers, named, txns, since), nil
}

// candidate says whether d may be one of the Writers: it has a
// transaction open on the partition, or wrote it since since.
func candidate(d kadm.DescribedProducer, since time.Time) bool {
	return d.CurrentTxnStartOffset >= 0 || (!since.IsZero() && d.LastTimestamp >= since.UnixMilli())
}

// writersOf decides the Writers of topic from what the source answered:
// producers (DescribeProducers of its partitions), named (the
// transactional ids of the candidate producer ids) and txns (the
// coordinators' unfinished transactions). A producer that wrote recently
// but that no coordinator names is idempotent, not transactional; one with
// a transaction open is a writer whether it is named or not.
func writersOf(topic string, producers []kadm.DescribedProducer, named kadm.ListedTransactions, txns kadm.DescribedTransactions,
	since time.Time) []Writer {
	ids := map[int64]kadm.ListedTransaction{}
	for _, l := range named {
		ids[l.ProducerID] = l
	}
	byPID := map[int64]*Writer{}
	get := func(pid int64, epoch int16) *Writer {
		w := byPID[pid]
		if w == nil {
			w = &Writer{ProducerID: pid, ProducerEpoch: epoch, Open: map[int32]int64{}}
			if l, ok := ids[pid]; ok {
				w.TransactionalID, w.State = l.TxnID, l.State
			}
			byPID[pid] = w
		}
		w.ProducerEpoch = max(w.ProducerEpoch, epoch)
		return w
	}
	for _, d := range producers {
		_, transactional := ids[d.ProducerID]
		open := d.CurrentTxnStartOffset >= 0
		if !open && (!transactional || !candidate(d, since)) {
			continue
		}
		w := get(d.ProducerID, d.ProducerEpoch)
		if open {
			w.Open[d.Partition] = d.CurrentTxnStartOffset
		}
		if at := time.UnixMilli(d.LastTimestamp); d.LastTimestamp > 0 && at.After(w.LastWrite) {
			w.LastWrite = at
		}
	}
	for _, t := range txns {
		ps, ok := t.Topics[topic]
		if t.Err != nil || !ok || !slices.Contains(ongoing, t.State) {
			continue
		}
		w := get(t.ProducerID, t.ProducerEpoch)
		w.TransactionalID, w.State = t.TxnID, t.State
		for p := range ps {
			if _, ok := w.Open[p]; !ok {
				w.Open[p] = -1
			}
		}
	}
	out := make([]Writer, 0, len(byPID))
	for _, w := range byPID {
		out = append(out, *w)
	}
	slices.SortFunc(out, func(a, b Writer) int {
		if c := strings.Compare(a.TransactionalID, b.TransactionalID); c != 0 {
			return c
		}
		switch {
		case a.ProducerID < b.ProducerID:
			return -1
		case a.ProducerID > b.ProducerID:
			return 1
		}
		return 0
	})
	return out
}

// DefaultWindow is how recently a transactional producer must have
// written a topic for the transactional-producer gate to refuse its
// cutover with no transaction open.
const DefaultWindow = 5 * time.Minute

// Timeouts of the Gate's reads of the source.
const (
	// checkTimeout bounds the gate's reads.
	checkTimeout = 10 * time.Second
	// heldByTimeout bounds the read of a rolled-back cutover's open
	// transactions: the rollback waits for it.
	heldByTimeout = 2 * time.Second
)

// Gate is the transactional-producer gate and the rollback's account of
// open transactions, over Reader.
type Gate struct {
	// Reader reads the source; nil: no gate, and HeldBy names nothing.
	Reader Reader
	// Window is how recently a transactional producer must have written
	// a topic for Check to refuse it with no transaction open.
	Window time.Duration
	Now    func() time.Time
	Log    *slog.Logger
}

// On says whether the gate checks anything: a Reader and a window.
func (g *Gate) On() bool { return g.Reader != nil && g.Window > 0 }

// Check is the transactional-producer gate: why topic may not cut over
// now, "" if it may.
func (g *Gate) Check(ctx context.Context, topic string) string {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	now := g.Now()
	ws, err := g.Reader.Writers(ctx, topic, now.Add(-g.Window))
	if err != nil {
		return fmt.Sprintf("cannot tell whether a transactional producer writes the topic: %v (the control plane's source "+
			"principal needs READ on the topic and DESCRIBE on transactional ids)", err)
	}
	if len(ws) == 0 {
		return ""
	}
	what := "transactional producer writes"
	if len(ws) > 1 {
		what = "transactional producers write"
	}
	return fmt.Sprintf("%d %s the source topic (a transaction open, or a write within %v): %s; "+
		"a transaction cannot span the clusters, and after the cutover the agents refuse its writes to the topic "+
		"(TOPIC_AUTHORIZATION_FAILED): stop it, cut over, then restart it against the destination; or keep the topic on the source",
		len(ws), what, g.Window, describeWriters(ws, now))
}

// HeldBy names topic's open transactions on the source for a cutover
// that is about to roll back ("" for none, or when they cannot be read):
// an open transaction holds the copy at its first offset, below the end
// offsets, until it ends, so one open now is what held this cutover.
func (g *Gate) HeldBy(ctx context.Context, topic string) string {
	if g.Reader == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, heldByTimeout)
	defer cancel()
	ws, err := g.Reader.Writers(ctx, topic, time.Time{})
	if err != nil {
		g.Log.Debug("reading the source's open transactions for a rollback", "topic", topic, "err", err)
		return ""
	}
	if len(ws) == 0 {
		return ""
	}
	return "open transactions on the source topic hold the copy at their first offset, below the end offsets " +
		"(it reads committed data only): " + describeWriters(ws, g.Now()) +
		"; they end when their producers commit or abort, or at their transaction timeout"
}
