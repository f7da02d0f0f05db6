package replicator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// VerifyStall is how long Verify waits for progress on a cluster (a record
// batch decoded or a record returned) before it gives up on it.
const VerifyStall = 30 * time.Second

// verifyPoll bounds one PollFetches of Verify's reader, so that it checks
// for progress at least this often.
const verifyPoll = time.Second

// Mismatch is one difference Verify found.
type Mismatch struct {
	Partition         int32
	SourceOffset      int64 // -1 for a record only D has
	DestinationOffset int64 // -1 for a record only S has
	What              string
}

func (m Mismatch) String() string {
	return fmt.Sprintf("partition %d source offset %d destination offset %d: %s", m.Partition, m.SourceOffset, m.DestinationOffset, m.What)
}

// VerifiedPartition is what Verify found for one partition.
type VerifiedPartition struct {
	Partition int32
	Records   int // committed records on S
	Parity    Parity
}

// VerifyReport is the result of Verify.
type VerifyReport struct {
	Topic      string
	Partitions []VerifiedPartition
	// Mismatches lists up to MaxListed differences; Count has them all.
	Mismatches []Mismatch
	Count      int
}

// MaxListed bounds VerifyReport.Mismatches.
const MaxListed = 1000

// Verify compares topic on S and D record by record: every committed source
// record (read_committed) must be on D at its offset, exactly or through
// the offset map in mapTopic, with the same key, value, headers and
// timestamp, and D must hold nothing else. Run it when the replicator has
// caught up (or is stopped); records still being copied show as missing.
// opts add client options (TLS, SASL) for both clusters; VerifyWithOpts
// takes them per cluster.
func Verify(ctx context.Context, source, destination []string, topic, mapTopic string, opts ...kgo.Opt) (*VerifyReport, error) {
	return VerifyWithOpts(ctx, source, destination, topic, mapTopic, opts, opts)
}

// VerifyWithOpts is Verify with client options (TLS, SASL) for the source
// (srcOpts) and the destination (dstOpts) apart.
func VerifyWithOpts(ctx context.Context, source, destination []string, topic, mapTopic string, srcOpts, dstOpts []kgo.Opt) (*VerifyReport, error) {
	maps, err := LoadOffsetMaps(ctx, destination, mapTopic, dstOpts...)
	if err != nil {
		return nil, err
	}
	m := maps[topic]
	srcRecs, err := readAll(ctx, source, topic, true, srcOpts, &stallWatch{limit: VerifyStall})
	if err != nil {
		return nil, fmt.Errorf("reading the source: %w", err)
	}
	dstRecs, err := readAll(ctx, destination, topic, false, dstOpts, &stallWatch{limit: VerifyStall})
	if err != nil {
		return nil, fmt.Errorf("reading the destination: %w", err)
	}
	rep := &VerifyReport{Topic: topic}
	add := func(mm Mismatch) {
		rep.Count++
		if len(rep.Mismatches) < MaxListed {
			rep.Mismatches = append(rep.Mismatches, mm)
		}
	}
	if len(srcRecs) != len(dstRecs) {
		add(Mismatch{Partition: -1, SourceOffset: -1, DestinationOffset: -1,
			What: fmt.Sprintf("%d partitions on the source, %d on the destination", len(srcRecs), len(dstRecs))})
	}
	for p := range int32(len(srcRecs)) {
		s := srcRecs[p]
		var d []*kgo.Record
		if int(p) < len(dstRecs) {
			d = dstRecs[p]
		}
		vp := VerifiedPartition{Partition: p, Records: len(s), Parity: ParityExact}
		if !m.Exact(p) {
			vp.Parity = ParityMapped
		}
		rep.Partitions = append(rep.Partitions, vp)
		for i := range max(len(s), len(d)) {
			switch {
			case i >= len(d):
				add(Mismatch{Partition: p, SourceOffset: s[i].Offset, DestinationOffset: -1, What: "missing on the destination"})
				continue
			case i >= len(s):
				add(Mismatch{Partition: p, SourceOffset: -1, DestinationOffset: d[i].Offset, What: "extra record on the destination"})
				continue
			}
			if want := m.ToDestination(p, s[i].Offset); d[i].Offset != want {
				add(Mismatch{Partition: p, SourceOffset: s[i].Offset, DestinationOffset: d[i].Offset,
					What: fmt.Sprintf("offset: want destination offset %d (%s parity)", want, vp.Parity)})
			}
			if what := diffRecord(s[i], d[i]); what != "" {
				add(Mismatch{Partition: p, SourceOffset: s[i].Offset, DestinationOffset: d[i].Offset, What: what})
			}
		}
	}
	return rep, nil
}

