package agent_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/internal/wait"
)

// closedByAgent reports "" once the agent has closed nc (a read sees EOF
// or a reset), else what it read. Bytes the agent sends (answers) are
// drained.
func closedByAgent(nc net.Conn) string {
	nc.SetReadDeadline(time.Now().Add(wait.Poll))
	var b [4096]byte
	for {
		_, err := nc.Read(b[:])
		switch {
		case err == nil:
			continue
		case errors.Is(err, os.ErrDeadlineExceeded):
			return "connection still open"
		default:
			return ""
		}
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// apiVersionsFrame is a whole ApiVersions v0 request frame.
func apiVersionsFrame(corr int32) []byte {
	body := binary.BigEndian.AppendUint16(nil, 18) // key
	body = binary.BigEndian.AppendUint16(body, 0)  // version
	body = binary.BigEndian.AppendUint32(body, uint32(corr))
	body = binary.BigEndian.AppendUint16(body, 0xffff) // null client id
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// readAnswer reads one response frame and returns its correlation id.
func readAnswer(nc net.Conn, timeout time.Duration) (int32, error) {
	nc.SetReadDeadline(time.Now().Add(timeout))
	var sz [4]byte
	if _, err := io.ReadFull(nc, sz[:]); err != nil {
		return 0, err
	}
	b := make([]byte, binary.BigEndian.Uint32(sz[:]))
	if _, err := io.ReadFull(nc, b); err != nil {
		return 0, err
	}
	return int32(binary.BigEndian.Uint32(b)), nil
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestDeadlinesCloseStalledConnections(t *testing.T) {
	t.Parallel()
	f := startFixture(t, nil, agent.FrameTimeout(300*time.Millisecond), agent.IdleTimeout(500*time.Millisecond))
	cases := []struct {
		name string
		send []byte
	}{
		{"half a length prefix", []byte{0, 0}},
		{"a length prefix alone", binary.BigEndian.AppendUint32(nil, 1000)},
		{"a 100 MiB prefix and 1 KiB", append(binary.BigEndian.AppendUint32(nil, 100<<20), make([]byte, 1<<10)...)},
		{"an answered request, then nothing (idle)", apiVersionsFrame(1)},
		{"nothing at all (idle)", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			nc := dial(t, f.addr)
			if _, err := nc.Write(c.send); err != nil {
				t.Fatal(err)
			}
			wait.For(t, 20*time.Second, "the agent to close the connection", func() string { return closedByAgent(nc) })
		})
	}
}

func TestSteadyClientOutlivesIdleTimeout(t *testing.T) {
	t.Parallel()
	const idle = 3 * time.Second
	f := startFixture(t, nil, agent.IdleTimeout(idle))
	nc := dial(t, f.addr)
	// A request every idle/6 for two idle timeouts: the connection stays.
	pace := time.NewTicker(idle / 6)
	defer pace.Stop()
	for i := range int32(12) {
		<-pace.C // the client's pace, not a wait for the agent
		if _, err := nc.Write(apiVersionsFrame(i)); err != nil {
			t.Fatal(err)
		}
		if corr, err := readAnswer(nc, 10*time.Second); err != nil || corr != i {
			t.Fatalf("request %d: answer %d, %v", i, corr, err)
		}
	}
}

func TestBufferedBytesBackPressure(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	const perConn, total = 1 << 20, 2 << 20
	f := startFixture(t, nil, agent.Registry(reg), agent.ConnBufferedBytes(perConn), agent.BufferedBytes(total),
		agent.FrameTimeout(time.Minute))
	// Two partial frames of a full connection's worth each fill the agent.
	var holders []net.Conn
	for range 2 {
		nc := dial(t, f.addr)
		if _, err := nc.Write(append(binary.BigEndian.AppendUint32(nil, perConn), make([]byte, perConn-1)...)); err != nil {
			t.Fatal(err)
		}
		holders = append(holders, nc)
	}
	wait.For(t, 20*time.Second, "both partial frames buffered", func() string {
		if g := gauge(t, reg, "baton_agent_buffered_request_bytes"); g != 2*perConn {
			return fmt.Sprintf("buffered %v", g)
		}
		return ""
	})
	// A third client's request waits: the agent stops reading, it does not fail.
	nc := dial(t, f.addr)
	if _, err := nc.Write(apiVersionsFrame(7)); err != nil {
		t.Fatal(err)
	}
	if _, err := readAnswer(nc, time.Second); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a request past the agent's buffer bound was answered or failed: %v", err)
	}
	if g := gauge(t, reg, "baton_agent_buffered_request_bytes"); g > total {
		t.Fatalf("buffered %v bytes, bound %d", g, total)
	}
	// One holder goes away: its bytes are released and the request is answered.
	holders[0].Close()
	if corr, err := readAnswer(nc, 20*time.Second); err != nil || corr != 7 {
		t.Fatalf("after space freed: answer %d, %v", corr, err)
	}
}

func TestFramesOverABoundCloseOnlyTheirConnection(t *testing.T) {
	t.Parallel()
	f := startFixture(t, nil, agent.MaxFrameBytes(4<<20), agent.ConnBufferedBytes(1<<20))
	topic := "steady"
	createTopic(t, f.addr, topic, 1)
	good := newClient(t, f.addr, kgo.DefaultProduceTopic(topic))

	// A client keeps producing throughout.
	ctx, stop := context.WithCancel(context.Background())
	var acks, fails atomic.Int64
	var lastErr atomic.Value
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if err := good.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
				if ctx.Err() == nil {
					fails.Add(1)
					lastErr.Store(err.Error())
				}
				continue
			}
			acks.Add(1)
		}
	}()

	frame := func(body []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
	}
	cases := []struct {
		name string
		send []byte
	}{
		{"over max frame bytes", binary.BigEndian.AppendUint32(nil, 8<<20)},
		{"over conn buffered bytes", binary.BigEndian.AppendUint32(nil, 2<<20)},
		{"negative size", binary.BigEndian.AppendUint32(nil, 0xffffffff)},
		{"garbage produce", frame([]byte{0, 0, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 0xde, 0xad})},
		{"bad client id", frame([]byte{0, 18, 0, 0, 0, 0, 0, 1, 0x7f, 0x00})},
	}
	for _, c := range cases {
		before := acks.Load()
		nc := dial(t, f.addr)
		if _, err := nc.Write(c.send); err != nil {
			t.Fatal(err)
		}
		wait.For(t, 20*time.Second, c.name+": the agent to close the connection", func() string { return closedByAgent(nc) })
		wait.For(t, 20*time.Second, c.name+": the healthy client to keep producing", func() string {
			if acks.Load() <= before {
				return fmt.Sprintf("acks %d, fails %d (%v)", acks.Load(), fails.Load(), lastErr.Load())
			}
			return ""
		})
	}
	stop()
	<-done
	if n := fails.Load(); n != 0 {
		t.Fatalf("the healthy client saw %d failed produces, last %v", n, lastErr.Load())
	}
}

// A frame's budget stays charged until its answer: with room for one
// small request per connection, pipelined requests are still all answered
// in order (reading pauses between them, nothing fails).
func TestPipelinedRequestsWithinConnBound(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	f := startFixture(t, nil, agent.Registry(reg), agent.ConnBufferedBytes(1<<10))
	nc := dial(t, f.addr)
	var all []byte
	for i := range int32(50) {
		all = append(all, apiVersionsFrame(i)...)
	}
	if _, err := nc.Write(all); err != nil {
		t.Fatal(err)
	}
	for i := range int32(50) {
		if corr, err := readAnswer(nc, 20*time.Second); err != nil || corr != i {
			t.Fatalf("answer %d: correlation %d, %v", i, corr, err)
		}
	}
	wait.For(t, 10*time.Second, "the budget released", func() string {
		if g := gauge(t, reg, "baton_agent_buffered_request_bytes"); g != 0 {
			return fmt.Sprintf("buffered %v", g)
		}
		return ""
	})
}
