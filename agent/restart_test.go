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

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/test/netfault"
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
				netfault.KillSockets(t, side.filter(port)...)
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
