package clients

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/test/kafka"
)

// The smoke test runs every driver against every cluster target: each
// driver, idempotence on and off, produces smokeRecords keyed records (with
// headers where the client can) into a fresh 6-partition topic, and
// Verify reads them back.

const (
	smokeRecords    = 1000
	smokePartitions = 6
	smokeBrokers    = 3
)

// clusterTarget is a cluster the matrix runs against, started at most once
// per test binary (on first use) and stopped by TestMain.
type clusterTarget struct {
	name  string
	start func() (bootstrap string, stop func() error, err error)

	once      sync.Once
	bootstrap string
	stop      func() error
	err       error
}

// get starts the cluster on first use, or fails t with why it could not.
func (c *clusterTarget) get(t *testing.T) string {
	t.Helper()
	c.once.Do(func() { c.bootstrap, c.stop, c.err = c.start() })
	if c.err != nil {
		t.Fatalf("starting the %s cluster: %v", c.name, c.err)
	}
	return c.bootstrap
}

var targets = []*clusterTarget{
	{name: "kfake", start: func() (string, func() error, error) {
		c, err := embedded.Start(embedded.Brokers(smokeBrokers))
		if err != nil {
			return "", nil, err
		}
		return c.Bootstrap(), func() error { c.Close(); return nil }, nil
	}},
	{name: "apache-kafka", start: func() (string, func() error, error) {
		dir, err := os.MkdirTemp("", "baton-clients-kafka-")
		if err != nil {
			return "", nil, err
		}
		c, err := kafka.Start(context.Background(), kafka.Brokers(smokeBrokers), kafka.Dir(dir))
		if err != nil {
			_ = os.RemoveAll(dir)
			return "", nil, err
		}
		return c.Bootstrap(), func() error {
			err := c.Stop()
			if err == nil {
				err = os.RemoveAll(dir)
			}
			return err
		}, nil
	}},
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, c := range targets {
		if c.stop != nil {
			if err := c.stop(); err != nil {
				fmt.Fprintf(os.Stderr, "stopping the %s cluster: %v\n", c.name, err)
				if code == 0 {
					code = 1
				}
			}
		}
	}
	os.Exit(code)
}

var topicSeq atomic.Int64

// freshTopic creates a new topic with smokePartitions partitions, replicated
// to every broker, and waits until every broker knows its leaders.
func freshTopic(t *testing.T, ctx context.Context, bootstrap, what string) string {
	t.Helper()
	topic := fmt.Sprintf("matrix-%s-%d-%d", what, os.Getpid(), topicSeq.Add(1))
	if err := CreateTopic(ctx, bootstrap, topic, smokePartitions, smokeBrokers); err != nil {
		t.Fatal(err)
	}
	return topic
}

// produceAll runs p and collects its acks. It fails t on a Produce error,
// with the install hint when the client is missing.
func produceAll(t *testing.T, ctx context.Context, p Producer, cfg ProduceConfig) []Ack {
	t.Helper()
	var acks []Ack
	err := p.Produce(ctx, cfg, func(a Ack) { acks = append(acks, a) })
	if errors.Is(err, ErrUnavailable) {
		t.Fatalf("%s is not installed (make test runs test/clients/install.sh): %v", p.Name(), err)
	}
	if err != nil {
		t.Fatalf("%s: Produce: %v", p.Name(), err)
	}
	return acks
}

func TestSmoke(t *testing.T) {
	for _, target := range targets {
		t.Run(target.name, func(t *testing.T) {
			bootstrap := target.get(t)
			for _, dc := range Matrix() {
				for _, idempotent := range []bool{true, false} {
					name := fmt.Sprintf("%s/idempotent=%v", dc.Name(), idempotent)
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
						defer cancel()
						topic := freshTopic(t, ctx, bootstrap, dc.Name())
						cfg := ProduceConfig{
							Bootstrap:  bootstrap,
							Topic:      topic,
							Records:    smokeRecords,
							Idempotent: idempotent,
							Headers:    dc.Headers,
							KeyPrefix:  fmt.Sprintf("smoke-%s-%v", dc.Name(), idempotent),
						}
						acks := produceAll(t, ctx, dc, cfg)
						if err := verify(ctx, bootstrap, topic, dc.Name(), acks, cfg); err != nil {
							t.Fatal(err)
						}
						checkSpread(t, acks)
					})
				}
			}
		})
	}
}

