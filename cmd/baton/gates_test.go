package main

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/httpapi"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
)

// TestMigrateGatesFromTheCLI: `baton topic migrate` refuses while a gate
// refuses, printing which gate and why and how to force it; `--force=GATE`
// starts the cutover, and the event log records the gate forced past. The
// gate here is forgotten-producer: a producer writes the topic's source
// directly, with no agent at all, while the topic is in PROXY.
func TestMigrateGatesFromTheCLI(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a control plane process with embedded etcd and kfake clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	src, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	dst, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dst.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(src.Addrs()...), kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("before")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	api, log := startControlPlane(t, "--source", src.Bootstrap(), "--destination", dst.Bootstrap(), "--write-guard", "none",
		"--data-dir", filepath.Join(t.TempDir(), "etcd"), "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--bypass-grace", "1s", "--cutover-timeout", "40s")
	cli := func(args ...string) (string, error) { return runCLI(append(args, "--server", api)...) }
	if _, err := cli("topic", "add", "orders"); err != nil {
		t.Fatalf("topic add: %v\n%s", err, log)
	}

	// The producer around the agents, until the control plane reports it.
	wait.For(t, 2*time.Minute, "a forgotten_producer event", func() string {
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("around the agents")}).FirstErr(); err != nil {
			return err.Error()
		}
		out, err := cli("events", "--topic", "orders")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, controlplane.EventForgottenProducer) {
			return "events:\n" + out
		}
		return ""
	})
	_, err = cli("topic", "migrate", "orders")
	var ae *httpapi.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict {
		t.Fatalf("topic migrate with a forgotten producer: %v; want 409, the gate refusing", err)
	}
	for _, want := range []string{"gate forgotten-producer: a producer wrote the source directly", "--force=forgotten-producer"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if _, err := cli("topic", "migrate", "orders", "--force", "bogus"); err == nil || !strings.Contains(err.Error(), `unknown gate "bogus"`) {
		t.Errorf("--force bogus: %v; want the gate name refused", err)
	}

	// Forced past the forgotten producer (once the time lag, which
	// nothing forces here, passes too).
	wait.For(t, 2*time.Minute, "the forced migrate to start", func() string {
		_, err := cli("topic", "migrate", "orders", "--force=forgotten-producer")
		if errors.As(err, &ae) && ae.Status == http.StatusConflict && strings.Contains(ae.Message, "gate time-lag") {
			return err.Error()
		}
		if err != nil {
			t.Fatalf("migrate --force=forgotten-producer: %v", err)
		}
		return ""
	})
	out, err := cli("events", "--topic", "orders")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "forced past gate forgotten-producer") {
		t.Errorf("the event log does not record the gate forced past:\n%s", out)
	}
}
