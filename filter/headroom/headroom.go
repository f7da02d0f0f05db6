// Package headroom owns the headroom check of the PROXY phase: a filter
// that watches each producer connection's produce requests and warns, per
// client id and topic, when the producer will not sustain its rate at the
// destination's ack latency after the cutover.
//
// The estimate is Little's law: a producer with at most B bytes of produce
// requests in flight, acknowledged after L, carries at most B / L bytes per
// second. Per window (default 10 s) the filter measures, per topic, the
// rate R the connection wrote, the most request bytes the connection had in
// flight (its own count, or the agent's byte counters through InFlight),
// and how long records waited in the client before they reached the agent
// (each batch's first timestamp against the request's arrival: the
// producer's queue). It warns when both hold:
//
//   - the projection B / L(destination) is below R x Margin: the pipeline
//     the producer has shown cannot carry its rate at the destination's
//     latency; and
//   - records waited in the client longer than one destination round trip
//     (median of the window): the producer is at its limits, not merely
//     using less of its pipeline than it has.
//
// The second condition is what keeps a producer that never needed a deep
// pipeline at the source's latency from being warned: a producer only shows
// its limits at the destination's latency, so the check is meant to run
// with latency emulation on (filter/latency). A producer that sets its own
// record timestamps (replaying old data) is not judged: a batch older than
// MaxQueueDelay is ignored.
//
// The filter only observes: it never holds, answers or changes a request.
package headroom

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/internal/recordbatch"
)

// Sentinel errors.
var (
	// ErrBadConfig refuses a Config, naming the field at fault.
	ErrBadConfig = errors.New("headroom: bad config")
)

// Defaults.
const (
	// DefaultWindow is how long the filter measures before it judges.
	DefaultWindow = 10 * time.Second
	// DefaultMargin is the headroom a producer needs: its projected
	// throughput at the destination's latency must exceed its rate by 20 %.
	DefaultMargin = 1.2
	// DefaultMaxQueueDelay bounds what counts as time in the client's
	// queue: a batch older than this carries timestamps the application
	// set, not the time it was produced.
	DefaultMaxQueueDelay = 5 * time.Minute
	// maxSamples bounds the queue-delay samples kept per topic and window.
	maxSamples = 256
)

// Topics says, per topic, whether the filter judges produce to it.
type Topics interface {
	// Destination returns the destination's ack latency the topic's
	// producers will see after the cutover, and whether to judge the
	// topic now (in the agent: PROXY, headroom switched on, and a latency
	// measured).
	Destination(topic string) (latency time.Duration, judge bool)
}

// Warning is one producer that will not sustain its rate on the
// destination.
type Warning struct {
	ClientID string
	Topic    string
	// Rate is the bytes per second the producer wrote the topic in the
	// window.
	Rate float64
	// InFlight is the most produce request bytes the connection had in
	// flight in the window, and InFlightRequests the most requests.
	InFlight         int64
	InFlightRequests int
	// Destination is the destination's ack latency, and Capacity the
	// bytes per second InFlight carries at it (Little's law).
	Destination time.Duration
	Capacity    float64
	// QueueDelay is the median time records waited in the client before
	// they reached the agent.
	QueueDelay time.Duration
	// Raise names the producer setting to raise.
	Raise string
}

// String says what the warning is and what to do, in one line.
func (w Warning) String() string {
	return fmt.Sprintf("client %q writes %s at %s/s, but at most %d bytes (%d requests) in flight carry %s/s at the destination's ack latency %v "+
		"(records wait %v in the client): raise %s",
		w.ClientID, w.Topic, bytesText(w.Rate), w.InFlight, w.InFlightRequests, bytesText(w.Capacity),
		w.Destination.Round(time.Millisecond), w.QueueDelay.Round(time.Millisecond), w.Raise)
}

