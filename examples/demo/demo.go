// Package demo owns `baton demo`: the whole of Baton in one process on two
// embedded Kafka clusters. A producer writes through an agent while the
// control plane moves its topic from the source to the destination:
// PROXY (forwarded to the source, replicated to the destination), then the
// cutover (MIGRATING: the agent holds produce while replication drains),
// then COMPLETE (writes go to the destination), narrated as it happens.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/baton-kafka/baton/agent"
	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
	"github.com/baton-kafka/baton/test/embedded"
	"github.com/baton-kafka/baton/xds"
)

// Config says what the demo runs. Start from DefaultConfig.
type Config struct {
	// Topic the producer writes.
	Topic string
	// Partitions of Topic.
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

// Run runs the demo until it finishes or ctx ends. It returns an error if
// any acked record is missing from the destination at the end.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Rate < 1 || cfg.Phase <= 0 || cfg.Partitions < 1 || cfg.Topic == "" {
		return errors.New("demo: Topic, Partitions, Rate and Phase must be set")
	}
	say := func(format string, args ...any) { fmt.Fprintf(cfg.Out, format+"\n", args...) }
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Two clusters.
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
	if err := createTopic(ctx, src.Bootstrap(), cfg.Topic, cfg.Partitions); err != nil {
		return err
	}
	say("topic %q created on the source with %d partitions", cfg.Topic, cfg.Partitions)

	// The replicator and the control plane, with embedded etcd.
	repl, err := replicator.New(replicator.Source(src.Addrs()...), replicator.Destination(dst.Addrs()...),
		replicator.Logger(quiet), replicator.SampleInterval(100*time.Millisecond))
	if err != nil {
		return err
	}
	go func() { _ = repl.Run(ctx) }()
	dir, err := os.MkdirTemp("", "baton-demo-etcd-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, err := controlplane.OpenEmbedded(ctx, dir)
	if err != nil {
		return err
	}
	defer store.Close()
	srcAdmin, err := kgo.NewClient(kgo.SeedBrokers(src.Addrs()...))
	if err != nil {
		return err
	}
	defer srcAdmin.Close()
	cp, err := controlplane.New(ctx, controlplane.WithStore(store), controlplane.Logger(quiet),
		controlplane.WithReplication(&controlplane.ReplicatorAdapter{R: repl, Source: kadm.NewClient(srcAdmin)}),
		controlplane.Clusters(&batonv1.Cluster{Name: "source", Bootstrap: src.Addrs()},
			&batonv1.Cluster{Name: "destination", Bootstrap: dst.Addrs()}))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	gs := grpc.NewServer()
	cp.Register(gs)
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()
	cpDone := make(chan struct{})
	go func() { defer close(cpDone); _ = cp.Run(ctx) }()
	say("control plane:       %s (xDS + leases, state in embedded etcd)", ln.Addr())

	// The agent, a sidecar in front of the producer.
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ag, err := agent.New(agent.Listen("127.0.0.1:0"), agent.Source(src.Addrs()...), agent.Destination(dst.Addrs()...),
		agent.ControlPlane(conn, xds.NodeMeta("demo-agent", "shop", "orders-api")), agent.Logger(quiet))
	if err != nil {
		return err
	}
	agentDone := make(chan error, 1)
	go func() { agentDone <- ag.Run(ctx) }()
	select {
	case <-ag.Ready():
	case err := <-agentDone:
		return fmt.Errorf("agent: %w", err)
	}
	say("agent:               %s (the producer bootstraps from it, not from a cluster)", ag.Addr())

	if _, err := cp.AddTopic(ctx, controlplane.TopicSpec{Name: cfg.Topic, State: migration.Proxy}, "demo"); err != nil {
		return err
	}
	events, err := cp.Follow(ctx, cfg.Topic, 0)
	if err != nil {
		return err
	}

	var p producerStats
	prodDone := make(chan error, 1)
	go func() { prodDone <- produce(ctx, ag.Addr(), cfg, &p) }()

	progress := func(phase string) {
		s, _ := endOffsets(ctx, src.Bootstrap(), cfg.Topic)
		d, _ := endOffsets(ctx, dst.Bootstrap(), cfg.Topic)
		lag := "n/a"
		if st, err := cp.Status(cfg.Topic); err == nil {
			lag = st.Lag.Round(time.Millisecond).String()
		}
		say("  [%-9s] acked %5d  failed %d | source %5d  destination %5d  replication lag %s",
			phase, p.acked.Load(), p.failed.Load(), s, d, lag)
	}
	watch := func(phase string, d time.Duration) {
		end := time.After(d)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-end:
				return
			case <-tick.C:
				progress(phase)
			case e := <-events:
				sayEvent(say, e)
			}
		}
	}

	say("\n1. PROXY: the agent forwards produce to the source; the replicator copies to the destination")
	watch("PROXY", cfg.Phase)

	say("\n2. cutover: `baton topic migrate %s`", cfg.Topic)
	if _, err := cp.Migrate(ctx, cfg.Topic, "demo"); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	final, err := waitSettled(ctx, cp, cfg.Topic, events, say)
	if err != nil {
		return err
	}
	if final != migration.Complete {
		return fmt.Errorf("demo: the cutover ended in %s, not COMPLETE (see the events above)", final)
	}

	say("\n3. COMPLETE: writes go to the destination")
	watch("COMPLETE", cfg.Phase)

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
	say("\nproducer: %d records acked, %d failed; source holds %d, destination holds %d",
		p.acked.Load(), p.failed.Load(), s, d)
	if p.failed.Load() > 0 {
		return fmt.Errorf("demo: %d records failed; the first with: %v", p.failed.Load(), p.firstErr.Load())
	}
	if d != p.acked.Load() {
		return fmt.Errorf("demo: %d records acked but the destination holds %d", p.acked.Load(), d)
	}
	// Parity: the destination holds the source's records at the same
	// offsets, then only what was written after the cutover.
	rep, err := replicator.Verify(ctx, src.Addrs(), dst.Addrs(), cfg.Topic, replicator.DefaultOffsetMapTopic)
	if err != nil {
		return fmt.Errorf("demo: verify parity: %w", err)
	}
	for _, m := range rep.Mismatches {
		if m.SourceOffset != -1 {
			return fmt.Errorf("demo: verify parity: %s", m)
		}
	}
	if int64(rep.Count) != d-s {
		return fmt.Errorf("demo: verify parity: %d differences, want only the %d records written after cutover", rep.Count, d-s)
	}
	say("every acked record is in the destination: the %d written before the cutover at the", s)
	say("same offsets as on the source (verify parity), then the %d written after it.", d-s)
	say("The producer (idempotent) never restarted and saw no error: after the cutover the")
	say("agent wrote its batches under a producer id of the destination's, sequences from 0.")
	cancel()
	<-cpDone
	return <-agentDone
}

