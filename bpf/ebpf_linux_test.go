//go:build linux && (386 || amd64)

package bpf_test

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/baton-kafka/baton/bpf"
)

// openEBPF loads the eBPF counters or skips the test when this machine
// cannot load any (not root, no BTF): only those load errors skip; any
// other, a program the verifier refuses included, fails.
func openEBPF(t *testing.T) bpf.Counters {
	t.Helper()
	c, err := bpf.NewEBPF()
	switch {
	case err == nil:
		t.Cleanup(func() { c.Close() })
		return c
	case errors.Is(err, os.ErrPermission), errors.Is(err, ebpf.ErrNotSupported), errors.Is(err, btf.ErrNotFound):
		t.Skipf("eBPF cannot load here: %v", err)
	default:
		t.Fatalf("eBPF counters did not load: %v", err)
	}
	return nil
}

// TestEBPFMatchesUserspace moves 100 MiB each way over loopback TCP at
// once and checks the kernel's counts against the userspace wrapper's on
// the same connection, on both ends.
func TestEBPFMatchesUserspace(t *testing.T) {
	const size = 100 << 20
	counters := openEBPF(t)
	if counters.Impl() != bpf.ImplEBPF {
		t.Fatalf("Impl = %q", counters.Impl())
	}
	client, server := loopback(t)
	kc, ks := counters.Track(client), counters.Track(server)
	if kc.Impl() != bpf.ImplEBPF || ks.Impl() != bpf.ImplEBPF {
		t.Fatalf("tracked in %q and %q, want ebpf: no socket cookie?", kc.Impl(), ks.Impl())
	}
	user := bpf.NewUserspace()
	uc, us := user.Track(kc), user.Track(ks)
	exchange(t, uc, us, size, size)
	ks.Answered(size / 2)
	us.Answered(size / 2)

	for _, side := range []struct {
		name       string
		kern, user bpf.Conn
	}{{"client", kc, uc}, {"server", ks, us}} {
		k, u := side.kern.Stats(), side.user.Stats()
		t.Logf("%s: ebpf %+v, userspace %+v", side.name, k, u)
		if u.Received != size || u.Sent != size {
			t.Errorf("%s: userspace counted %+v, want %d each way", side.name, u, size)
		}
		for _, f := range []struct {
			name       string
			kern, user uint64
		}{{"Received", k.Received, u.Received}, {"Sent", k.Sent, u.Sent}, {"InFlight", k.InFlight, u.InFlight}} {
			if !within(f.kern, f.user, 0.01) {
				t.Errorf("%s %s: ebpf %d, userspace %d: more than 1 %% apart", side.name, f.name, f.kern, f.user)
			}
		}
	}

	// Close keeps the final counts and unregisters the socket.
	want := ks.Stats()
	if err := us.Close(); err != nil {
		t.Fatal(err)
	}
	if got := ks.Stats(); got != want {
		t.Errorf("Stats after Close = %+v, want %+v", got, want)
	}
}

// TestEBPFSkipsPeekAndUntracked: a MSG_PEEK read is not counted (the read
// that takes the bytes is), and bytes on a connection not tracked are not
// counted on the tracked one.
func TestEBPFSkipsPeekAndUntracked(t *testing.T) {
	counters := openEBPF(t)
	client, server := loopback(t)
	ks := counters.Track(server)
	// Untracked traffic on another connection.
	oc, os2 := loopback(t)
	exchange(t, oc, os2, 1<<20, 1<<20)

	if _, err := client.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	rc, err := server.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var peeked int
	var perr error
	// Read blocks (in the runtime's poller) until data is there.
	if err := rc.Read(func(fd uintptr) bool {
		peeked, _, perr = syscall.Recvfrom(int(fd), make([]byte, 1000), syscall.MSG_PEEK)
		return perr != syscall.EAGAIN
	}); err != nil || perr != nil {
		t.Fatal(err, perr)
	}
	if peeked == 0 {
		t.Fatal("peeked nothing")
	}
	if got := ks.Stats().Received; got != 0 {
		t.Fatalf("after a MSG_PEEK of %d bytes Received = %d, want 0", peeked, got)
	}
	buf := make([]byte, 1000)
	n := 0
	for n < len(buf) {
		r, err := ks.Read(buf[n:])
		if err != nil {
			t.Fatal(err)
		}
		n += r
	}
	if got := ks.Stats(); got.Received != 1000 || got.Sent != 0 {
		t.Fatalf("Stats = %+v, want Received 1000, Sent 0", got)
	}
}

func within(a, b uint64, frac float64) bool {
	if a == b {
		return true
	}
	d := float64(a) - float64(b)
	if d < 0 {
		d = -d
	}
	return d <= frac*float64(max(a, b))
}
