package txngate

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestWritersOf: which of a topic's producers the source describes are
// its transactional writers. Real Kafka describes every producer with
// state on a partition (idempotent ones too) with its last write; kfake
// only those in a transaction.
func TestWritersOf(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_000_000_000)
	since := now.Add(-time.Minute)
	recent, old := now.Add(-10*time.Second).UnixMilli(), now.Add(-time.Hour).UnixMilli()
	prod := func(pid int64, p int32, last, txnStart int64) kadm.DescribedProducer {
		return kadm.DescribedProducer{Topic: "t", Partition: p, ProducerID: pid, LastTimestamp: last, CurrentTxnStartOffset: txnStart}
	}
	named := func(pid int64, id, state string) kadm.ListedTransaction {
		return kadm.ListedTransaction{TxnID: id, ProducerID: pid, State: state}
	}
	cases := []struct {
		name      string
		producers []kadm.DescribedProducer
		named     []kadm.ListedTransaction
		txns      []kadm.DescribedTransaction
		since     time.Time
		want      map[int64]string          // producer id: transactional id
		open      map[int64]map[int32]int64 // producer id: its open partitions
	}{
		{name: "open, named", producers: []kadm.DescribedProducer{prod(5, 0, recent, 12), prod(5, 1, recent, 3)},
			named: []kadm.ListedTransaction{named(5, "app", "Ongoing")}, since: since,
			want: map[int64]string{5: "app"}, open: map[int64]map[int32]int64{5: {0: 12, 1: 3}}},
		{name: "open, nobody names it (hanging, or not ours to describe)", producers: []kadm.DescribedProducer{prod(6, 0, old, 40)}, since: since,
			want: map[int64]string{6: ""}, open: map[int64]map[int32]int64{6: {0: 40}}},
		{name: "recent, transactional, none open", producers: []kadm.DescribedProducer{prod(5, 0, recent, -1)},
			named: []kadm.ListedTransaction{named(5, "app", "CompleteCommit")}, since: since, want: map[int64]string{5: "app"}},
		{name: "recent, idempotent", producers: []kadm.DescribedProducer{prod(7, 0, recent, -1)}, since: since},
		{name: "old, transactional, none open", producers: []kadm.DescribedProducer{prod(5, 0, old, -1)},
			named: []kadm.ListedTransaction{named(5, "app", "CompleteCommit")}, since: since},
		{name: "recent, transactional, but open only asked", producers: []kadm.DescribedProducer{prod(5, 0, recent, -1)},
			named: []kadm.ListedTransaction{named(5, "app", "CompleteCommit")}},
		{name: "an ongoing transaction that added a partition, nothing written yet",
			txns: []kadm.DescribedTransaction{{TxnID: "early", ProducerID: 9, State: "Ongoing", Topics: kadm.TopicsSet{"t": {2: {}}}}},
			want: map[int64]string{9: "early"}, open: map[int64]map[int32]int64{9: {2: -1}}},
		{name: "an ongoing transaction of another topic",
			txns: []kadm.DescribedTransaction{{TxnID: "else", ProducerID: 9, State: "Ongoing", Topics: kadm.TopicsSet{"u": {0: {}}}}}},
		{name: "a finished transaction that still lists the topic",
			txns: []kadm.DescribedTransaction{{TxnID: "done", ProducerID: 9, State: "CompleteAbort", Topics: kadm.TopicsSet{"t": {0: {}}}}}},
		{name: "written and added", producers: []kadm.DescribedProducer{prod(5, 0, recent, 12)},
			named: []kadm.ListedTransaction{named(5, "app", "Ongoing")},
			txns:  []kadm.DescribedTransaction{{TxnID: "app", ProducerID: 5, State: "Ongoing", Topics: kadm.TopicsSet{"t": {0: {}, 1: {}}}}},
			since: since, want: map[int64]string{5: "app"}, open: map[int64]map[int32]int64{5: {0: 12, 1: -1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			lt := kadm.ListedTransactions{}
			for _, l := range c.named {
				lt[l.TxnID] = l
			}
			dt := kadm.DescribedTransactions{}
			for _, d := range c.txns {
				dt[d.TxnID] = d
			}
			ws := writersOf("t", c.producers, lt, dt, c.since)
			got := map[int64]string{}
			for _, w := range ws {
				got[w.ProducerID] = w.TransactionalID
				if want := c.open[w.ProducerID]; !maps.Equal(w.Open, want) && (len(w.Open) > 0 || len(want) > 0) {
					t.Errorf("producer %d open %v, want %v", w.ProducerID, w.Open, want)
				}
				if d := w.describe(now); (w.TransactionalID != "" && !strings.Contains(d, fmt.Sprintf("%q", w.TransactionalID))) ||
					!strings.Contains(d, fmt.Sprint(w.ProducerID)) {
					t.Errorf("described as %q: names neither its transactional id nor its producer id", d)
				}
			}
			if !maps.Equal(got, c.want) && (len(got) > 0 || len(c.want) > 0) {
				t.Errorf("writers %v, want %v", got, c.want)
			}
		})
	}
}

