package replicator

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DefaultOffsetMapTopic is the compacted topic on D holding offset maps.
const DefaultOffsetMapTopic = "__baton_offset_map"

// Segment is one piece of a partition's offset map: from destination
// offset Dst on (until the next segment), destination offset d holds the
// source record at Src + (d - Dst). A partition with no segment, or whose
// only segment has Src == Dst == 0, has exact offset parity.
type Segment struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Dst       int64  `json:"dst"`
	Src       int64  `json:"src"`
}

func (s Segment) key() []byte {
	return []byte(s.Topic + "/" + strconv.Itoa(int(s.Partition)) + "/" + strconv.FormatInt(s.Dst, 10))
}

// OffsetMap is the offset map of one topic: per partition, segments sorted
// by destination offset.
type OffsetMap map[int32][]Segment

// Exact reports whether partition p has exact offset parity.
func (m OffsetMap) Exact(p int32) bool {
	for _, s := range m[p] {
		if s.Src != s.Dst {
			return false
		}
	}
	return true
}

// ToSource translates destination offset dst of partition p to the source.
func (m OffsetMap) ToSource(p int32, dst int64) int64 {
	return dst + m.delta(p, dst)
}

// ToDestination translates source offset src of partition p to the
// destination offset that holds it, or that holds the next copied record
// for a source offset that was not copied (a transaction marker, aborted
// data, a record compaction removed). Segments' source offsets increase
// with their destination offsets.
func (m OffsetMap) ToDestination(p int32, src int64) int64 {
	segs := m[p]
	i := sort.Search(len(segs), func(i int) bool { return segs[i].Src > src }) - 1
	if i < 0 {
		// Before the first segment D holds S at the same offsets (delta 0,
		// as delta says) up to that segment's destination offset; a
		// source offset from there to the segment's source offset was
		// not copied (a log start above it, a marker).
		if len(segs) > 0 && src >= segs[0].Dst {
			return segs[0].Dst
		}
		return src
	}
	d := segs[i].Dst + (src - segs[i].Src)
	if i+1 < len(segs) && d > segs[i+1].Dst {
		d = segs[i+1].Dst // src fell in a skipped range
	}
	return d
}

// delta returns src - dst in force at destination offset dst.
func (m OffsetMap) delta(p int32, dst int64) int64 {
	segs := m[p]
	i := sort.Search(len(segs), func(i int) bool { return segs[i].Dst > dst })
	if i == 0 {
		return 0
	}
	return segs[i-1].Src - segs[i-1].Dst
}

func (m OffsetMap) add(s Segment) {
	segs := m[s.Partition]
	i := sort.Search(len(segs), func(i int) bool { return segs[i].Dst >= s.Dst })
	if i < len(segs) && segs[i].Dst == s.Dst {
		segs[i] = s // a later write for the same destination offset wins
	} else {
		segs = append(segs, Segment{})
		copy(segs[i+1:], segs[i:])
		segs[i] = s
	}
	m[s.Partition] = segs
}

// remove drops partition p's segment at destination offset dst, if any.
func (m OffsetMap) remove(p int32, dst int64) {
	segs := m[p]
	i := sort.Search(len(segs), func(i int) bool { return segs[i].Dst >= dst })
	if i < len(segs) && segs[i].Dst == dst {
		m[p] = append(segs[:i], segs[i+1:]...)
	}
}

// parseSegmentKey reads a map record key, topic/partition/dst (topic names
// cannot hold a slash).
func parseSegmentKey(k []byte) (topic string, p int32, dst int64, ok bool) {
	parts := strings.Split(string(k), "/")
	if len(parts) != 3 {
		return "", 0, 0, false
	}
	pp, err1 := strconv.ParseInt(parts[1], 10, 32)
	d, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, 0, false
	}
	return parts[0], int32(pp), d, true
}

// ensureMapTopic creates the offset map topic on D if it is missing.
func ensureMapTopic(ctx context.Context, adm *kadm.Client, topic string) error {
	cleanup := "compact"
	resp, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &cleanup}, topic)
	if err != nil && !strings.Contains(err.Error(), "TOPIC_ALREADY_EXISTS") {
		return fmt.Errorf("creating offset map topic %s: %w", topic, err)
	}
	if resp.Err != nil && !strings.Contains(resp.Err.Error(), "TOPIC_ALREADY_EXISTS") {
		return fmt.Errorf("creating offset map topic %s: %w", topic, resp.Err)
	}
	return nil
}

// Handoff is where a topic's copy stopped for good (Stop at a cutover): per
// partition, the first source offset not copied and D's end offset then.
// After the copy stops, consumer groups still read the topic on S until they
// move to D, so their offsets keep being synced through the handoff (an
// offset beyond it is clamped to it: S may only grow by a producer that
// bypassed the cutover). It is kept on D in the offset map topic, under the
// key "handoff:<topic>" (a colon cannot be in a topic name), so a restarted
// replicator keeps syncing.
type Handoff struct {
	Topic      string             `json:"topic"`
	Partitions []HandoffPartition `json:"partitions"`
}

// HandoffPartition is one partition of a Handoff.
type HandoffPartition struct {
	Partition int32 `json:"partition"`
	// Source is the first source offset not copied.
	Source int64 `json:"source"`
	// Destination is D's end offset when the copy stopped.
	Destination int64 `json:"destination"`
}

const handoffKeyPrefix = "handoff:"

// progress is h as the group sync's clamping reads it.
func (h Handoff) progress() map[int32]partProgress {
	out := make(map[int32]partProgress, len(h.Partitions))
	for _, p := range h.Partitions {
		out[p.Partition] = partProgress{hold: p.Destination, progress: p.Source}
	}
	return out
}

