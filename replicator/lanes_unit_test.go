package replicator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
)

// TestLanesFollowTheMigratingTopics: one lane runs per partition of each
// migrating topic being copied, and the lanes end when the topic is no
// longer migrating, is paused or stopped, and with Run; the count never
// goes below zero.
func TestLanesFollowTheMigratingTopics(t *testing.T) {
	t.Parallel()
	const parts = 3
	s, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(parts))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(parts))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Addrs()...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, topic := range []string{"a", "b"} {
		for p := range int32(parts) {
			rec := &kgo.Record{Topic: topic, Partition: p, Value: []byte("v")}
			if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}

	r, err := New(Source(s.Addrs()...), Destination(d.Addrs()...), Topics("a", "b"), Workers(1),
		SampleInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	lanes := func(want int) func() string {
		return func() string {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.lanes < 0 {
				t.Fatalf("lanes went negative: %d", r.lanes)
			}
			if r.lanes != want {
				return fmt.Sprintf("%d lanes, want %d", r.lanes, want)
			}
			return ""
		}
	}
	steps := []struct {
		name string
		do   func() error
		want int
	}{
		{"a migrating", func() error { return r.SetMigrating("a", true) }, parts},
		{"b migrating too", func() error { return r.SetMigrating("b", true) }, 2 * parts},
		{"a no longer migrating", func() error { return r.SetMigrating("a", false) }, parts},
		{"b paused", func() error { return r.Pause("b") }, 0},
		{"b resumed", func() error { return r.Resume("b") }, parts},
		{"b stopped", func() error { _, err := r.Stop(context.Background(), "b"); return err }, 0},
		{"a migrating again", func() error { return r.SetMigrating("a", true) }, parts},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		wait.For(t, time.Minute, st.name, lanes(st.want))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if msg := lanes(0)(); msg != "" {
		t.Errorf("after Run: %s", msg)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ts := range r.topics {
		for _, p := range ts.parts {
			if p.produceTo != nil {
				t.Errorf("%s/%d still holds a produce client of the ended Run", p.topic, p.p)
			}
		}
	}
}
