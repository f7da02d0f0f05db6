package upstream

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// broker listens on loopback and hands each accepted connection to serve,
// which owns it.
func broker(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(nc)
		}
	}()
	return ln.Addr().String()
}

// silent reads requests and never answers.
func silent(nc net.Conn) { io.Copy(io.Discard, nc); nc.Close() }

func testCluster(addr string) *Cluster {
	return New(Config{Name: "source", Bootstrap: []string{addr}, PoolSize: 1, DialTimeout: time.Second, ReadTimeout: time.Minute})
}

func TestSendOnDeadConnIsNotSent(t *testing.T) {
	addr := broker(t, func(nc net.Conn) { nc.Close() })
	c, err := testCluster(addr).Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(errors.New("test done"))
	deadline := time.Now().Add(10 * time.Second)
	for !c.Dead() {
		if time.Now().After(deadline) {
			t.Fatal("a connection the broker closed is not dead after 10s")
		}
		time.Sleep(time.Millisecond)
	}
	_, err = c.Send(18, 0, nil, nil, true)
	if !errors.Is(err, ErrNotSent) || !errors.Is(err, ErrConnClosed) {
		t.Fatalf("send on a dead connection: %v, want ErrNotSent and ErrConnClosed", err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "upstream: request not sent: connection closed: "+addr+": ") ||
		strings.Count(msg, "upstream:") != 1 {
		t.Errorf("message %q: want the package named once", msg)
	}
}

func TestSendvOnRefusesAnotherConnection(t *testing.T) {
	addr := broker(t, silent)
	u := testCluster(addr)
	defer u.CloseConns(errors.New("test done"))
	ctx := context.Background()
	if _, err := u.Send(ctx, addr, 0, 18, 0, nil, nil, false); err != nil {
		t.Fatal(err)
	}
	other, err := u.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(errors.New("test done"))
	_, err = u.SendvOn(ctx, addr, 0, other, 18, 0, nil, [][]byte{nil}, true)
	if !errors.Is(err, ErrNotSent) || !errors.Is(err, errEarlierInDoubt) {
		t.Fatalf("SendvOn with a connection the pool does not hold: %v, want ErrNotSent and errEarlierInDoubt", err)
	}
	if strings.Count(err.Error(), "upstream:") != 1 {
		t.Errorf("message %q: want the package named once", err)
	}
}

func TestCloseConnsFailsWaitingCallsAndRedials(t *testing.T) {
	addr := broker(t, silent)
	u := testCluster(addr)
	ctx := context.Background()
	cl, err := u.Send(ctx, addr, 7, 18, 0, nil, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	cause := errors.New("test: closed")
	u.CloseConns(cause)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cl.Wait(wctx); !errors.Is(err, ErrConnClosed) || !errors.Is(err, cause) {
		t.Fatalf("waiting call after CloseConns: %v, want ErrConnClosed wrapping the cause", err)
	}
	if answered, died := cl.Settled(); answered || died.IsZero() {
		t.Errorf("Settled() = %v, %v; want unanswered, with when the connection died", answered, died)
	}
	next, err := u.Send(ctx, addr, 7, 18, 0, nil, nil, true)
	if err != nil {
		t.Fatalf("send after CloseConns: %v, want a fresh connection", err)
	}
	if next.Conn() == cl.Conn() || next.Conn().Dead() {
		t.Error("send after CloseConns went on the closed connection")
	}
	u.CloseConns(errors.New("test done"))
}
