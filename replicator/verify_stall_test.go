package replicator

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/internal/embedded"
)

// decodeClock is a clock that moves only when a batch is decoded, so that
// the test does not depend on how fast this machine connects or fetches.
type decodeClock struct{ now atomic.Int64 } // nanoseconds

func (c *decodeClock) Now() time.Time { return time.Unix(0, c.now.Load()) }

// slowDecompressor is franz-go's own decompressor taking perBatch longer
// per batch on clock: a client that decodes slowly, as franz-go's lz4 does
// under the race detector (it takes a 4 MiB block buffer per batch). It
// also sleeps a little in real time, so that the reader's polls return
// empty while the fetch is being decoded.
type slowDecompressor struct {
	kgo.Decompressor
	clock    *decodeClock
	perBatch time.Duration
}

func (d slowDecompressor) Decompress(src []byte, codec kgo.CompressionCodecType) ([]byte, error) {
	time.Sleep(10 * time.Millisecond)
	d.clock.now.Add(int64(d.perBatch))
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

	// On the decode clock, the fetch takes batches*50ms = 10 s to decode,
	// twenty times the stall limit; a batch is decoded every 50 ms, ten
	// times within it. The reader polls for min(stall, 1 s) of real time,
	// 2 s of real decoding: without the batch hook an empty poll would
	// see seconds of decode clock without progress.
	const stall = 500 * time.Millisecond
	var clock decodeClock
	slow := slowDecompressor{kgo.DefaultDecompressor(), &clock, 50 * time.Millisecond}
	recs, err := readAll(ctx, c.Addrs(), topic, false, []kgo.Opt{kgo.WithDecompressor(slow)}, &stallWatch{limit: stall, now: clock.Now})
	if err != nil {
		t.Fatalf("reading %d slowly decoded batches: %v", batches, err)
	}
	if n := len(recs[0]); n != batches*perBatch {
		t.Fatalf("read %d records, want %d", n, batches*perBatch)
	}

	// A cluster that answers no fetch is still a stall (on the real clock:
	// the fetch never comes, however fast the machine).
	kc := c.Kfake()
	release := make(chan struct{})
	defer close(release)
	kc.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.SleepControl(func() { <-release })
		return nil, nil, false
	})
	_, err = readAll(ctx, c.Addrs(), topic, false, nil, &stallWatch{limit: stall})
	if err == nil || !strings.Contains(err.Error(), "no record batch read for 500ms") {
		t.Fatalf("reading while no fetch is answered: got %v, want the stall error", err)
	}
}
