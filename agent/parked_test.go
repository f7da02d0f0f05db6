package agent_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/agent"
)

// A broker answers one connection's requests in order, and may park one
// for long: a Fetch waits up to its MaxWait for data (5 s for franz-go and
// kafkajs), a JoinGroup until the group's members have joined. Such a
// request must not hold up what other client connections send to the same
// broker: found by test/e2e, where a consumer's long poll delayed another
// client's offset commit by the full 5 s.
func TestParkedFetchDoesNotBlockOtherConnections(t *testing.T) {
	t.Parallel()
	// One pooled upstream connection per broker: every client shares it.
	f := startFixture(t, nil, agent.UpstreamConns(1))
	const topic = "parked"
	createTopic(t, f.src.Bootstrap(), topic, 1)

	kc := f.src.Kfake()
	held, release := make(chan struct{}), make(chan struct{})
	var holdOnce, releaseOnce sync.Once
	unpark := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unpark)
	kc.ControlKey(1, func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		first := false
		holdOnce.Do(func() { first = true })
		if first {
			close(held)
			kc.SleepControl(func() { <-release })
		}
		return nil, nil, false // then kfake answers it as usual
	})

	fetched := make(chan error, 1)
	go func() {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxWaitMillis, req.MaxBytes, req.SessionEpoch = -1, 100, 1<<20, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = 1<<20, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		_, err := newClient(t, f.addr).Request(context.Background(), req)
		fetched <- err
	}()
	select {
	case <-held:
	case err := <-fetched:
		t.Fatalf("fetch through the agent ended before the broker parked it: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the fetch through the agent never reached the broker")
	}

	// Another client connection writes to the same broker while the fetch
	// is parked there. It must not wait for the fetch.
	produced := make(chan int16, 1)
	go func() { produced <- produceRaw(t, f.addr, topic, "while a fetch is parked") }()
	select {
	case code := <-produced:
		if code != 0 {
			t.Fatalf("produce while a fetch is parked: error code %d", code)
		}
	case <-time.After(30 * time.Second):
		unpark()
		t.Fatal("a produce from another client connection waited behind a fetch parked on the same broker (shared upstream connection)")
	}
	unpark()
	if err := <-fetched; err != nil {
		t.Fatalf("the parked fetch, once released: %v", err)
	}
}
