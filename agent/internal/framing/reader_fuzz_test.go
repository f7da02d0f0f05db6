package framing

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/baton-kafka/baton/internal/bufpool"
)

// FuzzFrameReader feeds an arbitrary byte stream to the client framing:
// every frame it returns is the next size-prefixed frame of the stream,
// the buffer budget never goes past its bounds and is all back once the
// frames are released, and the stream ends in EOF or a frame error.
func FuzzFrameReader(f *testing.F) {
	frame := func(body []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
	}
	f.Add(append(frame(make([]byte, 10)), frame(make([]byte, 3000))...))
	f.Add(binary.BigEndian.AppendUint32(nil, 1<<30))
	f.Add([]byte{0, 0, 0, 5, 1, 2, 3, 4, 5})
	f.Add([]byte{0, 0})
	const perConn, total, maxFrame = 4 << 10, 8 << 10, 6 << 10
	f.Fuzz(func(t *testing.T, stream []byte) {
		client, server := net.Pipe()
		defer server.Close()
		go func() { client.Write(stream); client.Close() }()
		b := NewBudget(total, perConn)
		cb := b.ForConn()
		fr := NewReader(server, cb, Limits{MaxFrame: maxFrame, FrameTimeout: time.Minute, IdleTimeout: time.Minute})
		rest := stream
		for {
			got, err := fr.Next(context.Background())
			if held := b.Held(); held < 0 || held > perConn {
				t.Fatalf("budget holds %d, bound %d", held, perConn)
			}
			if err != nil {
				switch {
				case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, ErrFrameTooLarge), errors.Is(err, ErrFrameTooSmall):
				default:
					t.Fatalf("stream ended with %v", err)
				}
				if held := b.Held(); held != 0 {
					t.Fatalf("%d bytes still charged after a failed frame", held)
				}
				return
			}
			n := int(binary.BigEndian.Uint32(rest))
			if len(got) != n || !bytes.Equal(got, rest[4:4+n]) {
				t.Fatalf("frame of %d bytes, stream says %d", len(got), n)
			}
			rest = rest[4+n:]
			cb.Release(int64(len(got)))
			bufpool.Put(got)
			if held := b.Held(); held != 0 {
				t.Fatalf("%d bytes still charged after release", held)
			}
		}
	})
}
