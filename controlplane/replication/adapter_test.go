package replication

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/replicator"
)

// TestAdapterLagUnknownUntilEveryPartitionCopies: a partition the
// replicator has not resumed copying (it could not learn the destination's
// end offset, as after a destination restart) has no lag to measure: the
// adapter calls the topic's lag unknown (ErrNotReady, saying why), not
// zero, until it copies. The destination here answers every ListOffsets of
// the topic with a retriable error until released: an error, not a held
// request, which would hold the requests behind it on the replicator's
// connection, and with them, some of the time, the topic's setup. The
// control plane's time-lag gate refusing on it is controlplane's
// TestGateRefusesAPartitionNotCopyingYet.
func TestAdapterLagUnknownUntilEveryPartitionCopies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic = "unpositioned"
	src, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	dst, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dst.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(src.Addrs()...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	for range 10 {
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("r")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var hold atomic.Bool
	hold.Store(true)
	holdListOffsets(dst, topic, &hold)

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := replicator.New(replicator.Source(src.Addrs()...), replicator.Destination(dst.Addrs()...),
		replicator.SampleInterval(50*time.Millisecond), replicator.MaxBackoff(200*time.Millisecond), replicator.Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	t.Cleanup(func() { rcancel(); <-done })
	scl, err := kgo.NewClient(kgo.SeedBrokers(src.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(scl.Close)
	a := &ReplicatorAdapter{R: r, Source: kadm.NewClient(scl)}
	if err := a.Start(topic); err != nil {
		t.Fatal(err)
	}
	wait.For(t, time.Minute, "the replicator set the topic up", func() string {
		for _, st := range r.Status() {
			if st.Topic == topic && st.Ready && len(st.Partitions) > 0 {
				return ""
			}
		}
		return "not set up"
	})
	if _, err := a.Lag(topic); !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "has not resumed copying yet") {
		t.Fatalf("Lag while no partition is copying: %v; want ErrNotReady saying a partition has not resumed copying yet", err)
	}

	hold.Store(false)
	wait.For(t, time.Minute, "the lag measurable", func() string {
		if _, err := a.Lag(topic); err != nil {
			return err.Error()
		}
		return ""
	})
}

// holdListOffsets answers every ListOffsets of topic on c with a
// retriable error while hold is set.
func holdListOffsets(c *embedded.Cluster, topic string, hold *atomic.Bool) {
	kc := c.Kfake()
	kc.ControlKey(kmsg.ListOffsets.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if !hold.Load() {
			return nil, nil, false
		}
		req := r.(*kmsg.ListOffsetsRequest)
		if !slices.ContainsFunc(req.Topics, func(rt kmsg.ListOffsetsRequestTopic) bool { return rt.Topic == topic }) {
			// The offset map's own reads go on: a setup that failed once
			// for another reason (a slow machine) reads the map again.
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.KafkaStorageError.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}
