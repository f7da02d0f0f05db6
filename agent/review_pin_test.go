package agent

import (
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/internal/recordbatch"
)

// The e0f4c90 bookkeeping, verbatim but for names.
func (ps *pins) oldCloseAckedGaps(req *kmsg.ProduceRequest, results []kmsg.ProduceResponseTopicPartition) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(ps.gaps) == 0 {
		return
	}
	i := 0
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			k := tp{t.Topic, p.Partition}
			if g, ok := ps.gaps[k]; ok && results[i].ErrorCode == 0 {
				if b, idem := batchSeq(p.Records); idem && b.pid == g.pid && b.epoch == g.epoch && b.seq > g.seq {
					delete(ps.gaps, k)
				}
			}
			i++
		}
	}
}

func (ps *pins) oldNoteGapCodes(req *kmsg.ProduceRequest, code func(i int) int16) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	i := 0
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			if c := code(i); c != 0 && kerr.IsRetriable(kerr.ErrorForCode(c)) {
				if b, ok := batchSeq(p.Records); ok {
					k := tp{t.Topic, p.Partition}
					if g, had := ps.gaps[k]; !had || g.pid != b.pid || g.epoch != b.epoch || b.seq < g.seq {
						if ps.gaps == nil {
							ps.gaps = map[tp]gap{}
						}
						ps.gaps[k] = b
					}
				}
			}
			i++
		}
	}
}

// TestReviewNoteOutcomesMatchesOld: away from the wrap, noteOutcomes keeps
// the same gaps as closeAckedGaps+noteGapCodes did, for random requests.
func TestReviewNoteOutcomesMatchesOld(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	codes := []int16{0, 0, kerr.NotLeaderForPartition.Code, kerr.RequestTimedOut.Code, kerr.InvalidRecord.Code, kerr.DuplicateSequenceNumber.Code, kerr.OutOfOrderSequenceNumber.Code}
	for iter := 0; iter < 20000; iter++ {
		var a, b pins
		for step := 0; step < 12; step++ {
			req := kmsg.NewPtrProduceRequest()
			n := 0
			for _, topic := range []string{"t", "u"} {
				pt := kmsg.ProduceRequestTopic{Topic: topic}
				for p := int32(0); p < 3; p++ {
					if r.IntN(3) == 0 {
						continue
					}
					rec := make([]byte, recordbatch.HeaderLen)
					rec[recordbatch.OffMagic] = 2
					pid := int64(7 + r.IntN(2))
					if r.IntN(6) == 0 {
						pid = -1
					}
					recordbatch.SetProducer(rec, recordbatch.Producer{ID: pid, Epoch: int16(r.IntN(2)), BaseSeq: int32(r.IntN(12))})
					pt.Partitions = append(pt.Partitions, kmsg.ProduceRequestTopicPartition{Partition: p, Records: rec})
					n++
				}
				req.Topics = append(req.Topics, pt)
			}
			cs := make([]int16, n)
			for i := range cs {
				cs[i] = codes[r.IntN(len(codes))]
			}
			if r.IntN(3) == 0 {
				a.noteRefused(req, cs)
				for _, c := range cs {
					if c != 0 {
						b.oldNoteGapCodes(req, func(i int) int16 { return cs[i] })
						break
					}
				}
			} else {
				res := make([]kmsg.ProduceResponseTopicPartition, n)
				for i := range res {
					res[i].ErrorCode = cs[i]
				}
				a.noteGaps(req, res)
				b.oldCloseAckedGaps(req, res)
				b.oldNoteGapCodes(req, func(i int) int16 { return res[i].ErrorCode })
			}
			if !maps.Equal(a.gaps, b.gaps) {
				t.Fatalf("iter %d step %d: new %v, old %v", iter, step, a.gaps, b.gaps)
			}
		}
	}
}
