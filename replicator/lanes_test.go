package replicator_test

import (
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/replicator"
)

// A migrating topic is copied to the source's end while every worker is
// busy with a step of another topic: its partitions are copied on lanes
// of their own, so a cutover's catch-up never waits for a worker. Here the
// destination answers every produce of the other topic with a retriable
// error, and the one worker retries it (produce gives up after 10
// attempts): the migrating topic must be caught up before that step ends.
func TestMigratingTopicDoesNotWaitForAWorker(t *testing.T) {
	t.Parallel()
	s, err := embedded.Start(embedded.Brokers(3), embedded.Partitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	d, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	src, dst := s.Addrs(), d.Addrs()
	produceMatrix(t, src, "busy", 100)
	produceMatrix(t, src, "hurried", 100)

	kc := d.Kfake()
	var mu sync.Mutex
	refused := 0
	kc.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		if len(pr.Topics) != 1 || pr.Topics[0].Topic != "busy" {
			return nil, nil, false
		}
		mu.Lock()
		refused++
		mu.Unlock()
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = "busy"
		for _, p := range pr.Topics[0].Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, kerr.NotEnoughReplicas.Code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
	attempts := func() int {
		mu.Lock()
		defer mu.Unlock()
		return refused
	}

	rn := run(t, src, dst, replicator.Workers(1), replicator.Topics("busy"))
	defer rn.stop(t)
	wait.For(t, 2*time.Minute, "the worker retrying a produce of busy", func() string {
		if attempts() == 0 {
			return "no produce of busy yet"
		}
		return ""
	})
	rn.r.Start("hurried")
	if err := rn.r.SetMigrating("hurried", true); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, rn, src, "hurried")
	if n := attempts(); n >= 10 {
		t.Errorf("busy's produce was refused %d times before hurried caught up: the worker's step had ended, "+
			"hurried waited for it", n)
	}
	requireParity(t, src, dst, "hurried", replicator.ParityExact, 100)
}
