package clients

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/test/embedded"
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
