package replicator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/test/embedded"
)

// slowDecompressor is franz-go's own decompressor taking perBatch longer
// per batch: a client that decodes slowly, as franz-go's lz4 does under the
// race detector (it takes a 4 MiB block buffer per batch).
type slowDecompressor struct {
	kgo.Decompressor
	perBatch time.Duration
}

func (d slowDecompressor) Decompress(src []byte, codec kgo.CompressionCodecType) ([]byte, error) {
	time.Sleep(d.perBatch)
	return d.Decompressor.Decompress(src, codec)
}

// TestReadAllSlowDecodeIsNotAStall: franz-go hands a fetch over only once
// it has decoded all of it, so one fetch of many compressed batches can
// take longer than the stall limit to arrive although batches are decoded
// all along. The reader counts a decoded batch as progress and reads to
// the end; it gives up only on a cluster that sends nothing.
func TestReadAllSlowDecodeIsNotAStall(t *testing.T) {
	t.Parallel()
	c, err := embedded.Start(embedded.Brokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	const topic, batches, perBatch = "slow-decode", 200, 10
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation(),
		kgo.ProducerBatchCompression(kgo.SnappyCompression()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	for b := range batches {
		rs := make([]*kgo.Record, perBatch) // one ProduceSync, one partition: one batch
		for i := range rs {
			rs[i] = &kgo.Record{Value: fmt.Appendf(nil, "record %d of batch %d", i, b)}
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	// Decoding the one fetch takes batches*10ms = 2 s, four times the
	// stall limit; a batch is decoded every 10 ms, fifty times within it.
	const stall = 500 * time.Millisecond
	slow := slowDecompressor{kgo.DefaultDecompressor(), 10 * time.Millisecond}
	recs, err := readAll(ctx, c.Addrs(), topic, false, []kgo.Opt{kgo.WithDecompressor(slow)}, stall)
	if err != nil {
		t.Fatalf("reading %d slowly decoded batches: %v", batches, err)
	}
	if n := len(recs[0]); n != batches*perBatch {
		t.Fatalf("read %d records, want %d", n, batches*perBatch)
	}

	// A cluster that answers no fetch is still a stall: nothing is decoded.
	kc := c.Kfake()
	release := make(chan struct{})
	defer close(release)
	kc.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.SleepControl(func() { <-release })
		return nil, nil, false
	})
	_, err = readAll(ctx, c.Addrs(), topic, false, nil, stall)
	if err == nil || !strings.Contains(err.Error(), "no record batch read for 500ms") {
		t.Fatalf("reading while no fetch is answered: got %v, want the stall error", err)
	}
}