func sayEvent(say func(string, ...any), e controlplane.Event) {
	line := "  event: " + e.Kind
	if e.From != "" || e.To != "" {
		line += " " + e.From + " -> " + e.To
	}
	if e.Agent != "" {
		line += " agent=" + e.Agent
	}
	if e.Reason != "" {
		line += " (" + e.Reason + ")"
	}
	say("%s", line)
}

// waitSettled prints events until the cutover ends, COMPLETE or back in
// PROXY, and returns the state it ended in.
func waitSettled(ctx context.Context, cp *controlplane.ControlPlane, topic string, events <-chan controlplane.Event, say func(string, ...any)) (migration.State, error) {
	timeout := time.After(time.Minute)
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-timeout:
			return 0, errors.New("demo: the cutover did not settle in a minute")
		case e := <-events:
			sayEvent(say, e)
			switch e.Kind {
			case controlplane.EventCompleted:
				return migration.Complete, nil
			case controlplane.EventRolledBack, controlplane.EventAborted:
				t, err := cp.Topic(topic)
				return t.State, err
			}
		}
	}
}

type producerStats struct {
	acked, failed atomic.Int64
	stop          atomic.Bool
	firstErr      atomic.Value
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

// produce writes through the agent until p.stop, with franz-go's default
// idempotent producer: the agent maps its source producer id to one of the
// destination's at the cutover (docs/agent.md).
func produce(ctx context.Context, bootstrap string, cfg Config, p *producerStats) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.DefaultProduceTopic(cfg.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// franz-go takes a sequence error quietly (it bumps its epoch
		// and carries on); count it as the failure it would be for
		// librdkafka.
		kgo.ProducerOnDataLossDetected(func(topic string, partition int32) {
			if p.failed.Add(1) == 1 {
				p.firstErr.Store(fmt.Sprintf("data loss detected on %s/%d (a sequence error)", topic, partition))
			}
		}))
	if err != nil {
		return err
	}
	defer cl.Close()
	tick := time.NewTicker(time.Second / time.Duration(cfg.Rate))
	defer tick.Stop()
	var n int64
	for !p.stop.Load() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		n++
		key := "customer-" + strconv.FormatInt(n%50, 10)
		cl.Produce(ctx, &kgo.Record{Key: []byte(key), Value: []byte("order " + strconv.FormatInt(n, 10))},
			func(_ *kgo.Record, err error) {
				if err != nil {
					if p.failed.Add(1) == 1 {
						p.firstErr.Store(err.Error())
					}
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
