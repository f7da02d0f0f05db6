package clients

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// maxProblems bounds how many problems a Verify error lists.
const maxProblems = 20

// Verify reads topic back from bootstrap with a franz-go consumer and checks
// the acks one producer run reported for cfg against what the topic holds:
//
//   - every record seq in [0, cfg.Records) has exactly one ack, and no ack
//     has a seq outside that range;
//   - no ack failed (Err is empty);
//   - each ack's Key is Key(cfg.KeyPrefix, seq), and the record at the ack's
//     partition and offset has that key and the value Value(cfg.KeyPrefix,
//     seq);
//   - with cfg.Headers, that record has the header baton-seq=<seq> and a
//     non-empty baton-client header, the same on every record of the run;
//   - with cfg.Idempotent, no record of the run is in the topic twice;
//   - the run's records sit in batches compressed with cfg.Compression or,
//     where a client found compression not worth it, uncompressed; with a
//     codec, at least one batch uses it.
//
// Records of other runs (keys without the prefix) are ignored, so runs can
// share a topic when their prefixes differ. Verify reads each partition
// from its start offset to the end offset it lists first, so produce before
// calling it. The error lists the first problems found and how many there
// are. opts are added to the consumer's (a secured cluster's TLS and SASL:
// Security.KgoOpts).
func Verify(ctx context.Context, bootstrap, topic string, acks []Ack, cfg ProduceConfig, opts ...kgo.Opt) error {
	return verify(ctx, bootstrap, topic, "", acks, cfg, opts...)
}

