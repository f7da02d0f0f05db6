// Package saslfake owns a minimal Kafka-like broker for the agent's upstream
// SASL tests, for what kfake does not do: it
// speaks SaslHandshake v1 / SaslAuthenticate v1 and, like Kafka's
// SocketServer, closes a connection that sends any other request before
// authentication is complete, or after its session lifetime ended (KIP-368:
// "Disconnecting expired channel"). Every other request is answered with an
// ApiVersions v0 body (tests send ApiVersions v0).
package saslfake

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
)

// Broker is one fake broker.
type Broker struct {
	Addr string
	ln   net.Listener
	// Steps are the client messages expected, in order; the last one
	// completes authentication. Each step answers "challenge-<i>".
	Steps []string
	// Lifetime is the SessionLifetimeMillis returned (0: none).
	Lifetime time.Duration
	// RejectAuth makes every new SaslAuthenticate fail with
	// SASL_AUTHENTICATION_FAILED, as Kafka answers a wrong password.
	RejectAuth atomic.Bool
	// HangNew makes new connections read and never answer.
	HangNew atomic.Bool
	// Hold, while set, delays answers to non-SASL requests until cleared.
	Hold atomic.Bool

	mu   sync.Mutex
	Seen [][]byte // SASL auth bytes received, all connections
	// Expired counts connections closed for an expired session, and
	// Unauthed those closed for a request before auth completed.
	Expired, Unauthed atomic.Int32
	// Accepted counts connections accepted.
	Accepted atomic.Int32
}

// New starts a broker; Close stops it.
func New(steps []string, lifetime time.Duration) (*Broker, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &Broker{Addr: ln.Addr().String(), ln: ln, Steps: steps, Lifetime: lifetime}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			b.Accepted.Add(1)
			go b.serve(nc)
		}
	}()
	return b, nil
}

func (b *Broker) Close() { b.ln.Close() }

// SeenAuth returns the SASL messages received.
func (b *Broker) SeenAuth() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, s := range b.Seen {
		out = append(out, string(s))
	}
	return out
}

func (b *Broker) serve(nc net.Conn) {
	defer nc.Close()
	if b.HangNew.Load() {
		io.Copy(io.Discard, nc)
		return
	}
	br := bufio.NewReader(nc)
	step := 0
	authed := false
	var expires time.Time
	var wmu sync.Mutex
	write := func(corr int32, body []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		buf := make([]byte, 8, 8+len(body))
		binary.BigEndian.PutUint32(buf, uint32(4+len(body)))
		binary.BigEndian.PutUint32(buf[4:], uint32(corr))
		_, err := nc.Write(append(buf, body...))
		return err
	}
	// Answers to requests after authentication go out in request order,
	// as a broker's do, from one goroutine that waits while Hold is set.
	type answer struct {
		corr int32
		body []byte
	}
	answers := make(chan answer, 1024)
	defer close(answers)
	go func() {
		for a := range answers {
			for b.Hold.Load() {
				time.Sleep(5 * time.Millisecond)
			}
			if write(a.corr, a.body) != nil {
				nc.Close()
			}
		}
	}()
	for {
		var sz [4]byte
		if _, err := io.ReadFull(br, sz[:]); err != nil {
			return
		}
		frame := make([]byte, binary.BigEndian.Uint32(sz[:]))
		if _, err := io.ReadFull(br, frame); err != nil {
			return
		}
		key := int16(binary.BigEndian.Uint16(frame))
		ver := int16(binary.BigEndian.Uint16(frame[2:]))
		corr := int32(binary.BigEndian.Uint32(frame[4:]))
		cidLen := int16(binary.BigEndian.Uint16(frame[8:]))
		body := frame[10:]
		if cidLen > 0 {
			body = body[cidLen:]
		}
		switch key {
		case 17: // SaslHandshake
			resp := kmsg.NewPtrSASLHandshakeResponse()
			resp.SetVersion(ver)
			resp.SupportedMechanisms = []string{"TEST"}
			if err := write(corr, resp.AppendTo(nil)); err != nil {
				return
			}
			continue
		case 36: // SaslAuthenticate
			req := kmsg.NewPtrSASLAuthenticateRequest()
			req.SetVersion(ver)
			if err := req.ReadFrom(body); err != nil {
				return
			}
			b.mu.Lock()
			b.Seen = append(b.Seen, append([]byte(nil), req.SASLAuthBytes...))
			b.mu.Unlock()
			resp := kmsg.NewPtrSASLAuthenticateResponse()
			resp.SetVersion(ver)
			if b.RejectAuth.Load() || step >= len(b.Steps) || string(req.SASLAuthBytes) != b.Steps[step] {
				resp.ErrorCode = 58 // SASL_AUTHENTICATION_FAILED
				write(corr, resp.AppendTo(nil))
				return
			}
			resp.SASLAuthBytes = []byte("challenge-" + string(rune('0'+step)))
			step++
			if step == len(b.Steps) {
				authed = true
				resp.SessionLifetimeMillis = b.Lifetime.Milliseconds()
				if b.Lifetime > 0 {
					expires = time.Now().Add(b.Lifetime)
				}
			}
			if err := write(corr, resp.AppendTo(nil)); err != nil {
				return
			}
			continue
		}
		if !authed {
			b.Unauthed.Add(1)
			return // Kafka: unexpected request during SASL: closed
		}
		if !expires.IsZero() && time.Now().After(expires) {
			b.Expired.Add(1)
			return // Kafka: "Disconnecting expired channel"
		}
		resp := kmsg.NewPtrApiVersionsResponse()
		resp.SetVersion(0)
		resp.ApiKeys = []kmsg.ApiVersionsResponseApiKey{{ApiKey: 18, MinVersion: 0, MaxVersion: 0}}
		out := resp.AppendTo(nil)
		answers <- answer{corr, out} // in order, held while Hold is set

	}
}

// Mechanism is a client for Broker: it writes steps[0] first and, per
// challenge, the next step; with FinalDone, the last step is returned
// together with done=true (the sasl.Session contract: "an additional last
// message to be written").
type Mechanism struct {
	Steps     []string
	FinalDone bool
	Host      atomic.Pointer[string] // the host Authenticate was given
}

func (m *Mechanism) Name() string { return "TEST" }

type session struct {
	m *Mechanism
	i int
}

func (m *Mechanism) Authenticate(_ context.Context, host string) (sasl.Session, []byte, error) {
	m.Host.Store(&host)
	return &session{m: m, i: 1}, []byte(m.Steps[0]), nil
}

func (s *session) Challenge(_ []byte) (bool, []byte, error) {
	if s.i >= len(s.m.Steps) {
		return true, nil, nil
	}
	msg := []byte(s.m.Steps[s.i])
	s.i++
	if s.m.FinalDone && s.i == len(s.m.Steps) {
		return true, msg, nil // done, with a last message to write
	}
	return false, msg, nil
}
