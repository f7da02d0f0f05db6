package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/migration"
)

// Finding 9 (docs/reliability.md): an idempotent batch k the destination
// wrote but answered only after the forward deadline (the agent answers it
// retriable, a gap in filter/route's sense), with batch k+1 pipelined behind it
// on the same connection and written right after it. k+1's success tells
// librdkafka that k was written: it reports k's messages delivered
// ("implicitly acked", at offset -1001) and never resends k, going on with
// k+2. The gap must close on that success; left open, the agent refuses
// every later batch of the session NOT_LEADER_OR_FOLLOWER, which
// librdkafka retries until its message timeout: the producer stalls.
func TestLaterBatchSuccessClosesTheGap(t *testing.T) {
	t.Parallel()
	const topic = "gapack"
	const deadline = 2 * time.Second
	routes := NewRouteTable([]Route{{Topic: topic, State: migration.Complete}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := newIdempotentFixture(t, ctx, topic, Routes(routes), ForwardDeadline(deadline))
	a, dst, pid, epoch := f.a, f.dst, f.pid, f.epoch

	conn := DialRaw(t, a.Addr())
	produceReq := func(seq int32) *kmsg.ProduceRequest {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = 7, -1, 30000
		req.Topics = []kmsg.ProduceRequestTopic{{Topic: topic, Partitions: []kmsg.ProduceRequestTopicPartition{{
			Partition: 0, Records: pinTestSeqBatch(fmt.Sprint("seq ", seq), pid, epoch, seq)}}}}
		return req
	}
	answer := func(what string, req *kmsg.ProduceRequest) (int16, int64) {
		_, resp, err := conn.Receive(req)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		p := resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
		return p.ErrorCode, p.BaseOffset
	}
	produce := func(seq int32) (int16, int64) {
		req := produceReq(seq)
		if err := conn.Send(req); err != nil {
			t.Fatal(err)
		}
		return answer(fmt.Sprint("seq ", seq), req)
	}

	if code, off := produce(0); code != 0 || off != 0 {
		t.Fatalf("seq 0 after COMPLETE: %v at %d", kerr.ErrorForCode(code), off)
	}

	// Seq 1 reaches the destination, which holds it past the forward
	// deadline; seq 2 follows on the same connection, queued behind it.
	kc := dst.Kfake()
	held, release := make(chan struct{}), make(chan struct{})
	first := true
	kc.ControlKey(0, func(kmsg.Request) (kmsg.Response, error, bool) {
		if first {
			first = false
			kc.KeepControl()
			close(held)
			kc.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	r1, r2 := produceReq(1), produceReq(2)
	if err := conn.Send(r1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("seq 1 never reached the destination")
	}
	// Half a deadline later: the agent dispatches seq 2 before it answers
	// seq 1, and seq 2's own deadline ends half a deadline after seq 1's.
	time.Sleep(deadline / 2)
	if err := conn.Send(r2); err != nil {
		t.Fatal(err)
	}
	// Seq 1's deadline passes (the agent answers it retriable), then the
	// destination writes seq 1 and seq 2, within seq 2's deadline.
	time.Sleep(deadline/2 + deadline/8)
	close(release)
	if code, _ := answer("seq 1", r1); code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("seq 1 held past the forward deadline: %v, want NOT_LEADER_OR_FOLLOWER", kerr.ErrorForCode(code))
	}
	if code, off := answer("seq 2", r2); code != 0 || off != 2 {
		t.Fatalf("seq 2 behind the written seq 1: %v at %d, want success at 2", kerr.ErrorForCode(code), off)
	}

	// librdkafka now takes seq 1 as written (implicitly acked) and goes
	// on with seq 3; it never resends seq 1.
	for try := 1; try <= 3; try++ {
		code, off := produce(3)
		if code == 0 && off == 3 {
			return
		}
		if code != kerr.NotLeaderForPartition.Code {
			t.Fatalf("seq 3: %v at %d, want success at 3", kerr.ErrorForCode(code), off)
		}
		t.Logf("seq 3, try %d: NOT_LEADER_OR_FOLLOWER", try)
	}
	t.Fatal("seq 3, after seq 2 was written behind seq 1, is refused NOT_LEADER_OR_FOLLOWER on every try: the gap at seq 1 never closes, and librdkafka, which took seq 1 as written, never resends it")
}
