package acl

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/baton-kafka/baton/migration"
)

// The keeper's tests drive it through in-memory fakes of View, Recorder,
// Protector and Lifter: no Kafka.

// host is a fake control plane: its topics, what it stored and recorded.
type host struct {
	mu     sync.Mutex
	topics map[string]Topic
	events []Event
	// onTopic, if set, runs at each Topic call, its result returned
	// instead (n counts the calls, from 1).
	onTopic func(n int, t Topic, ok bool) (Topic, bool)
	calls   int
	// liftErr fails FenceLifted.
	liftErr error
	removed map[string]Removal
}

var (
	_ View     = (*host)(nil)
	_ Recorder = (*host)(nil)
)

func newHost(ts ...Topic) *host {
	h := &host{topics: map[string]Topic{}, removed: map[string]Removal{}}
	for _, t := range ts {
		h.topics[t.Name] = t
	}
	return h
}

func (h *host) Topic(name string) (Topic, bool) {
	h.mu.Lock()
	t, ok := h.topics[name]
	h.calls++
	n, f := h.calls, h.onTopic
	h.mu.Unlock()
	if f != nil {
		return f(n, t, ok)
	}
	return t, ok
}

func (h *host) Topics() []Topic {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Topic
	for _, t := range h.topics {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b Topic) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (h *host) LastRemoval(_ context.Context, topic string) (Removal, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.removed[topic]
	return r, ok, nil
}

func (h *host) FenceLifted(_ context.Context, topic string) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.liftErr != nil {
		return false, h.liftErr
	}
	t, ok := h.topics[topic]
	if !ok || !t.guarded() || !t.SourceFenceUp {
		return false, nil
	}
	t.SourceFenceUp = false
	h.topics[topic] = t
	return true, nil
}

func (h *host) PromiseFence(_ context.Context, topic string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.topics[topic]; ok && t.guarded() {
		t.FenceAtCutover = true
		h.topics[topic] = t
	}
	return nil
}

func (h *host) Record(_ context.Context, e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

func (h *host) kinds(topic string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, e := range h.events {
		if e.Topic == topic {
			out = append(out, e.Kind)
		}
	}
	return out
}

// protections is a write guard that records its Protect calls; protect,
// if set, runs in each and says what it returns.
type protections struct {
	mu      sync.Mutex
	got     map[string]int
	protect func(topic string) error
}

func (p *protections) Protect(_ context.Context, topic string) error {
	p.mu.Lock()
	if p.got == nil {
		p.got = map[string]int{}
	}
	p.got[topic]++
	f := p.protect
	p.mu.Unlock()
	if f != nil {
		return f(topic)
	}
	return nil
}

func (p *protections) Lift(context.Context, string) error { return nil }

func (p *protections) count(topic string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.got[topic]
}

// lifter is a source fence whose Lift returns err.
type lifter struct{ err error }

func (l lifter) Lift(context.Context, string) error { return l.err }

// newTestKeeper is a keeper of h, guard and fence, logging to log (nil:
// nowhere), fenced.
func newTestKeeper(h *host, guard Protector, fence Lifter, log io.Writer) *Keeper {
	if log == nil {
		log = io.Discard
	}
	return NewKeeper(Deps{View: h, Recorder: h, Guard: guard, Fence: fence, Fenced: true,
		Log: slog.New(slog.NewTextHandler(log, nil)), Now: time.Now, Timeout: 10 * time.Second,
		Poll: 10 * time.Millisecond, Resync: time.Hour, Lease: migration.DefaultLease, Forward: migration.DefaultForwardDeadline})
}
