package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/test/clients"
	"github.com/baton-kafka/baton/test/kafka"
)

// Shared setup: each source cluster (kfake and real Apache Kafka, three
// brokers each) and its agent start at most once per test binary, on first
// use, and TestMain stops everything. Both agents share one kfake
// destination: with every topic unmanaged or in PROXY it only answers
// ApiVersions.
//
// Environment:
//
//	BATON_E2E_RUNS       producer runs at once across the package (default 3)
//	BATON_E2E_LOG_LEVEL  agent log level on stderr: debug, info, warn (default), error

const (
	sourceBrokers = 3
	// caseTimeout bounds one test case, producer run and checks included.
	caseTimeout = 4 * time.Minute
)

// env is one source cluster with an agent in front of it.
type env struct {
	name   string
	source string // the source's bootstrap list, for reading it directly
	agent  string // the agent's address, for clients
	kfake  *embedded.Cluster
	kafka  *kafka.Cluster
	// sourceOpts are how the test's own clients reach the source directly
	// (TLS and SASL of a secured source; none here otherwise).
	sourceOpts []kgo.Opt
	// topicPrefix starts the names of freshTopic's topics (default
	// "e2e-"; a secured source's ACLs are by prefix).
	topicPrefix string

	routes   *agent.RouteTable
	routesMu sync.Mutex
	managed  []agent.Route
}

// setRoute puts topic under state in the agent's route table, keeping the
// other topics' routes.
func (e *env) setRoute(topic string, state migration.State) {
	e.routesMu.Lock()
	defer e.routesMu.Unlock()
	e.managed = append(e.managed, agent.Route{Topic: topic, State: state})
	e.routes.Replace(append([]agent.Route(nil), e.managed...))
}

// lazyEnv starts an env on first use.
type lazyEnv struct {
	name  string
	start func(ctx context.Context) (*env, []func() error, error)

	once  sync.Once
	env   *env
	stops []func() error // run in reverse order by TestMain
	err   error
}

func (l *lazyEnv) get(t *testing.T) *env {
	t.Helper()
	l.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		l.env, l.stops, l.err = l.start(ctx)
	})
	if l.err != nil {
		t.Fatalf("starting the %s source and its agent: %v", l.name, l.err)
	}
	return l.env
}

var envs = []*lazyEnv{
	{name: "kfake", start: startKfakeEnv},
	{name: "apache-kafka", start: startKafkaEnv},
}

func startKfakeEnv(ctx context.Context) (*env, []func() error, error) {
	src, err := embedded.Start(embedded.Brokers(sourceBrokers))
	if err != nil {
		return nil, nil, err
	}
	stops := []func() error{func() error { src.Close(); return nil }}
	e := &env{name: "kfake", source: src.Bootstrap(), kfake: src}
	stop, err := startAgent(ctx, e)
	if stop != nil {
		stops = append(stops, stop)
	}
	return e, stops, err
}

func startKafkaEnv(ctx context.Context) (*env, []func() error, error) {
	dir, err := os.MkdirTemp("", "baton-e2e-kafka-")
	if err != nil {
		return nil, nil, err
	}
	c, err := kafka.Start(ctx, kafka.Brokers(sourceBrokers), kafka.Dir(dir))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	stops := []func() error{func() error {
		if failed.Load() {
			fmt.Fprintf(os.Stderr, "apache-kafka source in %s, log tail:\n%s\n", c.Dir(), c.LogTail(40))
		}
		err := c.Stop()
		if err == nil {
			err = os.RemoveAll(dir)
		}
		return err
	}}
	e := &env{name: "apache-kafka", source: c.Bootstrap(), kafka: c}
	stop, err := startAgent(ctx, e)
	if stop != nil {
		stops = append(stops, stop)
	}
	return e, stops, err
}

// destination is the kfake cluster both agents name as destination.
var destination struct {
	once sync.Once
	c    *embedded.Cluster
	err  error
}

func destinationAddrs() ([]string, error) {
	destination.once.Do(func() { destination.c, destination.err = embedded.Start(embedded.Brokers(1)) })
	if destination.err != nil {
		return nil, fmt.Errorf("starting the kfake destination: %w", destination.err)
	}
	return destination.c.Addrs(), nil
}

// ingress is the CRC recorder every agent's filter chain feeds.
var ingress = newCRCRecorder()

// startAgent starts an agent in front of e's source, waits until it
// answers, and returns how to stop it.
func startAgent(ctx context.Context, e *env) (func() error, error) {
	dst, err := destinationAddrs()
	if err != nil {
		return nil, err
	}
	e.routes = agent.NewRouteTable(nil)
	a, err := agent.New(
		agent.Listen("127.0.0.1:0"),
		agent.Source(strings.Split(e.source, ",")...),
		agent.Destination(dst...),
		agent.Routes(e.routes),
		agent.Filters(ingress),
		agent.Logger(agentLogger(e.name)),
	)
	if err != nil {
		return nil, err
	}
	e.agent = a.Addr()
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	stop := func() error {
		cancel()
		if err := <-done; err != nil {
			return fmt.Errorf("agent in front of %s: Run: %w", e.name, err)
		}
		return nil
	}
	select {
	case <-a.Ready():
	case <-ctx.Done():
		return stop, fmt.Errorf("agent in front of %s never served: %w", e.name, ctx.Err())
	}
	if err := pingAgent(ctx, e.agent); err != nil {
		return stop, fmt.Errorf("agent in front of %s at %s never answered: %w", e.name, e.agent, err)
	}
	return stop, nil
}

