package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
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

// killSockets destroys every TCP socket to 127.0.0.1:port with `ss -K`, as a
// broker restart or a middlebox reset would. It skips t when the kernel
// cannot destroy sockets (CONFIG_INET_DIAG_DESTROY) or ss is missing.
func killSockets(t *testing.T, port string) {
	t.Helper()
	if _, err := exec.LookPath("ss"); err != nil {
		t.Skipf("ss (iproute2) not installed: %v", err)
	}
	out, err := exec.Command("ss", "-K", "-tn", "dst", "127.0.0.1", "dport", "=", ":"+port).CombinedOutput()
	if err != nil {
		t.Skipf("ss -K failed (needs root and CONFIG_INET_DIAG_DESTROY): %v: %s", err, out)
	}
	left, _ := exec.Command("ss", "-Htn", "state", "established", "dst", "127.0.0.1", "dport", "=", ":"+port).CombinedOutput()
	if len(bytes.TrimSpace(left)) != 0 {
		t.Skipf("ss -K left sockets to port %s open (kernel without CONFIG_INET_DIAG_DESTROY?): %s", port, left)
	}
}

// TestSocketsKilledUnderTheAgent: every upstream socket of the agent is
// destroyed while it idles (ss -K), as when brokers restart. Each of ten
// kcat runs through the agent afterwards must deliver: a dead pooled
// connection is redialed, never handed out again.
func TestSocketsKilledUnderTheAgent(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Skipf("kcat not installed (test/clients/install.sh): %v", err)
	}
	f := startFixture(t, nil)
	topic := "restarts"
	createTopic(t, f.src.Bootstrap(), topic, 1)
	ctx := t.Context()
	if err := kcatProduce(ctx, f.addr, topic, "warm-up"); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	for _, a := range f.src.Addrs() {
		_, port, _ := net.SplitHostPort(a)
		killSockets(t, port)
	}
	failed := 0
	for i := range 10 {
		if err := kcatProduce(ctx, f.addr, topic, fmt.Sprintf("after-%d", i)); err != nil {
			failed++
			t.Errorf("run %d after the sockets died: %v", i, err)
		}
	}
	t.Logf("%d of 10 kcat runs delivered after ss -K", 10-failed)
}
