package agent

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The segment encoder must produce exactly kmsg's bytes, at every version
// it claims.
func TestProduceSegmentsMatchKmsg(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for v := int16(3); v <= 12; v++ {
		for trial := 0; trial < 200; trial++ {
			req := kmsg.NewPtrProduceRequest()
			req.Version = v
			if rng.IntN(2) == 0 {
				req.TransactionID = kmsg.StringPtr("txn-" + string(rune('a'+rng.IntN(26))))
			}
			req.Acks = int16(rng.IntN(3) - 1)
			req.TimeoutMillis = rng.Int32()
			for range rng.IntN(4) {
				tp := kmsg.ProduceRequestTopic{Topic: string(bytes.Repeat([]byte{'t'}, 1+rng.IntN(300)))}
				for range rng.IntN(5) {
					p := kmsg.ProduceRequestTopicPartition{Partition: rng.Int32()}
					switch rng.IntN(3) {
					case 0: // nil records
					case 1:
						p.Records = []byte{}
					default:
						p.Records = make([]byte, rng.IntN(5000))
						for i := range p.Records {
							p.Records[i] = byte(rng.IntN(256))
						}
					}
					tp.Partitions = append(tp.Partitions, p)
				}
				req.Topics = append(req.Topics, tp)
			}
			want := req.AppendTo(nil)
			segs, ok := produceSegments(req, nil)
			if !ok {
				t.Fatalf("v%d: encoder refused a plain request", v)
			}
			if got := bytes.Join(segs, nil); !bytes.Equal(got, want) {
				t.Fatalf("v%d trial %d: segments differ from kmsg's encoding\n got %x\nwant %x", v, trial, got, want)
			}
		}
	}
}

func TestProduceSegmentsRefusesWhatItCannotEncode(t *testing.T) {
	t.Parallel()
	req := kmsg.NewPtrProduceRequest()
	req.Version = 2
	if _, ok := produceSegments(req, nil); ok {
		t.Error("v2 encoded; it must fall back to kmsg")
	}
	req.Version = 9
	req.UnknownTags.Set(7, []byte{1})
	if _, ok := produceSegments(req, nil); ok {
		t.Error("unknown tags encoded; they must fall back to kmsg")
	}
}
