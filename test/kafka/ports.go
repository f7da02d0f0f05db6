package kafka

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Why ports are not picked with bind(127.0.0.1:0): a JVM binds its ports
// seconds after they were picked, and in that window any other listener on
// the machine that binds port 0 (a kfake broker, an httptest server, another
// test binary's cluster: go test runs packages in parallel) can be handed the
// same port by the kernel. The node then fails to bind, but a foreign broker
// answers at its address, and clients of this cluster end up writing to
// another one (seen in CI: acks from one cluster, an empty topic in the other).
//
// So ports come from below the kernel's ephemeral range, where port 0 binds
// and outgoing connections never land, and each is reserved with an flock on
// a file in a machine-wide folder for the cluster's life, so that two
// harness users never pick the same one. The lock goes with the process, so
// a crashed test leaves nothing to clean up.

const (
	// portRangeLow is the lowest port picked. Below it live well-known
	// and commonly configured ports (9092, 2181, 8080 ...).
	portRangeLow = 20000
	// minPortRange is the smallest usable range below the ephemeral one;
	// with less, reservePorts falls back to bind(0).
	minPortRange = 2000
)

// portLocks holds flocked files, one per reserved port.
type portLocks []*os.File

// release unlocks and closes every lock.
func (l portLocks) release() {
	for _, f := range l {
		_ = f.Close() // closing drops the flock
	}
}

// reservePorts returns n distinct free loopback ports and the locks that
// keep other harness users off them until release.
func reservePorts(n int) ([]int, portLocks, error) {
	high := ephemeralLow() // exclusive
	if high-portRangeLow < minPortRange {
		ports, err := bindZeroPorts(n)
		return ports, nil, err
	}
	dir := portLockDir()
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, nil, fmt.Errorf("kafka: port lock folder: %w", err)
	}
	var (
		ports []int
		locks portLocks
		seen  = map[int]bool{}
	)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 50*n {
			locks.release()
			return nil, nil, fmt.Errorf("kafka: no free loopback port in [%d, %d) after %d tries", portRangeLow, high, tries)
		}
		p := portRangeLow + rand.IntN(high-portRangeLow)
		if seen[p] {
			continue
		}
		seen[p] = true
		f, err := lockPort(dir, p)
		if err != nil {
			continue // another harness user holds it
		}
		if !portFree(p) {
			_ = f.Close()
			continue
		}
		ports = append(ports, p)
		locks = append(locks, f)
	}
	return ports, locks, nil
}

// portLockDir is the machine-wide folder of port lock files.
func portLockDir() string { return filepath.Join(os.TempDir(), "baton-kafka-ports") }

func lockPort(dir string, p int) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)+".lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// portFree reports whether 127.0.0.1:p can be bound now.
func portFree(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// ephemeralLow returns the first port of the kernel's ephemeral range
// (32768, Linux's default, where it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 32768
	}
	v, err := strconv.Atoi(f[0])
	if err != nil || v <= 0 {
		return 32768
	}
	return v
}

// bindZeroPorts is the fallback: n distinct ports from bind(0), held until
// all are picked.
func bindZeroPorts(n int) ([]int, error) {
	ports := make([]int, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, errors.Join(errors.New("kafka: picking a free loopback port"), err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// ReservePorts returns n distinct free loopback ports, reserved against every
// other user of this harness on the machine (brokers of other tests, other
// worktrees) until release is called. Tests that start their own listeners
// next to Kafka clusters (a control plane, say, which must come back on the
// same port after a restart) take their ports here.
func ReservePorts(n int) (ports []int, release func(), err error) {
	ports, locks, err := reservePorts(n)
	if err != nil {
		return nil, nil, err
	}
	return ports, locks.release, nil
}
