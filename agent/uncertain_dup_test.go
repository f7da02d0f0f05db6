package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/test/embedded"
)

// Invariant 7: an idempotent batch the source wrote but whose answer the
// agent lost (answered retriable), retried by the client after COMPLETE,
// is not written to the destination again: it is answered with its offset
// in the source (the replicator's copy sits at the same offset on the
// destination), and the producer's destination stream starts with the
// batch after it.
func TestRetryOfUncertainWriteAfterCompleteIsNotDuplicated(t *testing.T) {
	t.Parallel()
	const topic = "uncertain"
	routes := NewRouteTable([]Route{{Topic: topic, State: migration.Proxy}})
	a, src, dst := startInternalAgent(t, 1, Routes(routes), ForwardDeadline(300*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	clients := map[string]*kgo.Client{}
	for name, c := range map[string]*embedded.Cluster{"source": src, "destination": dst} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		clients[name] = cl
		if resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil || resp.Err != nil {
			t.Fatalf("creating %s on the %s: %v %v", topic, name, err, resp.Err)
		}
	}
	end := func(name string) int64 {
		ends, err := kadm.NewClient(clients[name]).ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := ends.Lookup(topic, 0)
		return o.Offset
	}
	ipid, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(ctx, clients["source"])
	if err == nil {
		err = kerr.ErrorForCode(ipid.ErrorCode)
	}
	if err != nil {
		t.Fatalf("InitProducerID: %v", err)
	}
	pid, epoch := ipid.ProducerID, ipid.ProducerEpoch

	conn := DialRaw(t, a.Addr())
	produce := func(seq int32) (int16, int64) {
		return conn.Produce(topic, pinTestSeqBatch(fmt.Sprint("seq ", seq), pid, epoch, seq))
	}

	if code, off := produce(0); code != 0 || off != 0 {
		t.Fatalf("seq 0 in PROXY: %v at %d", kerr.ErrorForCode(code), off)
	}
	// Seq 1 reaches the source, which answers only after the forward
	// deadline: the agent answers retriable, the source writes it.
	kc := src.Kfake()
	release := make(chan struct{})
	kc.ControlKey(0, func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.SleepControl(func() { <-release })
		return nil, nil, false
	})
	if code, _ := produce(1); code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("seq 1 stuck at the source: %v, want NOT_LEADER_OR_FOLLOWER", kerr.ErrorForCode(code))
	}
	close(release)
	wait.For(t, 10*time.Second, "the source writes seq 1", func() string {
		if e := end("source"); e != 2 {
			return fmt.Sprintf("source end offset %d", e)
		}
		return ""
	})
	// The cutover (the replicator's copy of offsets 0 and 1 is left out:
	// the destination stays empty, so any write of the agent shows).
	routes.Replace([]Route{{Topic: topic, State: migration.Complete}})

	if code, off := produce(1); code != 0 || off != 1 {
		t.Fatalf("retry of seq 1 after COMPLETE: %v at offset %d, want success at its source offset 1", kerr.ErrorForCode(code), off)
	}
	if e := end("destination"); e != 0 {
		t.Fatalf("the retry of a batch the source holds was written to the destination (end offset %d)", e)
	}
	if code, off := produce(2); code != 0 || off != 0 {
		t.Fatalf("seq 2 after COMPLETE: %v at %d, want success at the destination's offset 0", kerr.ErrorForCode(code), off)
	}
	if e := end("destination"); e != 1 {
		t.Fatalf("destination end offset %d after seq 2, want 1", e)
	}
}
