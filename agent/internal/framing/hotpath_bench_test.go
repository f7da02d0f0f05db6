package framing

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/internal/bufpool"
)

// loopConn is a net.Conn whose reads return one frame, again and again:
// what a client connection delivers to the Reader, without a socket.
type loopConn struct {
	net.Conn
	frame []byte
	off   int
}

func (c *loopConn) Read(p []byte) (int, error) {
	n := copy(p, c.frame[c.off:])
	c.off = (c.off + n) % len(c.frame)
	return n, nil
}

func (c *loopConn) SetReadDeadline(time.Time) error { return nil }

// produceFrame is a size-prefixed produce request v9 of one partition
// with a record batch of size bytes.
func produceFrame(size int) []byte {
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 9, -1, 30000
	t := kmsg.NewProduceRequestTopic()
	t.Topic = "paced"
	p := kmsg.NewProduceRequestTopicPartition()
	p.Records = make([]byte, size)
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	id := "bench"
	frame := AppendRequestHeader(make([]byte, 4), 0, 9, 1, &id, true)
	frame = req.AppendTo(frame)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	return frame
}

// BenchmarkReaderNext reads produce frames from a connection and releases
// them, as the agent's connection loop does: no allocation per frame.
func BenchmarkReaderNext(b *testing.B) {
	for _, size := range []int{1 << 10, 16 << 10} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			budget := NewBudget(64<<20, 16<<20).ForConn()
			fr := NewReader(&loopConn{frame: produceFrame(size)}, budget, Limits{MaxFrame: 1 << 20, FrameTimeout: time.Minute, IdleTimeout: time.Minute})
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				frame, err := fr.Next(ctx)
				if err != nil {
					b.Fatal(err)
				}
				budget.Release(int64(len(frame)))
				bufpool.Put(frame)
			}
		})
	}
}

// BenchmarkParseRequest decodes a produce frame.
func BenchmarkParseRequest(b *testing.B) {
	frame := produceFrame(1 << 10)[4:]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseRequest(frame); err != nil {
			b.Fatal(err)
		}
	}
}
