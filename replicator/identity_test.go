package replicator

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
)

// TestCheckIdentitiesStopsACopiedTopicWhoseIDChanged: a topic deleted and
// created again between two samples is only told apart by its id. Here D's
// copy is recorded as made from another id (kfake keeps a name's id, so the
// change is staged): the periodic check stops the copy, and setup then
// reports ErrSourceTopicRecreated.
func TestCheckIdentitiesStopsACopiedTopicWhoseIDChanged(t *testing.T) {
	t.Parallel()
	s, err := embedded.Start(embedded.Brokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d, err := embedded.Start(embedded.Brokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const topic = "identity"
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Addrs()...), kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	r, err := New(Source(s.Addrs()...), Destination(d.Addrs()...), Topics(topic), SampleInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	status := func() TopicStatus {
		for _, ts := range r.Status() {
			if ts.Topic == topic {
				return ts
			}
		}
		return TopicStatus{}
	}
	waitFor := func(what string, cond func(TopicStatus) bool) {
		t.Helper()
		wait.For(t, 30*time.Second, what, func() string {
			if st := status(); !cond(st) {
				return fmt.Sprintf("status %+v", st)
			}
			return ""
		})
	}
	waitFor("the topic set up", func(ts TopicStatus) bool { return ts.Ready })

	r.mu.Lock()
	if _, ok := r.sourceIDs[topic]; !ok {
		r.mu.Unlock()
		t.Fatal("setup recorded no source topic id")
	}
	r.sourceIDs[topic] = [16]byte{1, 2, 3} // D's copy "was made" from another topic
	r.mu.Unlock()
	r.checkIdentities(context.Background())
	if status().Ready {
		t.Fatal("a topic whose source id changed is still copied")
	}
	waitFor("ErrSourceTopicRecreated", func(ts TopicStatus) bool { return errors.Is(ts.Err, ErrSourceTopicRecreated) })
	t.Logf("reported: %v", status().Err)
}