// verify is Verify that, when client is set, also wants baton-client to be
// exactly client.
func verify(ctx context.Context, bootstrap, topic, client string, acks []Ack, cfg ProduceConfig, opts ...kgo.Opt) error {
	if cfg.Records < 1 {
		return fmt.Errorf("clients: verify: cfg.Records must be at least 1, got %d", cfg.Records)
	}
	recs, err := ReadTopic(ctx, bootstrap, topic, opts...)
	if err != nil {
		return fmt.Errorf("clients: verify: reading %s back: %w", topic, err)
	}

	var problems []string
	total := 0
	problem := func(format string, args ...any) {
		total++
		if len(problems) < maxProblems {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}

	// Acks: one per record, all successful, keys as sent.
	bySeq := make(map[int][]Ack, len(acks))
	for _, a := range acks {
		if a.Seq < 0 || a.Seq >= cfg.Records {
			problem("ack for seq %d outside [0, %d)", a.Seq, cfg.Records)
			continue
		}
		bySeq[a.Seq] = append(bySeq[a.Seq], a)
	}
	missing := 0
	for seq := 0; seq < cfg.Records; seq++ {
		switch n := len(bySeq[seq]); {
		case n == 0:
			missing++
			if missing <= 5 {
				problem("record %d never acknowledged", seq)
			} else {
				total++
			}
		case n > 1:
			problem("record %d acknowledged %d times: %s", seq, n, describeAcks(bySeq[seq]))
		}
	}

	// Where each record of this run sits in the topic.
	where := make(map[int][]Position)
	for at, r := range recs {
		seq, ok := seqOfKey(cfg.KeyPrefix, string(r.Key))
		if ok {
			where[seq] = append(where[seq], at)
		}
	}

	var clientHeader string
	codecs := make(map[uint8]int) // compression type of the run's acked records
	for seq := 0; seq < cfg.Records; seq++ {
		for _, a := range bySeq[seq] {
			if a.Err != "" {
				problem("record %d failed: %s", seq, a.Err)
				continue
			}
			want := Key(cfg.KeyPrefix, seq)
			if a.Key != want {
				problem("record %d acked with key %q, want %q", seq, a.Key, want)
			}
			at := Position{a.Partition, a.Offset}
			r, ok := recs[at]
			if !ok {
				problem("record %d acked at %s, where the topic has no record (it is at %s)", seq, at, describeTPOs(where[seq]))
				continue
			}
			if string(r.Key) != want {
				problem("record %d acked at %s, which holds key %q (key %q is at %s)", seq, at, r.Key, want, describeTPOs(where[seq]))
				continue
			}
			codecs[r.Attrs.CompressionType()]++
			if v := Value(cfg.KeyPrefix, seq); string(r.Value) != v {
				problem("record %d at %s has value %q, want %q", seq, at, r.Value, v)
			}
			if cfg.Headers {
				hs := headerValues(r)
				if got := hs["baton-seq"]; len(got) != 1 || got[0] != strconv.Itoa(seq) {
					problem("record %d at %s has baton-seq headers %q, want [%q]", seq, at, got, strconv.Itoa(seq))
				}
				got := hs["baton-client"]
				switch {
				case len(got) != 1 || got[0] == "":
					problem("record %d at %s has baton-client headers %q, want one non-empty", seq, at, got)
				case client != "" && got[0] != client:
					problem("record %d at %s has baton-client %q, want %q", seq, at, got[0], client)
				case clientHeader == "":
					clientHeader = got[0]
				case got[0] != clientHeader:
					problem("record %d at %s has baton-client %q, earlier records %q", seq, at, got[0], clientHeader)
				}
			}
		}
	}
	want, known := compressionTypes[codecName(cfg.Compression)]
	if !known {
		problem("unknown compression %q in cfg", cfg.Compression)
	}
	for ct, n := range codecs {
		if ct != want && ct != 0 {
			problem("%d records in batches compressed with codec %d, want %s (%d) or none", n, ct, codecName(cfg.Compression), want)
		}
	}
	if want != 0 && codecs[want] == 0 && len(codecs) > 0 {
		problem("no record in a batch compressed with %s: %v (codec: records)", codecName(cfg.Compression), codecs)
	}
	if cfg.Idempotent {
		for seq := 0; seq < cfg.Records; seq++ {
			if at := where[seq]; len(at) > 1 {
				problem("idempotent run wrote record %d %d times: at %s", seq, len(at), describeTPOs(at))
			}
		}
	}
	if total == 0 {
		return nil
	}
	return fmt.Errorf("clients: verify %s (%d records, %d acks): %d problems, first:\n  %s",
		topic, cfg.Records, len(acks), total, strings.Join(problems, "\n  "))
}

// compressionTypes maps codec names to the record batch attribute's
// compression type.
var compressionTypes = map[string]uint8{"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

// Position is a record's partition and offset.
type Position struct {
	Partition int32
	Offset    int64
}

func (t Position) String() string { return fmt.Sprintf("%d/%d", t.Partition, t.Offset) }

func describeTPOs(ts []Position) string {
	if len(ts) == 0 {
		return "nowhere"
	}
	sort.Slice(ts, func(i, j int) bool {
		return ts[i].Partition < ts[j].Partition || ts[i].Partition == ts[j].Partition && ts[i].Offset < ts[j].Offset
	})
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.String()
	}
	return strings.Join(s, ", ")
}

func describeAcks(as []Ack) string {
	s := make([]string, len(as))
	for i, a := range as {
		if a.Err != "" {
			s[i] = "failed: " + a.Err
		} else {
			s[i] = Position{a.Partition, a.Offset}.String()
		}
	}
	return strings.Join(s, ", ")
}

// seqOfKey parses a key Key(prefix, seq) back to seq.
func seqOfKey(prefix, key string) (int, bool) {
	rest, ok := strings.CutPrefix(key, prefix+"-")
	if !ok || rest == "" {
		return 0, false
	}
	seq, err := strconv.Atoi(rest)
	if err != nil || seq < 0 || strconv.Itoa(seq) != rest {
		return 0, false
	}
	return seq, true
}

func headerValues(r *kgo.Record) map[string][]string {
	hs := make(map[string][]string, len(r.Headers))
	for _, h := range r.Headers {
		hs[h.Key] = append(hs[h.Key], string(h.Value))
	}
	return hs
}

// ReadTopic reads every partition of topic from its start offset to the
// end offset listed when it begins. opts are added to its clients' (TLS,
// SASL).
func ReadTopic(ctx context.Context, bootstrap, topic string, opts ...kgo.Opt) (map[Position]*kgo.Record, error) {
	seeds := bootstrapList(bootstrap)
	adm, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ClientID("baton-verify")}, opts...)...)
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	ac := kadm.NewClient(adm)
	starts, ends, err := listOffsets(ctx, ac, topic)
	if err != nil {
		return nil, err
	}
	if _, ok := ends[topic]; !ok {
		return nil, fmt.Errorf("topic %s not found", topic)
	}

	from := make(map[int32]kgo.Offset)
	until := make(map[int32]int64)
	ends.Each(func(e kadm.ListedOffset) {
		s, ok := starts.Lookup(topic, e.Partition)
		if ok && e.Offset > s.Offset {
			from[e.Partition] = kgo.NewOffset().At(s.Offset)
			until[e.Partition] = e.Offset
		}
	})
	recs := make(map[Position]*kgo.Record)
	if len(from) == 0 {
		return recs, nil
	}

	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ClientID("baton-verify"),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
	}, opts...)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	next := make(map[int32]int64)
	for p, o := range from {
		next[p] = o.EpochOffset().Offset
	}
	done := func() bool {
		for p, end := range until {
			if next[p] < end {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%w; read up to %s of %s", err, describeNext(next), describeNext(until))
		}
		var errs []error
		fs.EachError(func(t string, p int32, err error) {
			errs = append(errs, fmt.Errorf("fetching %s/%d: %w", t, p, err))
		})
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		fs.EachRecord(func(r *kgo.Record) {
			recs[Position{r.Partition, r.Offset}] = r
			if r.Offset+1 > next[r.Partition] {
				next[r.Partition] = r.Offset + 1
			}
		})
	}
	return recs, nil
}

// listOffsets lists topic's start and end offsets, retrying for up to 30 s
// while a partition answers with a retriable error: right after a leader
// moves, a new leader answers OFFSET_NOT_AVAILABLE (or NOT_LEADER) until its
// high watermark is known, and kadm does not retry per-partition errors.
func listOffsets(ctx context.Context, ac *kadm.Client, topic string) (starts, ends kadm.ListedOffsets, err error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		starts, err = ac.ListStartOffsets(ctx, topic)
		if err == nil {
			err = starts.Error()
		}
		if err == nil {
			ends, err = ac.ListEndOffsets(ctx, topic)
			if err == nil {
				err = ends.Error()
			}
			if err != nil {
				err = fmt.Errorf("listing end offsets: %w", err)
			}
		} else {
			err = fmt.Errorf("listing start offsets: %w", err)
		}
		if err == nil || !kerr.IsRetriable(err) || time.Now().After(deadline) {
			return starts, ends, err
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func describeNext(m map[int32]int64) string {
	ps := make([]int, 0, len(m))
	for p := range m {
		ps = append(ps, int(p))
	}
	sort.Ints(ps)
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = fmt.Sprintf("%d:%d", p, m[int32(p)])
	}
	return "{" + strings.Join(s, " ") + "}"
}
