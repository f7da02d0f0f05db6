package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
)

// The agent must forward each record batch's bytes unchanged (docs/design.md §7).
// A request filter records the CRC-32C of every v2 record batch in every
// produce request as it arrives from the client; the test then reads the
// batches the source stored, raw, and compares.

// Record batch v2 header offsets.
const (
	batchLengthAt = 8  // int32, bytes after it
	batchMagicAt  = 16 // int8
	batchCRCAt    = 17 // uint32, CRC-32C of bytes 21..end
	batchAttrsAt  = 21 // int16: the CRC covers from here
	batchLastDAt  = 23 // int32 last offset delta
	batchHeadLen  = 61
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// batchHead is what the checks need of one record batch.
type batchHead struct {
	baseOffset int64
	lastDelta  int32
	crc        uint32
}

// walkBatches splits concatenated v2 record batches. A trailing partial
// batch (a fetch cut by its byte limit) ends the walk without error when
// partialOK; anything else malformed is an error.
func walkBatches(b []byte, partialOK bool, fn func(batchHead)) error {
	for len(b) > 0 {
		if len(b) < batchLengthAt+4 {
			if partialOK {
				return nil
			}
			return fmt.Errorf("%d trailing bytes, too few for a batch header", len(b))
		}
		total := batchLengthAt + 4 + int(int32(binary.BigEndian.Uint32(b[batchLengthAt:])))
		if total > len(b) && partialOK {
			return nil
		}
		if total < batchHeadLen || total > len(b) {
			return fmt.Errorf("batch of %d bytes in %d", total, len(b))
		}
		raw := b[:total]
		if magic := raw[batchMagicAt]; magic != 2 {
			return fmt.Errorf("batch with magic %d, want 2", magic)
		}
		h := batchHead{
			baseOffset: int64(binary.BigEndian.Uint64(raw)),
			lastDelta:  int32(binary.BigEndian.Uint32(raw[batchLastDAt:])),
			crc:        binary.BigEndian.Uint32(raw[batchCRCAt:]),
		}
		if got := crc32.Checksum(raw[batchAttrsAt:], castagnoli); got != h.crc {
			return fmt.Errorf("batch at offset %d has CRC %08x in its header but %08x over its bytes", h.baseOffset, h.crc, got)
		}
		fn(h)
		b = b[total:]
	}
	return nil
}

// crcRecorder is a filter.Factory whose filters record, per topic and
// partition, how many times each batch CRC arrived in a produce request
// and how many times the agent answered that partition with success.
type crcRecorder struct {
	mu  sync.Mutex
	got map[string]map[int32]map[uint32]*crcCount
	bad map[string][]string // topic -> malformed batches
	// codes counts the agent's answers per topic, partition and error
	// code: what a client that gave up on a partition was told.
	codes map[string]map[int32]map[int16]int
}

// crcCount is what happened to one batch (by CRC) of one partition.
type crcCount struct {
	arrived int // in produce requests from the client
	acked   int // answered without error
}

func newCRCRecorder() *crcRecorder {
	return &crcRecorder{got: map[string]map[int32]map[uint32]*crcCount{}, bad: map[string][]string{},
		codes: map[string]map[int32]map[int16]int{}}
}

var _ filter.Factory = (*crcRecorder)(nil)

func (r *crcRecorder) Name() string            { return "e2e-batch-crc-recorder" }
func (r *crcRecorder) New(filter.ConnInfo) any { return crcFilter{r} }

// each calls fn for every batch CRC of pr's partitions that ok accepts.
// r.mu must be held.
func (r *crcRecorder) each(pr *kmsg.ProduceRequest, ok func(topic string, partition int32) bool, fn func(*crcCount)) {
	for _, t := range pr.Topics {
		ps := r.got[t.Topic]
		if ps == nil {
			ps = map[int32]map[uint32]*crcCount{}
			r.got[t.Topic] = ps
		}
		for _, p := range t.Partitions {
			if !ok(t.Topic, p.Partition) {
				continue
			}
			crcs := ps[p.Partition]
			if crcs == nil {
				crcs = map[uint32]*crcCount{}
				ps[p.Partition] = crcs
			}
			// Malformed batches are reported once, on the way in.
			_ = walkBatches(p.Records, false, func(h batchHead) {
				c := crcs[h.crc]
				if c == nil {
					c = &crcCount{}
					crcs[h.crc] = c
				}
				fn(c)
			})
		}
	}
}

func (r *crcRecorder) arrived(pr *kmsg.ProduceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range pr.Topics {
		for _, p := range t.Partitions {
			if err := walkBatches(p.Records, false, func(batchHead) {}); err != nil {
				r.bad[t.Topic] = append(r.bad[t.Topic], fmt.Sprintf("partition %d: %v", p.Partition, err))
			}
		}
	}
	r.each(pr, func(string, int32) bool { return true }, func(c *crcCount) { c.arrived++ })
}

func (r *crcRecorder) answered(pr *kmsg.ProduceRequest, resp *kmsg.ProduceResponse) {
	ok := map[tp]bool{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 {
				ok[tp{t.Topic, p.Partition}] = true
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range resp.Topics {
		ps := r.codes[t.Topic]
		if ps == nil {
			ps = map[int32]map[int16]int{}
			r.codes[t.Topic] = ps
		}
		for _, p := range t.Partitions {
			if ps[p.Partition] == nil {
				ps[p.Partition] = map[int16]int{}
			}
			ps[p.Partition][p.ErrorCode]++
		}
	}
	r.each(pr, func(topic string, p int32) bool { return ok[tp{topic, p}] }, func(c *crcCount) { c.acked++ })
}

// answers says how the agent answered each partition of topic, by error
// code: "partition 0: 812 ok, 3 NOT_LEADER_OR_FOLLOWER; ...".
func (r *crcRecorder) answers(topic string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, p := range slices.Sorted(maps.Keys(r.codes[topic])) {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "partition %d:", p)
		codes := r.codes[topic][p]
		for i, c := range slices.Sorted(maps.Keys(codes)) {
			name := "ok"
			if err := kerr.ErrorForCode(c); err != nil {
				name = err.Error()
			}
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, " %d %s", codes[c], name)
		}
	}
	if b.Len() == 0 {
		return "no produce answered"
	}
	return b.String()
}

type tp struct {
	topic     string
	partition int32
}

// snapshot returns a copy of what the agent saw of topic.
func (r *crcRecorder) snapshot(topic string) (map[int32]map[uint32]crcCount, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[int32]map[uint32]crcCount{}
	for p, crcs := range r.got[topic] {
		m := make(map[uint32]crcCount, len(crcs))
		for c, n := range crcs {
			m[c] = *n
		}
		out[p] = m
	}
	return out, append([]string(nil), r.bad[topic]...)
}

type crcFilter struct{ r *crcRecorder }

func (f crcFilter) OnRequest(_ context.Context, x *filter.Exchange) filter.Status {
	if pr, ok := x.Req.(*kmsg.ProduceRequest); ok {
		f.r.arrived(pr)
	}
	return filter.Continue
}

func (f crcFilter) OnResponse(_ context.Context, x *filter.Exchange) filter.Status {
	pr, ok := x.Req.(*kmsg.ProduceRequest)
	resp, ok2 := x.Resp.(*kmsg.ProduceResponse)
	if ok && ok2 && x.Err == nil {
		f.r.answered(pr, resp)
	}
	return filter.Continue
}

// storedBatches reads every batch of topic from the source's partition
// leaders with raw Fetch requests (a consumer would hide the CRCs) and
// returns each partition's batch CRCs in offset order. opts are added to its
// client's (a secured source's TLS and SASL).
func storedBatches(ctx context.Context, bootstrap, topic string, opts ...kgo.Opt) (map[int32][]uint32, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(bootstrap, ",")...), kgo.ClientID("baton-e2e-raw-fetch")}, opts...)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	type part struct {
		leader int32
		hwm    int64
		next   int64
	}
	var topicID [16]byte
	parts := map[int32]*part{}
	refresh := func() error {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		if len(resp.Topics) != 1 {
			return fmt.Errorf("metadata answered %d topics for 1", len(resp.Topics))
		}
		if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
			return fmt.Errorf("metadata for %s: %w", topic, err)
		}
		topicID = resp.Topics[0].TopicID
		for _, p := range resp.Topics[0].Partitions {
			if parts[p.Partition] == nil {
				parts[p.Partition] = &part{hwm: -1}
			}
			parts[p.Partition].leader = p.Leader
		}
		return nil
	}
	if err := refresh(); err != nil {
		return nil, err
	}
	out := map[int32][]uint32{}
	for pid, p := range parts {
		for p.hwm < 0 || p.next < p.hwm {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("partition %d: read up to offset %d of %d: %w", pid, p.next, p.hwm, err)
			}
			req := kmsg.NewPtrFetchRequest()
			req.ReplicaID = -1
			req.MaxWaitMillis = 100
			req.MinBytes = 1
			req.MaxBytes = 32 << 20
			req.SessionEpoch = -1
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = topic, topicID
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = pid, p.next, 16<<20
			rp.CurrentLeaderEpoch, rp.LogStartOffset = -1, -1
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctx, cl.Broker(int(p.leader)))
			if err == nil && resp.ErrorCode != 0 {
				err = kerr.ErrorForCode(resp.ErrorCode)
			}
			if err == nil && (len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1) {
				err = fmt.Errorf("fetch answered %d topics for 1", len(resp.Topics))
			}
			if err != nil {
				return nil, fmt.Errorf("fetching %s/%d at %d from broker %d: %w", topic, pid, p.next, p.leader, err)
			}
			rp2 := resp.Topics[0].Partitions[0]
			if code := rp2.ErrorCode; code != 0 {
				var ke *kerr.Error
				if err := kerr.ErrorForCode(code); errors.As(err, &ke) && ke.Retriable {
					if err := refresh(); err != nil {
						return nil, err
					}
					continue
				}
				return nil, fmt.Errorf("fetching %s/%d at %d: %w", topic, pid, p.next, kerr.ErrorForCode(code))
			}
			p.hwm = rp2.HighWatermark
			progressed := false
			err = walkBatches(rp2.RecordBatches, true, func(h batchHead) {
				end := h.baseOffset + int64(h.lastDelta) + 1
				if end <= p.next {
					return // a batch the fetch offset fell inside, already counted
				}
				out[pid] = append(out[pid], h.crc)
				p.next = end
				progressed = true
			})
			if err != nil {
				return nil, fmt.Errorf("%s/%d at %d: stored batch: %w", topic, pid, p.next, err)
			}
			if !progressed && p.next < p.hwm {
				return nil, fmt.Errorf("%s/%d: fetch at %d (high watermark %d) returned no whole batch", topic, pid, p.next, p.hwm)
			}
		}
	}
	return out, nil
}

