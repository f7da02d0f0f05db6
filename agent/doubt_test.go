package agent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/internal/recordbatch"
	"github.com/baton-kafka/baton/internal/wait"
)

// An idempotent producer's batch k is outstanding on the pooled upstream
// connection when that connection dies: k is in doubt. The client's next
// batch k+1, sent before it read k's answer, must not go to the broker on
// a fresh connection ahead of k's resend (the broker would see a sequence
// gap: OUT_OF_ORDER_SEQUENCE_NUMBER, fatal for librdkafka, and franz-go
// re-initialises and writes k twice). It is refused, unsent, as a broker
// connection's death fails all of its requests; the resends then land in
// order, once each. (The chaos suite found it with a destination paused
// and killed under the agent.)
func TestProduceAfterItsConnectionDiedWaitsForTheResend(t *testing.T) {
	t.Parallel()
	a, src, _ := startInternalAgent(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const topic, other = "doubt", "other"
	cl, err := kgo.NewClient(kgo.SeedBrokers(src.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, tp := range []string{topic, other} {
		if resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, tp); err != nil || resp.Err != nil {
			t.Fatalf("creating %s: %v %v", tp, err, resp.Err)
		}
	}
	ipid, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(ipid.ErrorCode)
	}
	if err != nil {
		t.Fatalf("InitProducerID: %v", err)
	}
	pid, epoch := ipid.ProducerID, ipid.ProducerEpoch

	// The broker holds the first fetch and batch k (seq 0) until released,
	// and notes every produce it gets.
	kc := src.Kfake()
	releaseFetch, releaseK := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var produced []string // "topic seq", in the order the broker got them
	heldFetch, heldK := false, false
	kc.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		mu.Lock()
		first := !heldFetch
		heldFetch = true
		mu.Unlock()
		if first {
			kc.SleepControl(func() { <-releaseFetch })
		}
		return nil, nil, false
	})
	kc.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		for _, tt := range pr.Topics {
			for _, p := range tt.Partitions {
				g, _ := recordbatch.ReadProducer(p.Records)
				mu.Lock()
				produced = append(produced, tt.Topic+" "+string(rune('0'+g.BaseSeq)))
				first := tt.Topic == topic && !heldK
				heldK = heldK || first
				mu.Unlock()
				if first {
					kc.SleepControl(func() { <-releaseK })
				}
			}
		}
		return nil, nil, false
	})
	sawProduce := func(s string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range produced {
			if p == s {
				return true
			}
		}
		return false
	}

	conn := DialRaw(t, a.Addr())
	produceReq := func(tp string, seq int32) *kmsg.ProduceRequest {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = 7, -1, 30000
		req.Topics = []kmsg.ProduceRequestTopic{{Topic: tp, Partitions: []kmsg.ProduceRequestTopicPartition{{
			Partition: 0, Records: pinTestSeqBatch("v", pid, epoch, seq)}}}}
		return req
	}
	// A fetch first, which the broker holds: the agent writes responses in
	// order, so batch k stays outstanding on its side until the fetch is
	// answered, whatever happens to k upstream.
	fetch := kmsg.NewPtrFetchRequest()
	fetch.Version, fetch.ReplicaID, fetch.MaxWaitMillis, fetch.MinBytes, fetch.MaxBytes = 11, -1, 30000, 1, 1<<20
	fetch.Topics = []kmsg.FetchRequestTopic{{Topic: topic, Partitions: []kmsg.FetchRequestTopicPartition{{
		Partition: 0, FetchOffset: 0, PartitionMaxBytes: 1 << 20, CurrentLeaderEpoch: -1, LogStartOffset: -1}}}}
	k, next := produceReq(topic, 0), produceReq(topic, 1)
	for _, req := range []kmsg.Request{fetch, k} {
		if err := conn.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(t, 10*time.Second, "the broker holds batch k", func() string {
		if !sawProduce(topic + " 0") {
			return "batch k not at the broker yet"
		}
		return ""
	})

	// The pooled connection batch k went on dies (as when the broker stops
	// answering): k is in doubt.
	a.src.CloseConns(errors.New("test: connection killed"))

	// Batch k+1, then a produce to another topic: when the broker gets the
	// latter, the agent has dispatched k+1 (it dispatches in order).
	for _, req := range []kmsg.Request{next, produceReq(other, 0)} {
		if err := conn.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(t, 10*time.Second, "the produce to the other topic reaches the broker", func() string {
		if !sawProduce(other + " 0") {
			return "not yet"
		}
		return ""
	})
	if sawProduce(topic + " 1") {
		t.Errorf("batch k+1 reached the broker while batch k was in doubt on a dead connection (broker got %v)", produced)
	}
	close(releaseFetch)
	close(releaseK)

	codes := []int16{}
	for _, req := range []kmsg.Request{fetch, k, next} {
		_, resp, err := conn.Receive(req)
		if err != nil {
			t.Fatal(err)
		}
		if pr, ok := resp.(*kmsg.ProduceResponse); ok {
			codes = append(codes, pr.Topics[0].Partitions[0].ErrorCode)
		}
	}
	for i, code := range codes {
		if !kerr.IsRetriable(kerr.ErrorForCode(code)) || code == kerr.OutOfOrderSequenceNumber.Code {
			t.Errorf("batch k+%d: %v, want a retriable error (not sent, or in doubt)", i, kerr.ErrorForCode(code))
		}
	}
	if _, _, err := conn.Receive(produceReq(other, 0)); err != nil {
		t.Fatal(err)
	}

	// The client resends k and k+1, in order: each lands once.
	for seq := range int32(2) {
		code, off := conn.Produce(topic, pinTestSeqBatch("v", pid, epoch, seq))
		if code != 0 || off != int64(seq) {
			t.Fatalf("resent seq %d: %v at offset %d, want success at %d", seq, kerr.ErrorForCode(code), off, seq)
		}
	}
}
