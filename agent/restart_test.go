package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/baton-kafka/baton/agent"
)

// kcatProduce runs `kcat -P` through addr once, writing one record to topic,
// and returns kcat's error with its stderr when it did not deliver.
func kcatProduce(ctx context.Context, addr, topic, value string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kcat", "-F", "none", "-P", "-b", addr, "-t", topic, "-p", "0",
		"-X", "acks=all", "-X", "message.timeout.ms=15000", "-v", "-v")
	cmd.Stdin = strings.NewReader(value + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err == nil && !strings.Contains(stderr.String(), "Message delivered") {
		err = fmt.Errorf("no delivery report")
	}
	if err != nil {
		return fmt.Errorf("kcat -P: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// killSockets destroys every TCP socket matching filter (ss syntax) with
// `ss -K`, as a crash or a reset on the path would. It skips t when ss
// cannot destroy sockets here (root and CONFIG_INET_DIAG_DESTROY needed),
// found out on a loopback connection of its own first.
func killSockets(t *testing.T, filter ...string) {
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

// TestSocketsKilledUnderTheAgent: every upstream socket of the agent is
// destroyed while it idles (ss -K), on the agent's side or on the
// brokers' (which then reset the agent's), as when brokers restart. The
// next produce on each pooled connection must land at the first try (the
// dead connection is noticed and redialed, or the request that could not
// be written is sent again on a fresh one: it never reached the broker),
// and each of ten kcat runs through the agent afterwards must deliver.
func TestSocketsKilledUnderTheAgent(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Skipf("kcat not installed (test/clients/install.sh): %v", err)
	}
	for _, side := range []struct {
		name   string
		filter func(port string) []string
	}{
		{"agent side", func(port string) []string { return []string{"dst", "127.0.0.1", "dport", "=", ":" + port} }},
		{"broker side", func(port string) []string { return []string{"src", "127.0.0.1", "sport", "=", ":" + port} }},
	} {
		t.Run(side.name, func(t *testing.T) {
			t.Parallel()
			f := startFixture(t, nil)
			topic := "restarts"
			createTopic(t, f.src.Bootstrap(), topic, 1)
			ctx := t.Context()
			// One raw produce per pooled connection (client connections
			// take the pool's slots in turn).
			for i := range agent.DefaultUpstreamConns {
				if code := produceRaw(t, f.addr, topic, fmt.Sprint("warm-up-", i)); code != 0 {
					t.Fatalf("warm-up %d: %v", i, kerr.ErrorForCode(code))
				}
			}
			for _, a := range f.src.Addrs() {
				_, port, _ := net.SplitHostPort(a)
				killSockets(t, side.filter(port)...)
			}
			for i := range agent.DefaultUpstreamConns {
				if code := produceRaw(t, f.addr, topic, fmt.Sprint("first-", i)); code != 0 {
					t.Errorf("first produce on pooled connection %d after the sockets died: %v", i, kerr.ErrorForCode(code))
				}
			}
			failed := 0
			for i := range 10 {
				if err := kcatProduce(ctx, f.addr, topic, fmt.Sprintf("after-%d", i)); err != nil {
					failed++
					t.Errorf("run %d after the sockets died: %v", i, err)
				}
			}
			t.Logf("%d of 10 kcat runs delivered after ss -K on the %s", 10-failed, side.name)
		})
	}
}