// pingAgent waits until the agent answers Metadata.
func pingAgent(ctx context.Context, addr string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ClientID("baton-e2e-ping"))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	return err
}

func agentLogger(name string) *slog.Logger {
	level := slog.LevelWarn
	if s := os.Getenv("BATON_E2E_LOG_LEVEL"); s != "" {
		if err := level.UnmarshalText([]byte(s)); err != nil {
			fmt.Fprintf(os.Stderr, "BATON_E2E_LOG_LEVEL=%q: %v; using warn\n", s, err)
			level = slog.LevelWarn
		}
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("agent", name)
}

// failed is set when any test failed, so that TestMain prints cluster logs.
var failed atomic.Bool

func TestMain(m *testing.M) {
	code := m.Run()
	if code != 0 {
		failed.Store(true)
	}
	var errs []error
	for _, l := range envs {
		for i := len(l.stops) - 1; i >= 0; i-- {
			if err := l.stops[i](); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", l.name, err))
			}
		}
	}
	if destination.c != nil {
		destination.c.Close()
	}
	for _, err := range errs {
		fmt.Fprintf(os.Stderr, "e2e teardown: %v\n", err)
	}
	if len(errs) > 0 && code == 0 {
		code = 1
	}
	os.Exit(code)
}

// runSlots bounds producer runs at once across the package: a 2-core
// machine runs three Kafka JVMs besides.
var runSlots = make(chan struct{}, envInt("BATON_E2E_RUNS", 3))

func envInt(name string, def int) int {
	if s := os.Getenv(name); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n
		}
		fmt.Fprintf(os.Stderr, "%s=%q is not a positive integer; using %d\n", name, s, def)
	}
	return def
}

// produce runs one producer with a run slot held and returns its acks. It
// fails t when the driver could not run.
func produce(t *testing.T, ctx context.Context, p clients.Producer, cfg clients.ProduceConfig) []clients.Ack {
	t.Helper()
	acks, err := produceErr(t, ctx, p, cfg)
	if err != nil {
		t.Fatalf("%s through the agent: Produce: %v", p.Name(), err)
	}
	return acks
}

// produceErr is produce returning the driver's error when it is
// clients.ErrUnsupported, for a test that expects that of some clients.
func produceErr(t *testing.T, ctx context.Context, p clients.Producer, cfg clients.ProduceConfig) ([]clients.Ack, error) {
	t.Helper()
	select {
	case runSlots <- struct{}{}:
	case <-ctx.Done():
		t.Fatalf("%s: waiting for a run slot: %v", p.Name(), ctx.Err())
	}
	defer func() { <-runSlots }()
	var acks []clients.Ack
	err := p.Produce(ctx, cfg, func(a clients.Ack) { acks = append(acks, a) })
	if errors.Is(err, clients.ErrUnsupported) {
		return acks, err
	}
	if errors.Is(err, clients.ErrUnavailable) {
		t.Fatalf("%s is not installed (make test runs test/clients/install.sh): %v", p.Name(), err)
	}
	if err != nil {
		t.Fatalf("%s through the agent: Produce: %v", p.Name(), err)
	}
	return acks, nil
}

var topicSeq atomic.Int64

// freshTopic creates a topic on e's source, replicated to every broker.
func freshTopic(t *testing.T, ctx context.Context, e *env, what string, partitions int32) string {
	t.Helper()
	prefix := e.topicPrefix
	if prefix == "" {
		prefix = "e2e-"
	}
	topic := fmt.Sprintf("%s%s-%d-%d", prefix, sanitize(what), os.Getpid(), topicSeq.Add(1))
	if err := clients.CreateTopic(ctx, e.source, topic, partitions, sourceBrokers, e.sourceOpts...); err != nil {
		t.Fatalf("on the %s source: %v", e.name, err)
	}
	return topic
}

// sanitize keeps what Kafka allows in a topic name.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '-'
	}, s)
}

// sourceClient is a franz-go client on e's source, bypassing the agent.
func sourceClient(t *testing.T, e *env, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return newClient(t, e.source, opts...)
}

// agentClient is a franz-go client that knows only the agent.
func agentClient(t *testing.T, e *env, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return newClient(t, e.agent, opts...)
}

func newClient(t *testing.T, bootstrap string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(bootstrap, ",")...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// runAgent starts an agent with opts, waits until it serves, and stops it
// with t.
func runAgent(t *testing.T, ctx context.Context, name string, opts ...agent.Opt) *agent.Agent {
	t.Helper()
	a, err := agent.New(append([]agent.Opt{agent.Listen("127.0.0.1:0"), agent.Logger(agentLogger(name))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("agent %s: Run: %v", name, err)
		}
	})
	select {
	case <-a.Ready():
	case err := <-ran:
		t.Fatalf("agent %s: Run returned before serving: %v", name, err)
	case <-ctx.Done():
		t.Fatalf("agent %s never served: %v", name, ctx.Err())
	}
	return a
}