// checkCRCs fails t unless the batches the source stored for topic are
// batches that arrived at the agent, unchanged, and every batch the agent
// acknowledged is stored (compareCRCs).
func checkCRCs(t *testing.T, ctx context.Context, e *env, topic string) {
	t.Helper()
	stored, err := storedBatches(ctx, e.source, topic, e.sourceOpts...)
	if err != nil {
		t.Fatalf("reading raw batches of %s from the %s source: %v", topic, e.name, err)
	}
	seen, bad := ingress.snapshot(topic)
	var nArrived, nAcked, nStored int
	for _, crcs := range seen {
		for _, c := range crcs {
			nArrived += c.arrived
			nAcked += c.acked
		}
	}
	for _, crcs := range stored {
		nStored += len(crcs)
	}
	if nArrived == 0 {
		t.Fatalf("no record batch of %s arrived at the agent: the client did not produce through it", topic)
	}
	problems, nFailed := compareCRCs(seen, stored)
	for _, b := range bad {
		problems = append(problems, "malformed batch at the agent: "+b)
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		if len(problems) > 20 {
			problems = append(problems[:20], fmt.Sprintf("... and %d more", len(problems)-20))
		}
		t.Fatalf("batch CRCs of %s, client to agent vs stored in the %s source (%d batches arrived, %d acked, %d stored):\n  %s",
			topic, e.name, nArrived, nAcked, nStored, strings.Join(problems, "\n  "))
	}
	t.Logf("%s: %d batches arrived at the agent, %d acked, %d stored, same bytes; %d answered with an error and not stored (resent in other batches)",
		topic, nArrived, nAcked, nStored, nFailed)
}