// checkSpread fails t unless the records landed on more than one
// partition: 1000 keys hashed over 6 partitions always do, and a driver
// that pins one partition would hide mapping bugs.
func checkSpread(t *testing.T, acks []Ack) {
	t.Helper()
	parts := make(map[int32]int)
	for _, a := range acks {
		parts[a.Partition]++
	}
	if len(parts) < 2 {
		t.Fatalf("every record went to one partition: %v", parts)
	}
}

// TestCompression runs every codec each driver supports, idempotent, on
// every target, with fewer records.
func TestCompression(t *testing.T) {
	const records = 200
	for _, target := range targets {
		t.Run(target.name, func(t *testing.T) {
			bootstrap := target.get(t)
			for _, dc := range Matrix() {
				for _, codec := range dc.Codecs {
					t.Run(dc.Name()+"/"+codec, func(t *testing.T) {
						t.Parallel()
						ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
						defer cancel()
						topic := freshTopic(t, ctx, bootstrap, dc.Name()+"-"+codec)
						cfg := ProduceConfig{
							Bootstrap:   bootstrap,
							Topic:       topic,
							Records:     records,
							Idempotent:  true,
							Compression: codec,
							Headers:     dc.Headers,
							KeyPrefix:   "codec-" + codec,
						}
						acks := produceAll(t, ctx, dc, cfg)
						if err := verify(ctx, bootstrap, topic, dc.Name(), acks, cfg); err != nil {
							t.Fatal(err)
						}
					})
				}
			}
		})
	}
}

// TestUnsupported checks the options the drivers refuse, before they dial
// anything.
func TestUnsupported(t *testing.T) {
	base := ProduceConfig{Bootstrap: "127.0.0.1:1", Topic: "t", Records: 1, KeyPrefix: "k"}
	for _, dc := range Matrix() {
		supported := map[string]bool{"": true, "none": true}
		for _, c := range dc.Codecs {
			supported[c] = true
		}
		for _, codec := range AllCodecs() {
			if supported[codec] {
				continue
			}
			cfg := base
			cfg.Compression = codec
			err := dc.Produce(t.Context(), cfg, func(Ack) { t.Errorf("%s: ack for a refused config", dc.Name()) })
			if !errors.Is(err, ErrUnsupported) {
				t.Errorf("%s with %s compression: got %v, want ErrUnsupported", dc.Name(), codec, err)
			}
		}
		if !dc.Headers {
			cfg := base
			cfg.Headers = true
			err := dc.Produce(t.Context(), cfg, func(Ack) { t.Errorf("%s: ack for a refused config", dc.Name()) })
			if !errors.Is(err, ErrUnsupported) {
				t.Errorf("%s with headers: got %v, want ErrUnsupported", dc.Name(), err)
			}
		}
	}
}

// TestBadConfig checks that every driver rejects configs no driver can run.
func TestBadConfig(t *testing.T) {
	good := ProduceConfig{Bootstrap: "127.0.0.1:1", Topic: "t", Records: 1, KeyPrefix: "k"}
	bad := map[string]func(*ProduceConfig){
		"no bootstrap":     func(c *ProduceConfig) { c.Bootstrap = "" },
		"no topic":         func(c *ProduceConfig) { c.Topic = "" },
		"no records":       func(c *ProduceConfig) { c.Records = 0 },
		"negative rate":    func(c *ProduceConfig) { c.Rate = -1 },
		"unknown codec":    func(c *ProduceConfig) { c.Compression = "brotli" },
		"pause, no resume": func(c *ProduceConfig) { c.Records, c.PauseAt = 2, 1 },
		"pause past the end": func(c *ProduceConfig) {
			c.PauseAt, c.Resume = 1, make(chan struct{})
		},
		"negative pause": func(c *ProduceConfig) { c.PauseAt = -1 },
	}
	for _, dc := range Matrix() {
		for what, mutate := range bad {
			cfg := good
			mutate(&cfg)
			err := dc.Produce(t.Context(), cfg, func(Ack) { t.Errorf("%s: ack for a bad config", dc.Name()) })
			if err == nil || errors.Is(err, ErrUnavailable) {
				t.Errorf("%s with %s: got %v, want a config error", dc.Name(), what, err)
			}
		}
	}
}

