package clients

import (
	"context"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Franz drives franz-go (kgo) in process, with its defaults except where
// ProduceConfig says otherwise: acks=all, idempotence on or off, the
// compression codec, and the sticky key partitioner (murmur2 for keyed
// records, as Java), and the Security: TLS (kgo.DialTLSConfig) and every
// SASL mechanism (kgo.SASL).
type Franz struct {
	// Opts are appended to the driver's client options (a logger, for
	// example); optional.
	Opts []kgo.Opt
}

// Name is "franz".
func (Franz) Name() string { return "franz" }

// franzCodec maps a ProduceConfig compression name to kgo's codec.
func franzCodec(name string) kgo.CompressionCodec {
	switch name {
	case "gzip":
		return kgo.GzipCompression()
	case "snappy":
		return kgo.SnappyCompression()
	case "lz4":
		return kgo.Lz4Compression()
	case "zstd":
		return kgo.ZstdCompression()
	}
	return kgo.NoCompression()
}

// Produce implements Producer. When ctx ends it reports every record
// without an outcome as failed and returns ctx's error.
func (f Franz) Produce(ctx context.Context, cfg ProduceConfig, onAck func(Ack)) error {
	if err := checkProduceConfig(cfg); err != nil {
		return err
	}
	if err := noTransactions("franz", cfg); err != nil {
		return err
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(bootstrapList(cfg.Bootstrap)...),
		kgo.ClientID("baton-franz"),
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(franzCodec(cfg.Compression)),
	}
	if !cfg.Idempotent {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	sec, err := cfg.Security.KgoOpts() // every mechanism and TLS
	if err != nil {
		return err
	}
	opts = append(opts, sec...)
	opts = append(opts, f.Opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("clients: franz: %w", err)
	}
	defer cl.Close()

	// Promises run on kgo's goroutines; they hand acks to this one through
	// a queue that never blocks them, even after Produce has returned.
	acks := newAckQueue()
	feedCtx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		p := newPacer(cfg)
		for seq := 0; seq < cfg.Records; seq++ {
			if p.wait(feedCtx, seq) != nil {
				return
			}
			key := Key(cfg.KeyPrefix, seq)
			r := &kgo.Record{Key: []byte(key), Value: []byte(Value(cfg.KeyPrefix, seq))}
			if cfg.Headers {
				r.Headers = []kgo.RecordHeader{
					{Key: "baton-client", Value: []byte("franz")},
					{Key: "baton-seq", Value: []byte(strconv.Itoa(seq))},
				}
			}
			cl.Produce(feedCtx, r, func(r *kgo.Record, err error) {
				a := Ack{Seq: seq, Key: key, Partition: r.Partition, Offset: r.Offset}
				if err != nil {
					a.Partition, a.Offset, a.Err = -1, -1, err.Error()
				}
				acks.push(a)
			})
		}
	}()

	t := newAckTracker(cfg, onAck)
	for !t.complete() {
		select {
		case <-acks.ready:
			for _, a := range acks.take() {
				t.report(a)
			}
		case <-ctx.Done():
			stopFeed()
			<-fed
			for _, a := range acks.take() {
				t.report(a)
			}
			t.failRest(fmt.Sprintf("franz driver stopped before the client reported this record: %v", ctx.Err()))
			return fmt.Errorf("clients: franz: %w", ctx.Err())
		}
	}
	<-fed
	return nil
}
