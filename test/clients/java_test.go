package clients

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/test/kafka"
)

// Java-specific checks of the Java driver on the embedded cluster (the
// matrix in smoke_test.go runs it against real Kafka): every ProduceConfig
// field reaches the topic, and a cancelled run still reports every record.

func TestJavaProducer(t *testing.T) {
	t.Parallel()
	c, err := embedded.Start(embedded.Brokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	for _, tc := range []ProduceConfig{
		{Records: 300, Idempotent: true, Compression: "zstd", Headers: true, KeyPrefix: "java-zstd"},
		{Records: 100, Idempotent: false, Compression: "snappy", Headers: true, Rate: 1000, KeyPrefix: "java-snappy"},
		{Records: 50, Idempotent: true, Compression: "", KeyPrefix: `java "quoted" \ prefix`},
	} {
		t.Run(tc.KeyPrefix, func(t *testing.T) {
			topic := "java-" + strings.NewReplacer(" ", "", `"`, "", `\`, "").Replace(tc.KeyPrefix)
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, topic); err != nil {
				t.Fatalf("creating %s: %v", topic, err)
			}
			cfg := tc
			cfg.Bootstrap, cfg.Topic = c.Bootstrap(), topic
			var acks []Ack
			if err := (Java{}).Produce(ctx, cfg, func(a Ack) { acks = append(acks, a) }); err != nil {
				t.Fatalf("Produce: %v", err)
			}
			if err := verify(ctx, c.Bootstrap(), topic, "java", acks, cfg); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestJavaTransactionalProducer: the Java driver's transactional mode on the
// embedded cluster. Records are acked only in committed transactions, every
// record of an aborted one fails with DriverAborted, and a read_committed
// consumer finds exactly the acked records, at their acked offsets. The
// other drivers refuse the mode.
func TestJavaTransactionalProducer(t *testing.T) {
	t.Parallel()
	c, err := embedded.Start(embedded.Brokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const topic = "java-txn"
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, topic); err != nil {
		t.Fatalf("creating %s: %v", topic, err)
	}
	cfg := ProduceConfig{Bootstrap: c.Bootstrap(), Topic: topic, Records: 55, KeyPrefix: "txn",
		Transactional: &Transactional{ID: "java-txn", PerTransaction: 10, AbortEvery: 3}}
	acked := map[string]Ack{}
	if err := (Java{}).Produce(ctx, cfg, func(a Ack) {
		aborted := (a.Seq/10+1)%3 == 0 // the third and sixth transactions
		switch {
		case aborted && !strings.Contains(a.Err, DriverAborted):
			t.Errorf("record %d of the aborted transaction: %+v, want %q", a.Seq, a, DriverAborted)
		case !aborted && a.Err != "":
			t.Errorf("record %d of a committed transaction failed: %s", a.Seq, a.Err)
		case !aborted:
			acked[a.Key] = a
		}
	}); err != nil {
		t.Fatalf("Produce: %v", err)
	}
	if len(acked) != 40 {
		t.Fatalf("%d records acked, want 40 (four committed transactions)", len(acked))
	}
	seen := 0
	for seen < len(acked) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d committed records: %v", seen, len(acked), ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			a, ok := acked[string(r.Key)]
			if !ok || a.Partition != r.Partition || a.Offset != r.Offset {
				t.Errorf("read_committed found %s at %d/%d; acked %+v (%v)", r.Key, r.Partition, r.Offset, a, ok)
			}
			seen++
		})
	}
	if err := (Franz{}).Produce(ctx, cfg, func(Ack) {}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("franz-go driver with Transactional: %v, want ErrUnsupported", err)
	}
}

// TestJavaProducerCancel runs against an address nothing listens on, so
// KafkaProducer blocks for metadata (max.block.ms, 60 s) until the context
// ends: the driver must kill the JVM, fail every record once, and return
// the context's error.
func TestJavaProducerCancel(t *testing.T) {
	t.Parallel()
	// Warm up (fetch jars, compile) outside the short deadline below.
	if _, err := buildJavaProducerForTest(t); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	cfg := ProduceConfig{Bootstrap: "127.0.0.1:1", Topic: "nowhere", Records: 20, Idempotent: true, KeyPrefix: "cancel"}
	seen := make(map[int]int)
	err := (Java{}).Produce(ctx, cfg, func(a Ack) {
		seen[a.Seq]++
		if a.Err == "" {
			t.Errorf("record %d acked with no broker", a.Seq)
		}
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Produce = %v, want the context's deadline error", err)
	}
	for seq := range cfg.Records {
		if seen[seq] != 1 {
			t.Errorf("record %d reported %d times, want once", seq, seen[seq])
		}
	}
}

func buildJavaProducerForTest(t *testing.T) (string, error) {
	t.Helper()
	j := Java{}
	javac, err := j.tool("javac")
	if err != nil {
		return "", err
	}
	cp, err := kafka.Classpath(t.Context())
	if err != nil {
		return "", err
	}
	return buildJavaProducer(t.Context(), javac, cp)
}
