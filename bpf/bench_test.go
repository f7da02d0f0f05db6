package bpf_test

import (
	"net"
	"testing"

	"github.com/baton-kafka/baton/bpf"
)

// BenchmarkLoopback writes 1 KiB at a time over loopback TCP with the
// connection untracked, tracked in userspace, and tracked in eBPF: what
// one send and receive costs with each. (While eBPF counters are loaded,
// every socket of the machine pays the programs' lookup; "off" runs
// before they load.)
func BenchmarkLoopback(b *testing.B) {
	run := func(b *testing.B, wrap func(net.Conn) net.Conn) {
		client, server := loopback(b)
		w, r := wrap(client), wrap(server)
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := make([]byte, 64<<10)
			want := b.N << 10
			for got := 0; got < want; {
				n, err := r.Read(buf)
				if err != nil {
					return
				}
				got += n
			}
		}()
		buf := make([]byte, 1<<10)
		b.SetBytes(int64(len(buf)))
		b.ResetTimer()
		for range b.N {
			if _, err := w.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		<-done
	}
	b.Run("off", func(b *testing.B) { run(b, func(c net.Conn) net.Conn { return c }) })
	b.Run("userspace", func(b *testing.B) {
		u := bpf.NewUserspace()
		run(b, func(c net.Conn) net.Conn { return u.Track(c) })
	})
	b.Run("ebpf", func(b *testing.B) {
		k, err := bpf.NewEBPF()
		if err != nil {
			b.Skipf("eBPF cannot load here: %v", err)
		}
		defer k.Close()
		run(b, func(c net.Conn) net.Conn { return k.Track(c) })
	})
}
