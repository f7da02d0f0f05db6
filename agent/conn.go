package agent

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"time"

	"github.com/baton-kafka/baton/agent/internal/framing"
	"github.com/baton-kafka/baton/bpf"
	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/internal/bufpool"
)

// maxPipelined bounds the requests one connection may have in flight in the
// agent; reading stops (TCP backpressure) past it. Clients keep at most 5
// produce requests in flight per broker, so this is rarely reached.
const maxPipelined = 128

// queued is a request on its way through a connection, with the pooled
// frame its decoded fields point into.
type queued struct {
	s     *filter.Started
	frame []byte
}

// serveConn serves one client connection: a reader that decodes requests
// and runs the request side of the chain in order, and a writer that waits
// for each answer and writes responses in the same order. A request a
// filter holds does not stop the reader: the chain queues the requests
// behind it, and the reader goes on until the queue or the connection's
// byte budget is full, so it sees a client that closes its connection and
// ends the hold (cancel).
func (a *Agent) serveConn(ctx context.Context, id uint64, nc net.Conn) {
	log := a.log.With("conn", id, "remote", nc.RemoteAddr().String())
	a.metrics.conns.Inc()
	defer a.metrics.conns.Dec()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer nc.Close()
	// Count the socket's bytes beneath TLS (what eBPF sees too).
	tc := a.track(id, a.counters.Track(nc), nc.RemoteAddr().String())
	defer a.untrack(tc)
	nc = tc.conn
	if a.cfg.clientSec.TLS != nil {
		tc, err := a.handshakeTLS(ctx, nc)
		if err != nil {
			return
		}
		nc = tc
	}

	info := filter.ConnInfo{ID: id, Remote: nc.RemoteAddr().String(), Local: nc.LocalAddr().String()}
	rt := a.newRouter(id)
	defer func() { a.unbind(rt.pair) }()
	defer rt.close() // after the writer: nothing waits on them then
	ctx = withRouter(ctx, rt)
	chain := filter.NewChain(info, a.filters, rt)
	queue := make(chan queued, maxPipelined)
	writerDone := make(chan struct{})
	budget := a.budget.ForConn()

	go func() {
		defer close(writerDone)
		if err := a.writeResponses(ctx, nc, chain, queue, budget, tc.conn); err != nil {
			log.Info("closing connection", "err", err)
		}
		cancel()
		nc.Close() // unblock the reader
		// Finish what is still queued, unwritten, so that every exchange
		// runs its response side once (filters and drain counts see it
		// end) and its buffer goes back to the pool and the budget.
		for q := range queue {
			chain.Response(ctx, q.s)
			budget.Release(int64(len(q.frame)))
			bufpool.Put(q.frame)
		}
	}()

	fr := framing.NewReader(nc, budget, framing.Limits{
		MaxFrame: a.cfg.maxFrame, FrameTimeout: a.cfg.frameTimeout, IdleTimeout: a.cfg.idleTimeout,
	})
	for {
		frame, err := fr.Next(ctx)
		if err != nil {
			switch {
			case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), ctx.Err() != nil:
				log.Debug("client closed connection")
			case errors.Is(err, framing.ErrIdleTimeout):
				// Kafka closes idle connections as quietly; clients reconnect.
				log.Debug("closing idle connection", "err", err)
			case errors.Is(err, framing.ErrFrameTooLarge), errors.Is(err, framing.ErrFrameTimeout):
				a.metrics.badFrames.Inc()
				log.Warn("closing connection: request frame over a limit; raise the option named if the client is legitimate", "err", err)
			default:
				a.metrics.badFrames.Inc()
				log.Warn("closing connection: bad frame", "err", err)
			}
			break
		}
		x, err := framing.ParseRequest(frame)
		if err != nil {
			budget.Release(int64(len(frame)))
			bufpool.Put(frame)
			a.metrics.badFrames.Inc()
			log.Warn("closing connection: malformed request", "err", err)
			break
		}
		x.Received = time.Now()
		tc.sawClientID(x.Header.ClientID)
		queue <- queued{chain.Request(ctx, x), frame}
	}
	close(queue)
	cancel() // answers still pending are not wanted: the client is gone
	<-writerDone
}

// writeResponses writes answers in request order. It returns when the
// queue closes or an exchange must close the connection.
func (a *Agent) writeResponses(ctx context.Context, nc net.Conn, chain *filter.Chain, queue <-chan queued, budget *framing.ConnBudget, counted bpf.Conn) error {
	bw := bufio.NewWriterSize(nc, 64<<10)
	var buf []byte
	for q := range queue {
		chain.Response(ctx, q.s)
		// The request's bytes as the socket received them: its size
		// field and frame. Answered once written (or with no answer).
		wire := 4 + len(q.frame)
		// Filters are done with the exchange: its request frame goes back
		// to the pool (the filter contract forbids keeping it) and its bytes
		// to the budget, which lets the reader take the next request.
		budget.Release(int64(len(q.frame)))
		bufpool.Put(q.frame)
		x := q.s.X
		if x.Err != nil {
			bw.Flush()
			return x.Err
		}
		if x.NoResponse {
			counted.Answered(wire)
			continue
		}
		buf = append(buf[:0], 0, 0, 0, 0)
		buf = binary.BigEndian.AppendUint32(buf, uint32(x.Header.CorrelationID))
		if framing.ResponseHeaderFlexible(x.Header.APIKey, x.Header.APIVersion) {
			buf = append(buf, 0)
		}
		if x.Resp != nil {
			x.Resp.SetVersion(x.Header.APIVersion)
			buf = x.Resp.AppendTo(buf)
		} else {
			buf = append(buf, x.RawResp...)
		}
		binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
		if _, err := bw.Write(buf); err != nil {
			return err
		}
		counted.Answered(wire)
		if x.CloseAfter {
			if err := bw.Flush(); err != nil {
				return err
			}
			return errCloseAfter
		}
		if len(queue) == 0 {
			if err := bw.Flush(); err != nil {
				return err
			}
		}
	}
	return bw.Flush()
}