// readerFunc is a Reader answering with a function.
type readerFunc func(ctx context.Context, topic string, since time.Time) ([]Writer, error)

func (f readerFunc) Writers(ctx context.Context, topic string, since time.Time) ([]Writer, error) {
	return f(ctx, topic, since)
}

// TestGate: what the gate refuses and what a rollback names, for what the
// source answers; the gate asks for writes within its window, the
// rollback for open transactions only.
func TestGate(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	open := Writer{TransactionalID: "app", ProducerID: 5, State: "Ongoing", Open: map[int32]int64{0: 12}}
	cases := []struct {
		name        string
		ws          []Writer
		err         error
		check, held []string // what each says; nil: ""
	}{
		{name: "none"},
		{name: "open", ws: []Writer{open}, check: []string{`1 transactional producer writes`, `transactional id "app"`, "within 5m0s"},
			held: []string{"open transactions on the source topic hold the copy", `transactional id "app"`}},
		{name: "two", ws: []Writer{open, {ProducerID: 6, Open: map[int32]int64{1: -1}}},
			check: []string{"2 transactional producers write", "producer 6"}, held: []string{"producer 6"}},
		{name: "unreadable", err: fmt.Errorf("%w: DescribeProducers of t: refused", ErrRead),
			check: []string{"cannot tell whether a transactional producer writes the topic", "refused"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var asked []time.Time
			g := &Gate{Window: DefaultWindow, Now: func() time.Time { return now }, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Reader: readerFunc(func(_ context.Context, topic string, since time.Time) ([]Writer, error) {
					if topic != "t" {
						t.Errorf("asked about %q", topic)
					}
					asked = append(asked, since)
					return c.ws, c.err
				})}
			check := g.Check(context.Background(), "t")
			held := g.HeldBy(context.Background(), "t")
			for _, r := range []struct {
				what, got string
				want      []string
			}{{"check", check, c.check}, {"held", held, c.held}} {
				what, got, want := r.what, r.got, r.want
				if (got == "") != (len(want) == 0) {
					t.Errorf("%s: %q, want it to say %q", what, got, want)
				}
				for _, w := range want {
					if !strings.Contains(got, w) {
						t.Errorf("%s: %q does not say %q", what, got, w)
					}
				}
			}
			if len(asked) != 2 || !asked[0].Equal(now.Add(-DefaultWindow)) || !asked[1].IsZero() {
				t.Errorf("asked since %v, want the window's start, then open transactions only", asked)
			}
		})
	}
	if g := (&Gate{Window: DefaultWindow}); g.On() || g.HeldBy(context.Background(), "t") != "" {
		t.Error("a gate with no Reader is on, or names transactions")
	}
	if g := (&Gate{Reader: readerFunc(nil)}); g.On() {
		t.Error("a gate with no window is on")
	}
}
