package shadow

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-kafka/baton/replicator"
)

// fakes are in-memory stand-ins for what the job needs of the control
// plane, the source and the replicator.
type fakes struct {
	mu       sync.Mutex
	topics   []Topic
	leases   []Lease
	events   []Event
	pushes   []map[string]Profile
	ends     map[int32]int64
	endsErr  error
	endCalls map[string]int
	latency  map[string]replicator.Latency
	reg      *prometheus.Registry
	now      time.Time // zero: time.Now
}

var (
	_ View          = (*fakes)(nil)
	_ Recorder      = (*fakes)(nil)
	_ Publisher     = (*fakes)(nil)
	_ EndOffsets    = (*fakes)(nil)
	_ LatencySource = (*fakes)(nil)
)

func (f *fakes) Topics() []Topic {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.topics)
}

func (f *fakes) Leases() []Lease {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.leases)
}

func (f *fakes) Record(_ context.Context, e Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, e)
}

func (f *fakes) PushLatency(_ context.Context, changed map[string]Profile) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pushes = append(f.pushes, maps.Clone(changed))
}

func (f *fakes) SourceEndOffsets(_ context.Context, topic string) (map[int32]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.endCalls[topic]++
	if f.endsErr != nil {
		return nil, f.endsErr
	}
	return maps.Clone(f.ends), nil
}

func (f *fakes) DestinationLatency(topic string) (replicator.Latency, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.latency[topic]
	return l, ok
}

func (f *fakes) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.now.IsZero() {
		return time.Now()
	}
	return f.now
}

func (f *fakes) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

func (f *fakes) calls(topic string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.endCalls[topic]
}

func (f *fakes) eventsOf(kind string) []Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Event
	for _, e := range f.events {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// newTestJob is a job on fresh fakes, with the default lease (5 s) and F
// (2 s) unless lease is set.
func newTestJob(t *testing.T, f *fakes, lease time.Duration, opts ...Opt) *Job {
	t.Helper()
	if lease == 0 {
		lease = 5 * time.Second
	}
	if f.endCalls == nil {
		f.endCalls = map[string]int{}
	}
	if f.latency == nil {
		f.latency = map[string]replicator.Latency{}
	}
	f.reg = prometheus.NewRegistry()
	j, err := New(Deps{View: f, Recorder: f, Publisher: f, Source: f, Latency: f, Registry: f.reg,
		Log: slog.New(slog.DiscardHandler), Now: f.clock, Lease: lease, Forward: 2 * time.Second}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return j
}
