package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
)

// MemStore is a Store in memory: for tests and simulations. It keeps the
// Store contract (package storetest) but for durability: it outlives the
// control planes that use it, as etcd does, so a restarted control plane
// finds what the last one stored, but not the process.
type MemStore struct {
	unavailable atomic.Bool

	mu      sync.Mutex
	version uint64
	topics  map[string]Topic
	agents  map[string]Agent
	decided map[string]bool
	events  []Event
	// appended is closed by the next AppendEvent, to wake followers;
	// made only when one waits.
	appended chan struct{}
}

var _ Store = (*MemStore)(nil)

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	return &MemStore{topics: map[string]Topic{}, agents: map[string]Agent{}, decided: map[string]bool{}}
}

// SetUnavailable makes every write fail with ErrStoreUnavailable (true)
// or succeed again (false): a crashed control plane's last writes are lost.
func (s *MemStore) SetUnavailable(down bool) { s.unavailable.Store(down) }

// Topic returns the stored topic name.
func (s *MemStore) Topic(name string) (Topic, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.topics[name]
	return t, ok
}

// Load implements Store.
func (s *MemStore) Load(context.Context) (uint64, []Topic, []Agent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := make([]Topic, 0, len(s.topics))
	for _, t := range s.topics {
		ts = append(ts, t)
	}
	as := make([]Agent, 0, len(s.agents))
	for _, a := range s.agents {
		as = append(as, a)
	}
	return s.version, ts, as, nil
}

// PutTopic implements Store.
func (s *MemStore) PutTopic(_ context.Context, t Topic, version uint64) error {
	if s.unavailable.Load() {
		return ErrStoreUnavailable
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.topics[t.Name], s.version = t, version
	return nil
}

// PutTopicUndecided implements Store.
func (s *MemStore) PutTopicUndecided(_ context.Context, t Topic, version uint64, attempt int, decide bool) (Topic, error) {
	if s.unavailable.Load() {
		return Topic{}, ErrStoreUnavailable
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := decidedKey(t.Name, attempt)
	if s.decided[key] {
		return s.topics[t.Name], fmt.Errorf("%w: %s attempt %d", ErrDecided, t.Name, attempt)
	}
	if decide {
		s.decided[key] = true
	}
	s.topics[t.Name], s.version = t, version
	return t, nil
}

// DeleteTopic implements Store.
func (s *MemStore) DeleteTopic(_ context.Context, name string, version uint64) error {
	if s.unavailable.Load() {
		return ErrStoreUnavailable
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.topics, name)
	for key := range s.decided {
		if strings.HasPrefix(key, keyDecided+name+"/") {
			delete(s.decided, key)
		}
	}
	s.version = version
	return nil
}

// PutAgents implements Store.
func (s *MemStore) PutAgents(_ context.Context, agents []Agent) error {
	if s.unavailable.Load() {
		return ErrStoreUnavailable
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range agents {
		s.agents[a.Node] = a
	}
	return nil
}

// AppendEvent implements Store.
func (s *MemStore) AppendEvent(_ context.Context, e Event) (Event, error) {
	if s.unavailable.Load() {
		return e, ErrStoreUnavailable
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e.Seq = uint64(len(s.events) + 1)
	s.events = append(s.events, e)
	if s.appended != nil {
		close(s.appended)
		s.appended = nil
	}
	return e, nil
}

// Events implements Store.
func (s *MemStore) Events(_ context.Context, topic string, after uint64) ([]Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Event
	for _, e := range s.events {
		if e.Seq > after && (topic == "" || e.Topic == topic) {
			out = append(out, e)
		}
	}
	return out, nil
}

// Follow implements Store: the events after seq, then each new one.
func (s *MemStore) Follow(ctx context.Context, topic string, after uint64) (<-chan Event, error) {
	out := make(chan Event, 64)
	go func() {
		defer close(out)
		for {
			evs, end, appended := s.eventsAfter(topic, after)
			for _, e := range evs {
				select {
				case out <- e:
				case <-ctx.Done():
					return
				}
			}
			after = end
			select {
			case <-appended:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// eventsAfter returns the events Events would, the last sequence number
// in the log, and a channel closed when the next event is appended.
func (s *MemStore) eventsAfter(topic string, after uint64) ([]Event, uint64, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Event
	for _, e := range s.events[min(after, uint64(len(s.events))):] {
		if topic == "" || e.Topic == topic {
			out = append(out, e)
		}
	}
	if s.appended == nil {
		s.appended = make(chan struct{})
	}
	return out, uint64(len(s.events)), s.appended
}

// Close implements Store.
func (s *MemStore) Close() error { return nil }
