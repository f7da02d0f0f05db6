package agent

import (
	"encoding/binary"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// produceSegments encodes the body of a produce request as segments that
// point at the request's record bytes instead of copying them, so that a
// split request goes upstream with one writev and no memmove of records.
// ok is false for what it does not encode (versions below 3, unknown tagged
// fields); callers then use kmsg's encoder.
func produceSegments(req *kmsg.ProduceRequest, scratch []byte) (segs [][]byte, ok bool) {
	v := req.Version
	if v < 3 || v > 12 || req.UnknownTags.Len() > 0 {
		return nil, false
	}
	flex := v >= 9
	// Small fields accumulate in scratch; a segment boundary is recorded
	// as an offset so that scratch may grow while we encode.
	type seg struct {
		lo, hi  int
		records []byte
	}
	var out []seg
	mark := 0
	cut := func() {
		if len(scratch) > mark {
			out = append(out, seg{lo: mark, hi: len(scratch)})
			mark = len(scratch)
		}
	}
	arrayLen := func(n int) {
		if flex {
			scratch = binary.AppendUvarint(scratch, uint64(n)+1)
		} else {
			scratch = binary.BigEndian.AppendUint32(scratch, uint32(n))
		}
	}
	str := func(s string) {
		if flex {
			scratch = binary.AppendUvarint(scratch, uint64(len(s))+1)
		} else {
			scratch = binary.BigEndian.AppendUint16(scratch, uint16(len(s)))
		}
		scratch = append(scratch, s...)
	}
	if req.TransactionID == nil {
		if flex {
			scratch = append(scratch, 0)
		} else {
			scratch = binary.BigEndian.AppendUint16(scratch, 0xffff)
		}
	} else {
		str(*req.TransactionID)
	}
	scratch = binary.BigEndian.AppendUint16(scratch, uint16(req.Acks))
	scratch = binary.BigEndian.AppendUint32(scratch, uint32(req.TimeoutMillis))
	arrayLen(len(req.Topics))
	for i := range req.Topics {
		t := &req.Topics[i]
		if t.UnknownTags.Len() > 0 {
			return nil, false
		}
		str(t.Topic)
		arrayLen(len(t.Partitions))
		for j := range t.Partitions {
			p := &t.Partitions[j]
			if p.UnknownTags.Len() > 0 {
				return nil, false
			}
			scratch = binary.BigEndian.AppendUint32(scratch, uint32(p.Partition))
			switch {
			case p.Records == nil && flex:
				scratch = append(scratch, 0)
			case p.Records == nil:
				scratch = binary.BigEndian.AppendUint32(scratch, 0xffffffff)
			case flex:
				scratch = binary.AppendUvarint(scratch, uint64(len(p.Records))+1)
			default:
				scratch = binary.BigEndian.AppendUint32(scratch, uint32(len(p.Records)))
			}
			if len(p.Records) > 0 {
				cut()
				out = append(out, seg{records: p.Records})
			}
			if flex {
				scratch = append(scratch, 0) // partition tagged fields
			}
		}
		if flex {
			scratch = append(scratch, 0) // topic tagged fields
		}
	}
	if flex {
		scratch = append(scratch, 0) // request tagged fields
	}
	cut()
	segs = make([][]byte, len(out))
	for i, s := range out {
		if s.records != nil {
			segs[i] = s.records
		} else {
			segs[i] = scratch[s.lo:s.hi]
		}
	}
	return segs, true
}
