package agent

import (
	"bufio"
	"encoding/binary"
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
	c.corr++
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 7, -1, 30000
	req.Topics = []kmsg.ProduceRequestTopic{{Topic: topic, Partitions: []kmsg.ProduceRequestTopicPartition{{
		Partition: 0, Records: records}}}}
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw-test")).AppendRequest(nil, req, c.corr)
	if _, err := c.nc.Write(frame); err != nil {
		c.t.Errorf("writing produce %d: %v", c.corr, err)
		return -1, -1
	}
	c.nc.SetReadDeadline(time.Now().Add(60 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(c.br, size[:]); err != nil {
		c.t.Errorf("reading response %d: %v", c.corr, err)
		return -1, -1
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c.br, body); err != nil {
		c.t.Errorf("reading response %d: %v", c.corr, err)
		return -1, -1
	}
	resp := kmsg.NewPtrProduceResponse()
	resp.Version = req.Version
	if err := resp.ReadFrom(body[4:]); err != nil {
		c.t.Errorf("decoding response %d: %v", c.corr, err)
		return -1, -1
	}
	p := resp.Topics[0].Partitions[0]
	return p.ErrorCode, p.BaseOffset
}
