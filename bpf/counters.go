package bpf

import (
	"errors"
	"fmt"
	"net"
)

// Errors. Every message starts with "bpf: ".
var (
	// ErrUnsupported: this build has no eBPF counters (only linux/amd64
	// has the compiled programs).
	ErrUnsupported = errors.New("bpf: eBPF counters not built for this platform")
	// ErrLoad wraps why the eBPF programs did not load or attach: most
	// often not root (no CAP_BPF and CAP_PERFMON) or a kernel without BTF.
	ErrLoad = errors.New("bpf: eBPF counters did not load")
	// ErrBadMode refuses a Mode other than auto, userspace or ebpf.
	ErrBadMode = errors.New("bpf: bad byte counter mode")
)

// Implementation names, as Counters.Impl and Conn.Impl report them.
const (
	ImplEBPF      = "ebpf"
	ImplUserspace = "userspace"
)

// Mode chooses an implementation.
type Mode string

// Modes. The zero Mode is Auto.
const (
	// Auto is eBPF when it loads, else userspace.
	Auto Mode = "auto"
	// Userspace counts Read and Write in the process.
	Userspace Mode = ImplUserspace
	// EBPF counts in the kernel and fails when it cannot load.
	EBPF Mode = ImplEBPF
)

// ParseMode is s as a Mode: "", "auto", "userspace" or "ebpf".
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "", Auto:
		return Auto, nil
	case Userspace, EBPF:
		return m, nil
	}
	return "", fmt.Errorf("%w: %q (want auto, userspace or ebpf)", ErrBadMode, s)
}

// Open returns the counters of mode m. With Auto it falls back to
// userspace when eBPF does not load, and returns why in fellBack (err is
// nil then); with EBPF that reason is err.
func Open(m Mode) (c Counters, fellBack, err error) {
	switch m {
	case "", Auto:
		c, err := NewEBPF()
		if err != nil {
			return NewUserspace(), err, nil
		}
		return c, nil, nil
	case Userspace:
		return NewUserspace(), nil, nil
	case EBPF:
		c, err := NewEBPF()
		return c, nil, err
	}
	return nil, nil, fmt.Errorf("%w: %q (want auto, userspace or ebpf)", ErrBadMode, string(m))
}

// Stats are one connection's counts since it was tracked.
type Stats struct {
	// Received is the bytes the process read from the connection's
	// socket: on a TLS connection, TLS records, not plaintext.
	Received uint64
	// Sent is the bytes the process wrote to the socket.
	Sent uint64
	// InFlight is Received less the bytes Answered reported: bytes of
	// requests received and not yet answered, including a request's part
	// read ahead of its end. Never negative.
	InFlight uint64
}

// Counters tracks connections. Implementations are safe for concurrent
// use.
type Counters interface {
	// Track starts counting c, from zero, and returns the Conn to use in
	// c's place: bytes read or written on c itself are counted by the
	// eBPF implementation but not by the userspace one. Track does not
	// fail: a connection the eBPF implementation cannot register (no
	// socket under it, its map full) is counted in userspace, and its
	// Conn.Impl says so.
	Track(c net.Conn) Conn
	// Impl is ImplEBPF or ImplUserspace.
	Impl() string
	// Close releases what the counters hold (the eBPF programs, once no
	// other Counters of the process uses them). Close the Conns first:
	// a closed Conn keeps its final Stats, an open one's read zero after.
	// A second Close does nothing.
	Close() error
}

// Conn is a tracked connection. Close closes the connection and keeps its
// final counts for Stats.
type Conn interface {
	net.Conn
	// Stats are the connection's counts. Reading them is a map lookup
	// (a system call) in eBPF: for a periodic reader, not per request.
	Stats() Stats
	// Answered says the process finished with a request of n bytes, as
	// counted by Received (a Kafka request's size field plus the 4 bytes
	// of that field): InFlight drops by n. Call it once per request,
	// answered or not (acks=0 produce). An atomic add: cheap per request.
	Answered(n int)
	// Impl is the implementation counting this connection.
	Impl() string
}

// inFlight is received less answered, floored at 0: answered can pass
// received by the bytes of a request read before tracking began.
func inFlight(received, answered uint64) uint64 {
	if answered >= received {
		return 0
	}
	return received - answered
}
