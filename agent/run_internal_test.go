package agent

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/baton-kafka/baton/internal/embedded"
)

// runAgent runs a until the test ends and returns once it serves: until
// the source has answered once the agent refuses connections, which a
// test dialing it at once on a loaded machine would see.
func runAgent(t *testing.T, a *Agent) {
	t.Helper()
	runCtx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-a.Ready():
	case err := <-ran:
		ran <- err // for the cleanup
		t.Fatalf("agent.Run returned before serving: %v", err)
	}
}

// startInternalAgent starts a kfake source of srcBrokers nodes, a one-node
// kfake destination and an agent between them with opts (quiet logs), and
// returns once it serves. Everything closes with t.
func startInternalAgent(t *testing.T, srcBrokers int, opts ...Opt) (*Agent, *embedded.Cluster, *embedded.Cluster) {
	t.Helper()
	src, err := embedded.Start(embedded.Brokers(srcBrokers))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	dst, err := embedded.Start(embedded.Brokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dst.Close)
	base := []Opt{Listen("127.0.0.1:0"), Source(src.Addrs()...), Destination(dst.Addrs()...),
		Logger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
	a, err := New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	runAgent(t, a)
	return a, src, dst
}
