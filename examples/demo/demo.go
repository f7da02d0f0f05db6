// Package demo owns `baton demo`: two embedded Kafka clusters, an agent, a
// live producer writing through it, and a cutover, narrated on screen. It
// grows with Baton: each capability that lands (replicator, control plane)
// joins the demo, and the demo says plainly which steps are still to come.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/test/embedded"
)

// Config says what the demo runs. Start from DefaultConfig.
type Config struct {
	// Topic the producer writes.
	Topic string
	// Partitions of Topic on both clusters.
	Partitions int32
	// Rate is records per second.
	Rate int
	// Phase is how long each of PROXY and COMPLETE lasts.
	Phase time.Duration
	// Out receives the narration.
	Out io.Writer
}

// DefaultConfig is what `baton demo` runs: 200 records/s into a
// 6-partition topic, 4 s in PROXY and 4 s in COMPLETE.
func DefaultConfig(out io.Writer) Config {
	return Config{Topic: "orders", Partitions: 6, Rate: 200, Phase: 4 * time.Second, Out: out}
}

// Run runs the demo until it finishes or ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Rate < 1 || cfg.Phase <= 0 || cfg.Partitions < 1 || cfg.Topic == "" {
		return errors.New("demo: Topic, Partitions, Rate and Phase must be set")
	}
	say := func(format string, args ...any) { fmt.Fprintf(cfg.Out, format+"\n", args...) }
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	src, err := embedded.Start()
	if err != nil {
		return fmt.Errorf("starting source cluster: %w", err)
	}
	defer src.Close()
	dst, err := embedded.Start()
	if err != nil {
		return fmt.Errorf("starting destination cluster: %w", err)
	}
	defer dst.Close()
	say("source cluster:      %s (embedded, 3 brokers)", src.Bootstrap())
	say("destination cluster: %s (embedded, 3 brokers)", dst.Bootstrap())
	for _, c := range []*embedded.Cluster{src, dst} {
		if err := createTopic(ctx, c.Bootstrap(), cfg.Topic, cfg.Partitions); err != nil {
			return err
		}
	}
	say("topic %q created on both with %d partitions", cfg.Topic, cfg.Partitions)

	routes := agent.NewRouteTable([]agent.Route{{Topic: cfg.Topic, State: agent.Proxy}})
	ag, err := agent.New(agent.Listen("127.0.0.1:0"), agent.Source(src.Addrs()...), agent.Destination(dst.Addrs()...),
		agent.Routes(routes), agent.Logger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return err
	}
	agentDone := make(chan error, 1)
	go func() { agentDone <- ag.Run(ctx) }()
	say("agent listening on %s; the producer bootstraps from it, not from a cluster", ag.Addr())

	var p producerStats
	prodDone := make(chan error, 1)
	go func() { prodDone <- produce(ctx, ag.Addr(), cfg, &p) }()

	show := func(phase string, d time.Duration) {
		end := time.Now().Add(d)
		for time.Now().Before(end) && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			s, _ := endOffsets(ctx, src.Bootstrap(), cfg.Topic)
			dd, _ := endOffsets(ctx, dst.Bootstrap(), cfg.Topic)
			say("  [%-9s] sent %5d  acked %5d  failed %3d | source holds %5d  destination holds %5d",
				phase, p.sent.Load(), p.acked.Load(), p.failed.Load(), s, dd)
		}
	}

	say("\n1. PROXY: the agent forwards every produce to the source, verbatim")
	show("PROXY", cfg.Phase)

	say("\n2. MIGRATING: the agent holds new produce requests (hold mode)")
	say("   (no replicator yet, so there is no lag to drain: the hold is kept short)")
	routes.Replace([]agent.Route{{Topic: cfg.Topic, State: agent.Migrating}})
	show("MIGRATING", time.Second)

	say("\n3. COMPLETE: held requests and new ones go to the destination")
	routes.Replace([]agent.Route{{Topic: cfg.Topic, State: agent.Complete}})
	show("COMPLETE", cfg.Phase)

	p.stop.Store(true)
	if err := <-prodDone; err != nil {
		return err
	}
	s, err := endOffsets(ctx, src.Bootstrap(), cfg.Topic)
	if err != nil {
		return err
	}
	d, err := endOffsets(ctx, dst.Bootstrap(), cfg.Topic)
	if err != nil {
		return err
	}
	say("\nproducer: %d records acked, %d failed; source holds %d, destination holds %d (sum %d)",
		p.acked.Load(), p.failed.Load(), s, d, s+d)
	if p.failed.Load() > 0 {
		return fmt.Errorf("demo: %d records failed", p.failed.Load())
	}
	if s+d != p.acked.Load() {
		return fmt.Errorf("demo: %d records acked but the clusters hold %d", p.acked.Load(), s+d)
	}
	say("every acked record is in exactly one cluster; the producer never restarted.")
	say("\nNot in this demo yet: the replicator (copying the %d source records to the destination", s)
	say("with offset parity) and the control plane (leases, drain, timeouts, rollback). The agent's")
	say("routes were flipped by the demo itself. See README.md for what is built.")
	cancel()
	return <-agentDone
}

type producerStats struct {
	sent, acked, failed atomic.Int64
	stop                atomic.Bool
}

func createTopic(ctx context.Context, bootstrap, topic string, partitions int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(bootstrap, ",")...))
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("creating topic %q on %s: %w", topic, bootstrap, err)
	}
	return nil
}

// produce writes through the agent until p.stop. Idempotence is off: the
// agent does not yet map producer ids between clusters (see docs/agent.md).
func produce(ctx context.Context, bootstrap string, cfg Config, p *producerStats) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.DefaultProduceTopic(cfg.Topic),
		kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		return err
	}
	defer cl.Close()
	tick := time.NewTicker(time.Second / time.Duration(cfg.Rate))
	defer tick.Stop()
	for !p.stop.Load() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		n := p.sent.Add(1)
		key := "customer-" + strconv.FormatInt(n%50, 10)
		cl.Produce(ctx, &kgo.Record{Key: []byte(key), Value: []byte("order " + strconv.FormatInt(n, 10))},
			func(_ *kgo.Record, err error) {
				if err != nil {
					p.failed.Add(1)
				} else {
					p.acked.Add(1)
				}
			})
	}
	return cl.Flush(ctx)
}

func endOffsets(ctx context.Context, bootstrap, topic string) (int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(bootstrap, ",")...))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	var sum int64
	ends.Each(func(o kadm.ListedOffset) { sum += o.Offset })
	return sum, nil
}
