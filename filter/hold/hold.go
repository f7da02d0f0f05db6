// Package hold owns the produce hold: a request filter that holds a
// produce request while one of its topics cannot be written now (in the
// agent: MIGRATING in hold mode, or bound for the source while the agent
// holds no lease), and lets it on as soon as every topic can be written,
// or once the topic's hold max has passed since the request arrived.
//
// The filter only decides when a produce goes on, never where: the route
// filter after it (filter/route) looks every topic's route up again then,
// and answers what still cannot be written with a retriable error. So a
// produce that waited while its topic moved from MIGRATING to COMPLETE
// goes to the destination, and one that waited in vain gets the same
// retriable answer as one that came a moment too late.
//
// It holds with the filter package's Waker: a held produce holds the
// requests behind it on its connection, so no later batch of a partition
// overtakes it (Kafka's idempotent sequences need that) and responses keep
// request order.
package hold

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/migration"
)

// Sentinel errors.
var (
	// ErrBadConfig refuses a Config, naming the field at fault.
	ErrBadConfig = errors.New("hold: bad config")
)

// Topics says, per topic, whether a produce to it must wait now.
type Topics interface {
	// Wait reports whether a produce to topic must wait now, and how
	// long at most, counted from the request's arrival (zero: the
	// default hold max).
	Wait(topic string) (wait bool, holdMax time.Duration)
	// Changed returns the channels that fire (are closed or receive) when
	// Wait may answer differently: a route change, a lease renewal. The
	// filter takes them before asking Wait again, so a change between the
	// two still wakes it. A nil channel never fires.
	Changed() []<-chan struct{}
}

// Config configures the filter.
type Config struct {
	// Topics is required.
	Topics Topics
	// Gated, if set, says which produce requests the filter may hold; the
	// others go on at once. Nil: every produce. The agent leaves out
	// versions it never advertised, which its router refuses at once by
	// closing the connection: holding one first would only delay that.
	Gated func(x *filter.Exchange) bool
	// Held, if set, counts held requests.
	Held filter.Gauge
}

// Factory builds the filter per connection.
type Factory struct{ cfg Config }

var (
	_ filter.Factory       = (*Factory)(nil)
	_ filter.RequestFilter = (*holder)(nil)
)

// New returns the filter's factory.
func New(cfg Config) (*Factory, error) {
	if cfg.Topics == nil {
		return nil, fmt.Errorf("%w: Topics is required", ErrBadConfig)
	}
	return &Factory{cfg: cfg}, nil
}

// Name implements filter.Factory.
func (*Factory) Name() string { return "hold" }

// New implements filter.Factory.
func (f *Factory) New(filter.ConnInfo) any { return &holder{cfg: &f.cfg} }

type holder struct{ cfg *Config }

// OnRequest lets a produce on when none of its topics must wait, or when
// the shortest hold max of those that must has passed; otherwise it holds
// the request until Topics says something changed or that hold max ends.
// Requests other than produce, and those Gated leaves out, go on at once.
func (h *holder) OnRequest(_ context.Context, x *filter.Exchange) filter.Status {
	req, ok := x.Req.(*kmsg.ProduceRequest)
	if !ok || (h.cfg.Gated != nil && !h.cfg.Gated(x)) {
		return filter.Continue
	}
	if _, waits := h.deadline(x, req); !waits {
		return filter.Continue // the hot path: no channel taken, nothing allocated
	}
	changed := h.cfg.Topics.Changed()
	deadline, waits := h.deadline(x, req) // again, after taking the channels
	if !waits || !time.Now().Before(deadline) {
		return filter.Continue // route answers what still cannot go
	}
	w := x.Hold()
	w.WakeAt(deadline)
	for _, ch := range changed {
		w.WakeOn(ch)
	}
	if h.cfg.Held != nil {
		h.cfg.Held.Inc()
		w.OnDone(h.cfg.Held.Dec)
	}
	return filter.Hold
}

// deadline returns when the request's wait ends (the earliest hold max of
// its topics that must wait, from its arrival), and whether any must.
func (h *holder) deadline(x *filter.Exchange, req *kmsg.ProduceRequest) (time.Time, bool) {
	var (
		waits bool
		max   time.Duration
	)
	for i := range req.Topics {
		w, m := h.cfg.Topics.Wait(req.Topics[i].Topic)
		if !w {
			continue
		}
		if m <= 0 {
			m = migration.DefaultHoldMax
		}
		if !waits || m < max {
			max = m
		}
		waits = true
	}
	if !waits {
		return time.Time{}, false
	}
	if x.Received.IsZero() {
		// The hold is counted from arrival; one not stamped arrives now.
		x.Received = time.Now()
	}
	return x.Received.Add(max), true
}
