package controlplane

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Transactional producers and the cutover (docs/design.md §9,
// "Transactional producers"). A transaction lives on the source's
// coordinator; the agents refuse transactional writes to a COMPLETE topic
// (filter/txnguard), so no transaction is ever split across the clusters.
// What is left to the control plane is to not cut over a topic that a
// transactional producer writes (the transactional-producer gate), and to
// say, when a cutover rolls back, which open transactions held it.

// Transactions is what the transactional-producer gate and a running
// cutover ask the source about a topic's transactional producers.
type Transactions interface {
	// Writers returns topic's transactional producers on the source:
	// every one with an open transaction on a partition of it and, unless
	// since is zero, every one whose last write to a partition of it is
	// at or after since.
	Writers(ctx context.Context, topic string, since time.Time) ([]TxnWriter, error)
}

// TxnWriter is one transactional producer of a topic.
type TxnWriter struct {
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
func (w TxnWriter) describe(now time.Time) string {
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
func describeWriters(ws []TxnWriter, now time.Time) string {
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

// SourceTransactions reads a topic's transactional producers from the
// source with Kafka's admin requests: DescribeProducers on its partitions
// (each leader's producer state: open transactions and last writes),
// ListTransactions by producer id (which of them are transactional, and
// their ids), and the coordinators' Ongoing transactions that added a
// partition of it (ListTransactions, DescribeTransactions). The admin's
// principal needs READ on the topic and DESCRIBE on the transactional ids
// (others are not listed: an open transaction of one is named by its
// producer id only, a finished one not at all).
type SourceTransactions struct{ Admin *kadm.Client }

var _ Transactions = (*SourceTransactions)(nil)

// ongoing are the coordinator states of a transaction not finished.
var ongoing = []string{"Ongoing", "PrepareCommit", "PrepareAbort"}

// Writers implements Transactions.
func (s *SourceTransactions) Writers(ctx context.Context, topic string, since time.Time) ([]TxnWriter, error) {
	described, err := s.Admin.DescribeProducers(ctx, kadm.TopicsSet{topic: nil})
	if err != nil {
		return nil, fmt.Errorf("%w: DescribeProducers of %s: %w", ErrTransactions, topic, err)
	}
	dt, ok := described[topic]
	if !ok || len(dt.Partitions) == 0 {
		return nil, fmt.Errorf("%w: DescribeProducers of %s: the source answered for no partition of it", ErrTransactions, topic)
	}
	var producers []kadm.DescribedProducer
	var pids []int64
	for _, p := range dt.Partitions.Sorted() {
		if p.Err != nil {
			return nil, fmt.Errorf("%w: DescribeProducers of %s partition %d: %w", ErrTransactions, topic, p.Partition, p.Err)
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
			return nil, fmt.Errorf("%w: ListTransactions of producers %v: %w", ErrTransactions, pids, err)
		}
	}
	open, err := s.Admin.ListTransactions(ctx, nil, ongoing)
	if err != nil {
		return nil, fmt.Errorf("%w: ListTransactions %v: %w", ErrTransactions, ongoing, err)
	}
	var txns kadm.DescribedTransactions
	if len(open) > 0 {
		if txns, err = s.Admin.DescribeTransactions(ctx, open.TransactionalIDs()...); err != nil {
			return nil, fmt.Errorf("%w: DescribeTransactions: %w", ErrTransactions, err)
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
	since time.Time) []TxnWriter {
	ids := map[int64]kadm.ListedTransaction{}
	for _, l := range named {
		ids[l.ProducerID] = l
	}
	byPID := map[int64]*TxnWriter{}
	get := func(pid int64, epoch int16) *TxnWriter {
		w := byPID[pid]
		if w == nil {
			w = &TxnWriter{ProducerID: pid, ProducerEpoch: epoch, Open: map[int32]int64{}}
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
	out := make([]TxnWriter, 0, len(byPID))
	for _, w := range byPID {
		out = append(out, *w)
	}
	slices.SortFunc(out, func(a, b TxnWriter) int {
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

// DefaultTransactionalProducerWindow is how recently a transactional
// producer must have written a topic for the transactional-producer gate
// to refuse its cutover with no transaction open.
const DefaultTransactionalProducerWindow = 5 * time.Minute

// txnGateTimeout bounds the gate's reads of the source.
const txnGateTimeout = 10 * time.Second

// WithTransactions sets how the control plane reads the source's
// transactional producers (default none: no transactional-producer gate,
// and a rollback does not name open transactions). baton controlplane
// sets SourceTransactions on the source's admin client.
func WithTransactions(t Transactions) Opt { return optFunc(func(c *config) { c.txns = t }) }

// TransactionalProducerWindow sets how recently a transactional producer
// must have written a topic for the transactional-producer gate to refuse
// its cutover when no transaction is open (default
// DefaultTransactionalProducerWindow; 0 turns the gate off).
func TransactionalProducerWindow(d time.Duration) Opt {
	return optFunc(func(c *config) { c.txnWindow = d })
}

// transactionalGate is the transactional-producer gate's check.
func (cp *ControlPlane) transactionalGate(ctx context.Context, topic string) string {
	ctx, cancel := context.WithTimeout(ctx, txnGateTimeout)
	defer cancel()
	now := cp.now()
	ws, err := cp.cfg.txns.Writers(ctx, topic, now.Add(-cp.cfg.txnWindow))
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
		len(ws), what, cp.cfg.txnWindow, describeWriters(ws, now))
}

// openTxnsTimeout bounds the read of a rolled-back cutover's open
// transactions: the rollback waits for it.
const openTxnsTimeout = 2 * time.Second

// openTxns names topic's open transactions on the source for a cutover
// that is about to roll back ("" for none, or when they cannot be read):
// an open transaction holds the copy at its first offset, below the end
// offsets, until it ends, so one open now is what held this cutover.
func (cp *ControlPlane) openTxns(ctx context.Context, topic string) string {
	if cp.cfg.txns == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, openTxnsTimeout)
	defer cancel()
	ws, err := cp.cfg.txns.Writers(ctx, topic, time.Time{})
	if err != nil {
		cp.log.Debug("reading the source's open transactions for a rollback", "topic", topic, "err", err)
		return ""
	}
	if len(ws) == 0 {
		return ""
	}
	return "open transactions on the source topic hold the copy at their first offset, below the end offsets " +
		"(it reads committed data only): " + describeWriters(ws, cp.now()) +
		"; they end when their producers commit or abort, or at their transaction timeout"
}