// compareCRCs lists how stored (per partition, a CRC per stored batch)
// differs from what the agent saw (per partition and CRC, how many times
// the batch arrived and was acknowledged):
//
//   - every stored CRC arrived, at least as many times as it is stored (a
//     non-idempotent retry may be stored twice, but only if it arrived
//     twice): else the agent rewrote bytes, or someone else wrote;
//   - every CRC the agent acknowledged is stored: else it acked a write
//     that is not there, or not as sent.
//
// A batch answered with an error need not be stored: the client resends
// its records, and may re-batch them (sarama does), so the resend has
// other bytes; Verify checks that every record is where it was acked.
// unstored counts those.
func compareCRCs(seen map[int32]map[uint32]crcCount, stored map[int32][]uint32) (problems []string, unstored int) {
	pids := map[int32]bool{}
	for p := range stored {
		pids[p] = true
	}
	for p := range seen {
		pids[p] = true
	}
	for p := range pids {
		count := map[uint32]int{}
		for _, c := range stored[p] {
			count[c]++
		}
		for c, n := range count {
			switch in := seen[p][c].arrived; {
			case in == 0:
				problems = append(problems, fmt.Sprintf("partition %d: stored batch CRC %08x (%d times) never arrived at the agent: bytes rewritten, or written by someone else", p, c, n))
			case n > in:
				problems = append(problems, fmt.Sprintf("partition %d: batch CRC %08x stored %d times but arrived %d times", p, c, n, in))
			}
		}
		for c, got := range seen[p] {
			switch {
			case count[c] > 0:
			case got.acked > 0:
				problems = append(problems, fmt.Sprintf("partition %d: batch CRC %08x acked by the agent %d times (arrived %d) and not stored: lost or rewritten", p, c, got.acked, got.arrived))
			default:
				unstored++
			}
		}
	}
	return problems, unstored
}
