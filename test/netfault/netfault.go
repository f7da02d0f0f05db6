// Package netfault owns the network faults tests inject on loopback: real
// TCP sockets destroyed with `ss -K`, as a crash or a reset on the path
// would. It is for tests only.
package netfault

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"
)

// KillSockets destroys every TCP socket matching filter (ss syntax) with
// `ss -K`. It skips t, saying why, when ss cannot destroy sockets here
// (root and CONFIG_INET_DIAG_DESTROY are needed), found out first on a
// loopback connection of its own.
func KillSockets(t testing.TB, filter ...string) {
	t.Helper()
	if _, err := exec.LookPath("ss"); err != nil {
		t.Skipf("ss (iproute2) not installed: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	probe, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	if out, err := exec.Command("ss", "-K", "-tn", "dst", "127.0.0.1", "dport", "=", ":"+port).CombinedOutput(); err != nil {
		t.Skipf("ss -K failed (needs root and CONFIG_INET_DIAG_DESTROY): %v: %s", err, out)
	}
	probe.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := probe.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Skip("ss -K did not destroy a loopback socket (kernel without CONFIG_INET_DIAG_DESTROY?)")
	}
	if out, err := exec.Command("ss", append([]string{"-K", "-tn"}, filter...)...).CombinedOutput(); err != nil {
		t.Fatalf("ss -K %v: %v: %s", filter, err, out)
	}
}