func handoffKey(topic string) []byte { return []byte(handoffKeyPrefix + topic) }

// partitionHandoffKey keys one partition's handoff, "handoff:<topic>:<p>",
// written by replicator workers (Leases), each for its own partitions.
func partitionHandoffKey(topic string, p int32) []byte {
	return []byte(handoffKeyPrefix + topic + ":" + itoa(p))
}

// parseHandoffKey reads a handoff key's topic, and its partition for a
// partition's (-1 for a whole topic's).
func parseHandoffKey(key string) (string, int32) {
	rest := strings.TrimPrefix(key, handoffKeyPrefix)
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		return rest, -1
	}
	p, err := strconv.ParseInt(rest[i+1:], 10, 32)
	if err != nil || p < 0 {
		return rest, -1
	}
	return rest[:i], int32(p)
}

// mergeHandoff puts a partition's handoff record into hs: a newer record
// of a partition replaces the older one, the others stay.
func mergeHandoff(hs map[string]Handoff, topic string, p HandoffPartition) {
	h := hs[topic]
	h.Topic = topic
	parts := make([]HandoffPartition, 0, len(h.Partitions)+1)
	for _, q := range h.Partitions {
		if q.Partition != p.Partition {
			parts = append(parts, q)
		}
	}
	h.Partitions = append(parts, p)
	hs[topic] = h
}

// LoadOffsetMaps reads every segment of the offset map topic mapTopic on the
// cluster at seeds, by topic. A missing map topic is an empty map.
// opts add client options (TLS, SASL).
func LoadOffsetMaps(ctx context.Context, seeds []string, mapTopic string, opts ...kgo.Opt) (map[string]OffsetMap, error) {
	mt, err := loadMapTopic(ctx, seeds, mapTopic, opts...)
	return mt.maps, err
}

// sourceIDKeyPrefix keys the record naming the S topic id a D topic is
// copied from: "source:<topic>".
const sourceIDKeyPrefix = "source:"

func sourceIDKey(topic string) []byte { return []byte(sourceIDKeyPrefix + topic) }

// sourceID is the value of a source id record.
type sourceID struct {
	Topic string `json:"topic"`
	ID    string `json:"id"` // hex
}

// mapTopicT is what the offset map topic holds.
type mapTopicT struct {
	maps      map[string]OffsetMap
	handoffs  map[string]Handoff
	sourceIDs map[string][16]byte
}

// loadMapTopic reads the offset map topic: segments by topic, handoffs and
// source topic ids.
func loadMapTopic(ctx context.Context, seeds []string, mapTopic string, opts ...kgo.Opt) (mapTopicT, error) {
	rd, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{mapTopic: {0: kgo.NewOffset().AtStart()}}),
	}, opts...)...)
	if err != nil {
		return mapTopicT{}, err
	}
	defer rd.Close()
	ends, err := kadm.NewClient(rd).ListEndOffsets(ctx, mapTopic)
	if err != nil {
		return mapTopicT{}, fmt.Errorf("offset map %s: %w", mapTopic, err)
	}
	out := map[string]OffsetMap{}
	handoffs := map[string]Handoff{}
	ids := map[string][16]byte{}
	result := func() mapTopicT { return mapTopicT{maps: out, handoffs: handoffs, sourceIDs: ids} }
	end, ok := ends.Lookup(mapTopic, 0)
	if ok && end.Err != nil && !errors.Is(end.Err, kerr.UnknownTopicOrPartition) {
		// Not an empty map: read as one, a mapped partition would resume
		// at the wrong source offset.
		return mapTopicT{}, fmt.Errorf("offset map %s: end offset: %w", mapTopic, end.Err)
	}
	if !ok || end.Err != nil || end.Offset == 0 {
		return result(), nil // missing topic or empty
	}
	for {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return mapTopicT{}, err
		}
		var ferr error
		done := false
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return mapTopicT{}, fmt.Errorf("reading offset map %s: %w", mapTopic, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			var s Segment
			switch {
			case strings.HasPrefix(string(r.Key), sourceIDKeyPrefix):
				topic := strings.TrimPrefix(string(r.Key), sourceIDKeyPrefix)
				var v sourceID
				var id [16]byte
				if r.Value == nil {
					delete(ids, topic)
				} else if json.Unmarshal(r.Value, &v) == nil && v.Topic == topic {
					if b, err := hex.DecodeString(v.ID); err == nil && len(b) == 16 {
						copy(id[:], b)
						ids[topic] = id
					}
				}
			case strings.HasPrefix(string(r.Key), handoffKeyPrefix):
				topic, part := parseHandoffKey(string(r.Key))
				var h Handoff
				switch {
				case r.Value == nil && part < 0:
					delete(handoffs, topic)
				case r.Value == nil || json.Unmarshal(r.Value, &h) != nil || h.Topic != topic:
				case part < 0:
					handoffs[topic] = h
				case len(h.Partitions) == 1 && h.Partitions[0].Partition == part:
					mergeHandoff(handoffs, topic, h.Partitions[0])
				}
			case r.Value == nil:
				// A tombstone withdraws a segment written for a batch that
				// never reached D (see initPartition).
				if topic, p, dst, ok := parseSegmentKey(r.Key); ok && out[topic] != nil {
					out[topic].remove(p, dst)
				}
			case json.Unmarshal(r.Value, &s) == nil:
				m := out[s.Topic]
				if m == nil {
					m = OffsetMap{}
					out[s.Topic] = m
				}
				m.add(s)
			}
			if r.Offset+1 >= end.Offset {
				done = true
			}
		})
		if done {
			return result(), nil
		}
	}
}
