package agent_test

import (
	"encoding/binary"
	"net"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestClientGoneMidRequest: clients that send a request and hang up at
// once. The agent cancels what is pending for a closed connection; the
// answer it was computing must not be written into the exchange while the
// response side reads it (run with -race: CI once caught exactly that for
// Metadata). Each connection goes; the agent keeps serving.
func TestClientGoneMidRequest(t *testing.T) {
	t.Parallel()
	f := startFixture(t, nil)
	createTopic(t, f.addr, "gone", 3)

	meta := kmsg.NewPtrMetadataRequest()
	meta.Version = 4
	meta.Topics = nil // all topics: the agent asks every cluster
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.Version = 2
	fc.CoordinatorKey = "some-group"
	for i := range 300 {
		var req kmsg.Request = meta
		if i%2 == 1 {
			req = fc
		}
		body := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
		body = binary.BigEndian.AppendUint16(body, uint16(req.GetVersion()))
		body = binary.BigEndian.AppendUint32(body, uint32(i))
		body = binary.BigEndian.AppendUint16(body, 0xffff) // null client id
		body = req.AppendTo(body)
		frame := append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)

		nc, err := net.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(frame); err != nil {
			t.Fatal(err)
		}
		nc.Close()
	}

	// Everyone else still works.
	cl := newClient(t, f.addr)
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(t.Context(), cl); err != nil {
		t.Fatalf("metadata after the hang-ups: %v", err)
	}
}
