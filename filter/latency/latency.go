// Package latency owns latency emulation (docs/design.md §12): a response
// filter that holds the response of a produce forwarded to the source until
// the destination's produce ack latency has passed since the request
// arrived, so that producers still writing the source in PROXY already see
// the latency they will see once their topic has moved, and can be tuned
// (batch size, in-flight requests, timeouts) before the one-way cutover.
//
// What is delayed: a produce (acks 1 or all: acks=0 has no response) with
// at least one partition sent to the source and answered by it, of a topic
// the Topics say to emulate (in the agent: PROXY, latency emulation on for
// the agent's namespace, and a profile pushed by the control plane). A
// request over several such topics takes the largest target.
//
// How long: the target is counted from the request's arrival at the agent
// (Exchange.Received), not from its write to the source. The agent is the
// producer's sidecar, so arrival is when the producer sent it, give or take
// a loopback hop; and the destination's latency, as the replicator measures
// it, is from a write to its ack, which after the cutover replaces the
// whole of the source's part. Counting from arrival, the source's own
// latency (and any hold) is inside the target, never added to it: a
// response the source took longer than the target to answer is not delayed
// at all, and none is ever answered sooner than the source answered.
//
// The target: each response draws a quantile u, uniform in [0, 1), and is
// held to the latency at that quantile of a distribution fitted to the
// profile's two points: p50 below the median (the profile says nothing
// lower, and a destination backed by object storage rarely answers much
// faster than its median); from the median to the 99th percentile an
// exponential tail through p50 and p99, p50 + (p99-p50)·ln(0.5/(1-u))/ln 50;
// p99 above. So the producer's p50 and p99 are the destination's, its mean
// a little above, and a slow ack comes as often as on the destination (1 in
// 100 at p99 or more), not on every request.
//
// Order: the filter package runs OnResponse in response-write order on one
// goroutine, so a held response holds those after it on its connection, as
// Kafka requires. Pipelined requests wait out their delays side by side,
// not one after another: each is held until its own arrival plus its own
// target, which for requests sent close together has mostly passed by the
// time the one before it is written.
//
// A delay under way is looked at again whenever the Topics change (a route
// change): a topic that left PROXY, a cutover beginning, is not held up by
// emulation.
package latency

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/baton-kafka/baton/filter"
)

// Sentinel errors.
var (
	// ErrBadConfig refuses a Config, naming the field at fault.
	ErrBadConfig = errors.New("latency: bad config")
)

// DefaultMax is the default cap of one response's target (Config.Max).
const DefaultMax = 5 * time.Second

// Profile is a destination's produce ack latency.
type Profile struct {
	P50, P99 time.Duration
}

// Topics says, per topic, what to emulate.
type Topics interface {
	// Emulate returns the profile to emulate for a produce of topic sent
	// to the source, or false for none.
	Emulate(topic string) (Profile, bool)
	// Changed returns a channel that fires (is closed or receives) when
	// Emulate may answer differently. The filter takes it before asking
	// Emulate, so a change between the two still wakes it. Nil never fires.
	Changed() <-chan struct{}
}

// Observer records one value; a prometheus.Histogram is one.
type Observer interface {
	Observe(float64)
}

// Config configures the filter.
type Config struct {
	// Topics is required.
	Topics Topics
	// Max caps a response's target (default DefaultMax, 5 s): a profile
	// beyond it is a broken destination rather than one to tune producers
	// for, and a longer hold would pass clients' request timeouts.
	Max time.Duration
	// Draw returns the quantile, in [0, 1), a response is held to
	// (default: uniform at random).
	Draw func() float64
	// Added, if set, observes the delay added to each response it held, in
	// seconds.
	Added Observer
}

// Factory builds the filter per connection.
type Factory struct{ cfg Config }

var (
	_ filter.Factory        = (*Factory)(nil)
	_ filter.ResponseFilter = (*emulator)(nil)
)

// New returns the filter's factory.
func New(cfg Config) (*Factory, error) {
	switch {
	case cfg.Topics == nil:
		return nil, fmt.Errorf("%w: Topics is required", ErrBadConfig)
	case cfg.Max < 0:
		return nil, fmt.Errorf("%w: Max %v is negative", ErrBadConfig, cfg.Max)
	}
	if cfg.Max == 0 {
		cfg.Max = DefaultMax
	}
	if cfg.Draw == nil {
		cfg.Draw = rand.Float64
	}
	return &Factory{cfg: cfg}, nil
}

// Name implements filter.Factory.
func (*Factory) Name() string { return "latency" }

// New implements filter.Factory. The filter keeps no state of its own.
func (f *Factory) New(filter.ConnInfo) any { return &emulator{cfg: &f.cfg} }

type emulator struct{ cfg *Config }

// Target is the latency at quantile u of the distribution fitted to p (see
// the package comment).
func Target(p Profile, u float64) time.Duration {
	p99 := max(p.P99, p.P50)
	switch {
	case u < 0.5:
		return p.P50
	case u >= 0.99:
		return p99
	}
	return p.P50 + time.Duration(float64(p99-p.P50)*math.Log(0.5/(1-u))/math.Log(50))
}

// OnResponse implements filter.ResponseFilter.
func (e *emulator) OnResponse(ctx context.Context, x *filter.Exchange) filter.Status {
	if x.Header.APIKey != 0 || x.Err != nil || x.NoResponse || x.Received.IsZero() {
		return filter.Continue
	}
	parts := x.Parts()
	u := -1.0
	var start time.Time
	for {
		changed := e.cfg.Topics.Changed()
		target := e.target(parts, &u)
		if target <= 0 {
			break
		}
		wait := time.Until(x.Received.Add(min(target, e.cfg.Max)))
		if wait <= 0 {
			break
		}
		if start.IsZero() {
			start = time.Now()
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-changed:
			t.Stop()
			continue // look again: the topic may have left PROXY
		case <-ctx.Done():
			t.Stop()
		}
		break
	}
	if !start.IsZero() && e.cfg.Added != nil {
		e.cfg.Added.Observe(time.Since(start).Seconds())
	}
	return filter.Continue
}

// target is the largest target of parts sent to the source and answered
// by it, at quantile *u (drawn at the first part that has one); 0 if none.
func (e *emulator) target(parts []filter.Part, u *float64) time.Duration {
	var out time.Duration
	last := ""
	for i := range parts {
		p := &parts[i]
		if p.To != filter.Source || p.Answered || p.Uncertain || (i > 0 && p.Topic == last) {
			continue
		}
		last = p.Topic
		prof, ok := e.cfg.Topics.Emulate(p.Topic)
		if !ok {
			continue
		}
		if *u < 0 {
			*u = e.cfg.Draw()
		}
		out = max(out, Target(prof, *u))
	}
	return out
}
