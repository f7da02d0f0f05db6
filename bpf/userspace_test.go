package bpf_test

import (
	"errors"
	"io"
	"net"
	"testing"

	"github.com/baton-kafka/baton/bpf"
)

func TestParseMode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want bpf.Mode
		err  error
	}{
		{"", bpf.Auto, nil},
		{"auto", bpf.Auto, nil},
		{"userspace", bpf.Userspace, nil},
		{"ebpf", bpf.EBPF, nil},
		{"eBPF", "", bpf.ErrBadMode},
		{"kernel", "", bpf.ErrBadMode},
	}
	for _, c := range cases {
		got, err := bpf.ParseMode(c.in)
		if got != c.want || !errors.Is(err, c.err) {
			t.Errorf("ParseMode(%q) = %q, %v; want %q, %v", c.in, got, err, c.want, c.err)
		}
	}
	if _, _, err := bpf.Open("kernel"); !errors.Is(err, bpf.ErrBadMode) {
		t.Errorf("Open(kernel) err = %v, want ErrBadMode", err)
	}
}

// loopback is a connected TCP pair on 127.0.0.1.
func loopback(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// exchange sends up bytes from a to b and down bytes from b to a at the
// same time, in chunks of a plain loop (not io.Copy, which may splice).
func exchange(t testing.TB, a, b net.Conn, up, down int) {
	t.Helper()
	errs := make(chan error, 4)
	send := func(c net.Conn, n int) {
		buf := make([]byte, 64<<10)
		for n > 0 {
			w, err := c.Write(buf[:min(n, len(buf))])
			n -= w
			if err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}
	recv := func(c net.Conn, n int) {
		buf := make([]byte, 48<<10) // not the writer's size: reads split writes
		for n > 0 {
			r, err := c.Read(buf[:min(n, len(buf))])
			n -= r
			if err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}
	go send(a, up)
	go recv(b, up)
	go send(b, down)
	go recv(a, down)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestUserspace(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		up, down   int
		answered   []int
		wantFlight uint64
	}{
		{"idle", 0, 0, nil, 0},
		{"one way", 1000, 0, []int{400}, 600},
		{"both ways", 3 << 20, 1 << 20, []int{1 << 20, 1 << 20}, 1 << 20},
		{"all answered", 500, 20, []int{250, 250}, 0},
		{"answered past received floors at 0", 10, 0, []int{20}, 0},
		{"non-positive answers ignored", 10, 0, []int{0, -5}, 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			counters := bpf.NewUserspace()
			if counters.Impl() != bpf.ImplUserspace {
				t.Fatalf("Impl = %q", counters.Impl())
			}
			client, server := loopback(t)
			tc := counters.Track(server)
			if tc.Impl() != bpf.ImplUserspace {
				t.Fatalf("Conn.Impl = %q", tc.Impl())
			}
			exchange(t, client, tc, c.up, c.down)
			for _, n := range c.answered {
				tc.Answered(n)
			}
			got := tc.Stats()
			want := bpf.Stats{Received: uint64(c.up), Sent: uint64(c.down), InFlight: c.wantFlight}
			if got != want {
				t.Errorf("Stats = %+v, want %+v", got, want)
			}
			if err := tc.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := client.Read(make([]byte, 1)); err != io.EOF {
				t.Errorf("Close did not close the connection: read %v", err)
			}
			if got2 := tc.Stats(); got2 != got {
				t.Errorf("Stats after Close = %+v, want %+v", got2, got)
			}
		})
	}
}