// TestCancel checks that ending ctx stops a paced run: Produce returns
// ctx's error, having reported every record exactly once (the ones the
// client did not get to as failed), and child processes die with it.
func TestCancel(t *testing.T) {
	bootstrap := targets[0].get(t)
	for _, dc := range Matrix() {
		t.Run(dc.Name(), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			topic := freshTopic(t, ctx, bootstrap, "cancel-"+dc.Name())
			// 1000 records at 20/s would take 50 s: the run is cut after
			// the first acknowledgment.
			cfg := ProduceConfig{Bootstrap: bootstrap, Topic: topic, Records: 1000, Rate: 20, Idempotent: true, KeyPrefix: "cancel"}
			runCtx, stop := context.WithCancel(ctx)
			defer stop()
			seen := make(map[int]int)
			var ok, failed int
			err := dc.Produce(runCtx, cfg, func(a Ack) {
				seen[a.Seq]++
				if a.Err == "" {
					ok++
					stop()
				} else {
					failed++
				}
			})
			if errors.Is(err, ErrUnavailable) {
				t.Fatalf("%s is not installed (make test runs test/clients/install.sh): %v", dc.Name(), err)
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Produce returned %v, want context.Canceled", err)
			}
			if ok == 0 {
				t.Fatalf("no successful ack before the cancel")
			}
			if failed == 0 {
				t.Fatalf("every record succeeded although the run was cut (acks: %d)", ok)
			}
			for seq := 0; seq < cfg.Records; seq++ {
				if seen[seq] != 1 {
					t.Fatalf("record %d reported %d times", seq, seen[seq])
				}
			}
			if len(seen) != cfg.Records {
				t.Fatalf("acks for %d distinct records, want %d", len(seen), cfg.Records)
			}
		})
	}
}