func bytesText(b float64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

// The settings Warning.Raise names.
const (
	RaiseInFlight  = "max.in.flight.requests.per.connection (one request in flight at a time)"
	RaiseBatchSize = "batch.size and linger.ms (requests are as large as they get), and buffer.memory"
)

// Config configures the filter.
type Config struct {
	// Topics is required.
	Topics Topics
	// Report is required: it is called at the end of every window in
	// which a producer falls short, once per client id and topic. It MUST
	// NOT block.
	Report func(Warning)
	// InFlight, if set, returns the request bytes the connection has in
	// flight now, counted outside the filter (the agent's byte counters),
	// read at most every 50 ms; the filter takes the larger of it and its
	// own count of the produce requests it saw and their responses (ok
	// false: its own alone).
	InFlight func(filter.ConnInfo) (bytes int64, ok bool)
	// Window is how long the filter measures before it judges
	// (DefaultWindow when zero).
	Window time.Duration
	// Margin is the headroom a producer needs (DefaultMargin when zero;
	// at least 1).
	Margin float64
	// MaxQueueDelay (DefaultMaxQueueDelay when zero).
	MaxQueueDelay time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// New checks cfg and returns the filter's factory.
func New(cfg Config) (filter.Factory, error) {
	switch {
	case cfg.Topics == nil:
		return nil, fmt.Errorf("%w: Topics is required", ErrBadConfig)
	case cfg.Report == nil:
		return nil, fmt.Errorf("%w: Report is required", ErrBadConfig)
	case cfg.Window < 0:
		return nil, fmt.Errorf("%w: Window %v is negative", ErrBadConfig, cfg.Window)
	case cfg.Margin != 0 && cfg.Margin < 1:
		return nil, fmt.Errorf("%w: Margin %v is below 1", ErrBadConfig, cfg.Margin)
	case cfg.MaxQueueDelay < 0:
		return nil, fmt.Errorf("%w: MaxQueueDelay %v is negative", ErrBadConfig, cfg.MaxQueueDelay)
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Margin == 0 {
		cfg.Margin = DefaultMargin
	}
	if cfg.MaxQueueDelay == 0 {
		cfg.MaxQueueDelay = DefaultMaxQueueDelay
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return factory{cfg}, nil
}

type factory struct{ cfg Config }

func (factory) Name() string { return "headroom" }

func (f factory) New(info filter.ConnInfo) any {
	return &conn{cfg: &f.cfg, info: info}
}

// conn is the filter on one connection. OnRequest runs on the chain's
// request goroutine and OnResponse on its response goroutine: mu guards
// what both touch.
type conn struct {
	cfg  *Config
	info filter.ConnInfo

	mu          sync.Mutex
	start       time.Time // the window's start; zero before the first produce
	client      string
	inflight    int64 // request bytes in flight, own count
	maxInflight int64 // the window's most
	maxN        int
	topics      map[string]*topicStats
	pending     []counted // the counted requests in flight, oldest first
	lastRead    time.Time // the external in-flight count's last read
}

// counted is a request in the filter's own in-flight count.
type counted struct {
	x *filter.Exchange
	n int64
}

// topicStats is one topic's window.
type topicStats struct {
	bytes   int64
	latency time.Duration
	delays  []time.Duration
}

var (
	_ filter.RequestFilter  = (*conn)(nil)
	_ filter.ResponseFilter = (*conn)(nil)
)

// OnRequest implements filter.RequestFilter.
func (c *conn) OnRequest(_ context.Context, x *filter.Exchange) filter.Status {
	req, ok := x.Req.(*kmsg.ProduceRequest)
	if !ok || req.Acks == 0 {
		return filter.Continue // acks=0 has no response: nothing is in flight
	}
	judged := false
	for i := range req.Topics {
		if _, judge := c.cfg.Topics.Destination(req.Topics[i].Topic); judge {
			judged = true
			break
		}
	}
	if !judged {
		return filter.Continue // the common case: one route lookup per topic, no lock
	}
	now := c.cfg.Now()
	arrived := x.Received
	if arrived.IsZero() {
		arrived = now
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range req.Topics {
		t := &req.Topics[i]
		lat, judge := c.cfg.Topics.Destination(t.Topic)
		if !judge {
			continue
		}
		if c.topics == nil {
			c.topics = make(map[string]*topicStats)
		}
		st := c.topics[t.Topic]
		if st == nil {
			st = &topicStats{}
			c.topics[t.Topic] = st
		}
		st.latency = lat
		for j := range t.Partitions {
			b := t.Partitions[j].Records
			st.bytes += int64(len(b))
			if ms, ok := recordbatch.BaseTimestamp(b); ok && len(st.delays) < maxSamples {
				d := arrived.Sub(time.UnixMilli(ms))
				if d < 0 {
					d = 0 // clocks a millisecond apart
				}
				if d <= c.cfg.MaxQueueDelay {
					st.delays = append(st.delays, d)
				}
			}
		}
	}
	if x.Header.ClientID != nil {
		c.client = *x.Header.ClientID
	}
	n := int64(len(x.RawReq))
	c.inflight += n
	if c.start.IsZero() {
		c.start = now
	}
	c.pending = append(c.pending, counted{x, n})
	c.noteInflightLocked(now)
	if now.Sub(c.start) >= c.cfg.Window {
		c.judgeLocked(now)
	}
	return filter.Continue
}

// OnResponse implements filter.ResponseFilter: a counted request's bytes
// leave the in-flight count as its response goes out. Responses come in
// request order, so a counted one is always the oldest counted.
func (c *conn) OnResponse(_ context.Context, x *filter.Exchange) filter.Status {
	c.mu.Lock()
	if len(c.pending) > 0 && c.pending[0].x == x {
		c.inflight -= c.pending[0].n
		c.pending[0] = counted{}
		c.pending = c.pending[1:]
	}
	c.mu.Unlock()
	return filter.Continue
}

// inflightReadEvery bounds how often the external in-flight count is read:
// with eBPF a read is a system call, too dear for every request.
const inflightReadEvery = 50 * time.Millisecond

// noteInflightLocked keeps the window's most bytes and requests in flight:
// the filter's own count at every request, and the external count (the
// agent's byte counters) at most every inflightReadEvery.
func (c *conn) noteInflightLocked(now time.Time) {
	b := c.inflight
	if c.cfg.InFlight != nil && now.Sub(c.lastRead) >= inflightReadEvery {
		c.lastRead = now
		if kb, ok := c.cfg.InFlight(c.info); ok {
			b = max(b, kb)
		}
	}
	c.maxInflight = max(c.maxInflight, b)
	c.maxN = max(c.maxN, len(c.pending))
}

// judgeLocked ends the window: it reports every topic the producer falls
// short on, and starts the next window.
func (c *conn) judgeLocked(now time.Time) {
	secs := now.Sub(c.start).Seconds()
	for topic, st := range c.topics {
		if st.bytes == 0 || st.latency <= 0 || len(st.delays) == 0 {
			continue
		}
		rate := float64(st.bytes) / secs
		capacity := float64(c.maxInflight) / st.latency.Seconds()
		slices.Sort(st.delays)
		delay := st.delays[len(st.delays)/2]
		if capacity >= rate*c.cfg.Margin || delay <= st.latency {
			continue
		}
		w := Warning{ClientID: c.client, Topic: topic, Rate: rate, InFlight: c.maxInflight, InFlightRequests: c.maxN,
			Destination: st.latency, Capacity: capacity, QueueDelay: delay, Raise: RaiseBatchSize}
		if c.maxN <= 1 {
			w.Raise = RaiseInFlight
		}
		c.cfg.Report(w)
	}
	clear(c.topics)
	c.start = now
	c.maxInflight, c.maxN = c.inflight, len(c.pending)
}