func diffRecord(a, b *kgo.Record) string {
	switch {
	case !bytes.Equal(a.Key, b.Key) || (a.Key == nil) != (b.Key == nil):
		return fmt.Sprintf("key %q != %q", a.Key, b.Key)
	case !bytes.Equal(a.Value, b.Value) || (a.Value == nil) != (b.Value == nil):
		return fmt.Sprintf("value differs (%d bytes, null=%v vs %d bytes, null=%v)", len(a.Value), a.Value == nil, len(b.Value), b.Value == nil)
	case !a.Timestamp.Equal(b.Timestamp):
		return fmt.Sprintf("timestamp %v != %v", a.Timestamp.UnixMilli(), b.Timestamp.UnixMilli())
	case a.Attrs.TimestampType() != b.Attrs.TimestampType():
		return fmt.Sprintf("timestamp type %d != %d", a.Attrs.TimestampType(), b.Attrs.TimestampType())
	case len(a.Headers) != len(b.Headers):
		return fmt.Sprintf("%d headers != %d", len(a.Headers), len(b.Headers))
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || !bytes.Equal(a.Headers[i].Value, b.Headers[i].Value) {
			return fmt.Sprintf("header %d: %q=%q != %q=%q", i, a.Headers[i].Key, a.Headers[i].Value, b.Headers[i].Key, b.Headers[i].Value)
		}
	}
	return ""
}

// readAll reads every partition of topic from the start until each has
// reached its end offset (the last stable offset when committed). Control
// records are read, so that a log ending in a transaction marker reaches its
// end, and left out of the result. It gives up when stall sees no progress
// for its limit; stall MUST be used by one readAll only.
func readAll(ctx context.Context, seeds []string, topic string, committed bool, opts []kgo.Opt, stall *stallWatch) ([][]*kgo.Record, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		return nil, err
	}
	adm := kadm.NewClient(cl)
	var ends kadm.ListedOffsets
	if committed {
		ends, err = adm.ListCommittedOffsets(ctx, topic)
	} else {
		ends, err = adm.ListEndOffsets(ctx, topic)
	}
	cl.Close()
	if err != nil {
		return nil, err
	}
	if err := ends.Error(); err != nil {
		return nil, err
	}
	n := 0
	want := map[int32]kgo.Offset{}
	remaining := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		n = max(n, int(o.Partition)+1)
		want[o.Partition] = kgo.NewOffset().AtStart()
		if o.Offset > 0 {
			remaining[o.Partition] = o.Offset
		}
	})
	out := make([][]*kgo.Record, n)
	if len(remaining) == 0 {
		return out, nil
	}
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	// franz-go returns a fetch only once it has decoded all of it, which
	// for many small compressed batches can take longer than stall (lz4
	// under the race detector: milliseconds per batch). A decoded batch is
	// progress as much as a returned record is.
	stall.mark()
	cl, err = kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: want}), kgo.WithHooks(stall)}, opts...)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	for len(remaining) > 0 {
		pctx, cancel := context.WithTimeout(ctx, min(stall.limit, verifyPoll))
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if fs.IsClientClosed() {
			break
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				ferr = err
			}
		})
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			stall.mark()
			if !r.Attrs.IsControl() {
				out[r.Partition] = append(out[r.Partition], r)
			}
			if end, ok := remaining[r.Partition]; ok && r.Offset+1 >= end {
				delete(remaining, r.Partition)
			}
		})
		if len(remaining) > 0 && stall.since() > stall.limit {
			return nil, fmt.Errorf("no record batch read for %v with partitions %v not read to their end", stall.limit, remaining)
		}
	}
	for _, rs := range out {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Offset < rs[j].Offset })
	}
	return out, nil
}

// stallWatch is a kgo hook noting when the client last decoded a record
// batch (or the reader took a record), so that readAll can tell a slow read
// from a stalled one.
type stallWatch struct {
	limit time.Duration    // no progress for this long is a stall
	now   func() time.Time // nil: time.Now; tests drive their own clock
	last  atomic.Int64     // unix nanoseconds of the last progress
}

func (w *stallWatch) clock() time.Time {
	if w.now != nil {
		return w.now()
	}
	return time.Now()
}

func (w *stallWatch) mark() { w.last.Store(w.clock().UnixNano()) }

func (w *stallWatch) since() time.Duration { return w.clock().Sub(time.Unix(0, w.last.Load())) }

// OnFetchBatchRead implements kgo.HookFetchBatchRead.
func (w *stallWatch) OnFetchBatchRead(kgo.BrokerMetadata, string, int32, kgo.FetchBatchMetrics) {
	w.mark()
}

var _ kgo.HookFetchBatchRead = (*stallWatch)(nil)
