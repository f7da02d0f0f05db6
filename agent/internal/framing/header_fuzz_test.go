package framing

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// FuzzParseRequest feeds arbitrary frames to the request decoder: it must
// return a request or an error, never panic, and never read past the frame.
func FuzzParseRequest(f *testing.F) {
	seed := func(req kmsg.Request, version int16) {
		req.SetVersion(version)
		id := "fuzz"
		b := AppendRequestHeader(nil, req.Key(), version, 7, &id, req.IsFlexible())
		f.Add(req.AppendTo(b))
	}
	produce := kmsg.NewPtrProduceRequest()
	produce.Acks = -1
	produce.TimeoutMillis = 1000
	produce.Topics = []kmsg.ProduceRequestTopic{{Topic: "t", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: []byte{1, 2, 3}}}}}
	for _, v := range []int16{3, 7, 9, 12} {
		seed(produce, v)
	}
	md := kmsg.NewPtrMetadataRequest()
	topic := "t"
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: &topic}}
	seed(md, 1)
	seed(md, 12)
	seed(kmsg.NewPtrApiVersionsRequest(), 3)
	fetch := kmsg.NewPtrFetchRequest()
	fetch.Topics = []kmsg.FetchRequestTopic{{Topic: "t", Partitions: []kmsg.FetchRequestTopicPartition{{Partition: 1}}}}
	seed(fetch, 11)
	seed(fetch, 12)
	seed(kmsg.NewPtrFindCoordinatorRequest(), 4)
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff})

	f.Fuzz(func(t *testing.T, frame []byte) {
		orig := bytes.Clone(frame)
		x, err := ParseRequest(frame)
		if !bytes.Equal(orig, frame) {
			t.Fatal("ParseRequest modified its input")
		}
		if err != nil {
			return
		}
		if x.Header.APIKey != int16(binary.BigEndian.Uint16(frame)) {
			t.Fatalf("api key %d, frame says %d", x.Header.APIKey, binary.BigEndian.Uint16(frame))
		}
		if x.Req != nil {
			// A decoded request re-encodes without panicking.
			_ = x.Req.AppendTo(nil)
		}
	})
}
