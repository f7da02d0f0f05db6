package agent

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// RawConn is a client connection to the agent that writes Produce v7
// requests by hand: no metadata asked first, batches exactly as given.
// Its methods report failures with t.Error, so goroutines may use it.
type RawConn struct {
	t    testing.TB
	nc   net.Conn
	br   *bufio.Reader
	corr int32
}

// DialRaw connects to the agent at addr; the connection closes with t.
func DialRaw(t testing.TB, addr string) *RawConn {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &RawConn{t: t, nc: nc, br: bufio.NewReader(nc)}
}

// Produce writes records to topic/0 with acks=all and returns the
// partition's error code and base offset; -1, -1 when the exchange failed.
func (c *RawConn) Produce(topic string, records []byte) (int16, int64) {
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 7, -1, 30000
	req.Topics = []kmsg.ProduceRequestTopic{{Topic: topic, Partitions: []kmsg.ProduceRequestTopicPartition{{
		Partition: 0, Records: records}}}}
	resp, err := c.Request(req)
	if err != nil {
		c.t.Errorf("produce: %v", err)
		return -1, -1
	}
	p := resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
	return p.ErrorCode, p.BaseOffset
}

// Request writes req at its version and reads its response; an error
// means the exchange failed (the agent closed the connection, say).
func (c *RawConn) Request(req kmsg.Request) (kmsg.Response, error) {
	if err := c.Send(req); err != nil {
		return nil, err
	}
	_, resp, err := c.Receive(req)
	return resp, err
}

// Send writes req at its version without reading an answer, for
// pipelining: Receive reads the answers, one per Send, in order.
func (c *RawConn) Send(req kmsg.Request) error {
	c.corr++
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw-test")).AppendRequest(nil, req, c.corr)
	if _, err := c.nc.Write(frame); err != nil {
		return fmt.Errorf("writing %s %d: %w", kmsg.NameForKey(req.Key()), c.corr, err)
	}
	return nil
}

// Receive reads the next response, decoded as req's, and returns the
// correlation id it carries.
func (c *RawConn) Receive(req kmsg.Request) (int32, kmsg.Response, error) {
	c.nc.SetReadDeadline(time.Now().Add(60 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(c.br, size[:]); err != nil {
		return 0, nil, fmt.Errorf("reading a response to %s: %w", kmsg.NameForKey(req.Key()), err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if len(body) < 4 {
		return 0, nil, fmt.Errorf("a response of %d bytes has no correlation id", len(body))
	}
	if _, err := io.ReadFull(c.br, body); err != nil {
		return 0, nil, fmt.Errorf("reading a response to %s: %w", kmsg.NameForKey(req.Key()), err)
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	skip := 4                                 // correlation id
	if resp.IsFlexible() && req.Key() != 18 { // ApiVersions answers with the old header
		skip++ // empty tagged fields
	}
	if err := resp.ReadFrom(body[skip:]); err != nil {
		return 0, nil, fmt.Errorf("decoding a response to %s: %w", kmsg.NameForKey(req.Key()), err)
	}
	return int32(binary.BigEndian.Uint32(body)), resp, nil
}