// TestPaced runs every driver with a Rate to the end: the paced paths (the
// kcat stdin writer, the scripts' pacing loops) deliver every record.
func TestPaced(t *testing.T) {
	bootstrap := targets[0].get(t)
	for _, dc := range Matrix() {
		t.Run(dc.Name(), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			topic := freshTopic(t, ctx, bootstrap, "paced-"+dc.Name())
			cfg := ProduceConfig{Bootstrap: bootstrap, Topic: topic, Records: 60, Rate: 200, Idempotent: true, Headers: dc.Headers, KeyPrefix: "paced"}
			acks := produceAll(t, ctx, dc, cfg)
			if err := verify(ctx, bootstrap, topic, dc.Name(), acks, cfg); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPaused runs every driver with a pause: no record from PauseAt on is
// acknowledged before Resume is closed, and after it the run ends with
// every record delivered.
func TestPaused(t *testing.T) {
	bootstrap := targets[0].get(t)
	const records, pauseAt = 400, 200
	for _, dc := range Matrix() {
		t.Run(dc.Name(), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			topic := freshTopic(t, ctx, bootstrap, "paused-"+dc.Name())
			resume := make(chan struct{})
			cfg := ProduceConfig{Bootstrap: bootstrap, Topic: topic, Records: records, Idempotent: true,
				Headers: dc.Headers, KeyPrefix: "paused", PauseAt: pauseAt, Resume: resume}
			// Every record before the pause acked, unpaced: a client
			// ignoring the pause sends the rest with them and has acks
			// past it by then. kcat, though, prints the delivery reports
			// of its last few KiB of input only when it reads more (100
			// lines here: 3 KiB), and paused it reads none; unpaced it
			// would read everything before the first report. So kcat runs
			// paced, and the test waits for all but its last 130.
			lag := int64(0)
			if dc.Name() == "kcat" {
				cfg.Rate, lag = 500, 130
			}
			var (
				acks     []Ack
				acked    atomic.Int64
				resumed  atomic.Bool
				tooEarly atomic.Int64 // acks for records past the pause before Resume
			)
			done := make(chan error, 1)
			go func() {
				done <- dc.Produce(ctx, cfg, func(a Ack) {
					if a.Seq >= pauseAt && !resumed.Load() {
						tooEarly.Add(1)
					}
					acks = append(acks, a)
					acked.Add(1)
				})
			}()
			var produceErr error
			finished := false
			wait.For(t, 2*time.Minute, "the records before the pause acked", func() string {
				select {
				case produceErr = <-done:
					finished = true
					return ""
				default:
				}
				if n := acked.Load(); n < pauseAt-lag {
					return fmt.Sprintf("%d acks", n)
				}
				return ""
			})
			if finished {
				t.Fatalf("%s ended before it was resumed, with %d acks: %v", dc.Name(), acked.Load(), produceErr)
			}
			resumed.Store(true)
			close(resume)
			if err := <-done; err != nil {
				t.Fatalf("%s: Produce: %v", dc.Name(), err)
			}
			if n := tooEarly.Load(); n > 0 {
				t.Errorf("%s acknowledged %d records from %d on before the run was resumed", dc.Name(), n, pauseAt)
			}
			if err := verify(ctx, bootstrap, topic, dc.Name(), acks, cfg); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestUnavailable checks that a missing runtime or package is reported as
// ErrUnavailable naming the install step.
func TestUnavailable(t *testing.T) {
	cfg := ProduceConfig{Bootstrap: "127.0.0.1:1", Topic: "t", Records: 1, KeyPrefix: "k"}
	noModules := t.TempDir()
	if err := os.WriteFile(noModules+"/produce.js", []byte("// empty\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A venv whose python cannot import confluent_kafka: -I -S hides
	// every site-packages.
	venv := t.TempDir()
	if err := os.MkdirAll(venv+"/bin", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(venv+"/bin/python", []byte("#!/bin/sh\nexec python3 -I -S \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p    Producer
		hint string
	}{
		{Kcat{Path: "/nonexistent/kcat"}, "install.sh"},
		{Kafkajs{Node: "/nonexistent/node"}, "apt-get install -y nodejs npm"},
		{Kafkajs{Dir: noModules}, "npm ci"},
		{Python{Venv: t.TempDir()}, "pip install"},
		{Python{Venv: venv}, "pip install"},
	} {
		err := c.p.Produce(t.Context(), cfg, func(a Ack) {})
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), c.hint) {
			t.Errorf("%#v: got %v, want ErrUnavailable mentioning %q", c.p, err, c.hint)
		}
	}
}

// TestVersionAtLeast covers the librdkafka version gate of the kcat driver.
func TestVersionAtLeast(t *testing.T) {
	least := [3]int{2, 11, 1}
	for v, want := range map[[3]int]bool{
		{2, 0, 2}: false, {2, 11, 0}: false, {1, 99, 99}: false,
		{2, 11, 1}: true, {2, 11, 2}: true, {2, 12, 0}: true, {3, 0, 0}: true,
	} {
		if got := versionAtLeast(v, least); got != want {
			t.Errorf("versionAtLeast(%v, %v) = %v", v, least, got)
		}
	}
}

// TestScriptAckParsing covers the JSON line protocol of the script drivers.
func TestScriptAckParsing(t *testing.T) {
	good := map[string]Ack{
		`{"seq":3,"key":"k-3","partition":2,"offset":17}`:          {Seq: 3, Key: "k-3", Partition: 2, Offset: 17},
		`{"seq":4,"key":"k-4","error":"Local: Message timed out"}`: {Seq: 4, Key: "k-4", Partition: -1, Offset: -1, Err: "Local: Message timed out"},
	}
	for line, want := range good {
		got, err := parseScriptAck(line)
		if err != nil {
			t.Errorf("%s: %v", line, err)
			continue
		}
		got.At = time.Time{}
		if got != want {
			t.Errorf("%s: got %+v, want %+v", line, got, want)
		}
	}
	for _, line := range []string{
		`hello`,
		`{"key":"k-1","partition":1,"offset":1}`,
		`{"seq":1,"key":"k-1"}`,
		`{"seq":1,"key":"k-1","partition":1}`,
		`{"seq":1,"key":"k-1","partition":1,"offset":1,"extra":true}`,
	} {
		if _, err := parseScriptAck(line); err == nil {
			t.Errorf("%s: parsed, want an error", line)
		}
	}
}

// TestSeqOfKey covers the key parser Verify uses to find a run's records.
func TestSeqOfKey(t *testing.T) {
	for key, want := range map[string]int{"p-0": 0, "p-17": 17, "a-b-5": 5} {
		prefix := key[:strings.LastIndex(key, "-")]
		if got, ok := seqOfKey(prefix, key); !ok || got != want {
			t.Errorf("seqOfKey(%q, %q) = %d, %v; want %d", prefix, key, got, ok, want)
		}
	}
	for _, key := range []string{"p-", "p-x", "p-01", "p--1", "q-1", "p1"} {
		if _, ok := seqOfKey("p", key); ok {
			t.Errorf("seqOfKey(p, %q) parsed", key)
		}
	}
}
