// Package authcheck owns the PROXY-phase auth check (docs/design.md §12): a
// request filter that, for a produce bound for the source of a topic whose
// check is on, decides from the destination's ACLs whether the principal
// the destination will see after the cutover may WRITE the topic there,
// reports a principal that may not, and, when the topic enforces it,
// refuses the produce with TOPIC_AUTHORIZATION_FAILED.
//
// The decision is made from a cached copy of the destination's topic ACLs
// (DescribeACLs), refreshed in the background (Run): periodically, and soon
// after a cold cache or a newly refused principal. The produce path never
// waits for the destination: while nothing was read yet, or while the ACLs
// cannot be read, produce requests go on unchecked.
package authcheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
)

// Sentinel errors. Every message starts with "authcheck: ".
var (
	// ErrBadConfig refuses a Config, naming the field at fault.
	ErrBadConfig = errors.New("authcheck: bad config")
	// ErrCannotRead wraps a DescribeACLs the destination refused: the
	// agent's destination principal lacks DESCRIBE on the cluster.
	ErrCannotRead = errors.New("authcheck: cannot read the destination's ACLs")
	// ErrRefused closes the connection of an acks=0 produce the check
	// refuses (an acks=0 client reads no answer; a broker closes the
	// connection too).
	ErrRefused = errors.New("authcheck: produce refused: the destination would refuse it")
)

// Topics says, per topic, whether produce requests to it are checked now.
type Topics interface {
	// Check reports whether a produce to topic is checked (the topic is
	// in PROXY, bound for the source, with the check on) and whether a
	// refusal by the destination's ACLs refuses it now (enforce).
	Check(topic string) (check, enforce bool)
}

// Missing is a principal that may write a topic on the source but, by the
// destination's ACLs, not on the destination.
type Missing struct {
	Topic     string
	Principal string
	// ClientID is the client id of the produce that found it.
	ClientID string
	Decision Decision
	// Detail says what to do: the ACL to add (or the DENY to remove).
	Detail string
}

// Reporter takes what the check finds. Its methods MUST NOT block: they
// run on the produce path.
type Reporter interface {
	// Missing is called when a produce finds a missing right, at most
	// once a second per topic and principal.
	Missing(m Missing)
	// Resolved is called once the destination's ACLs allow a principal
	// reported missing.
	Resolved(topic, principal string)
}

// Config configures the filter.
type Config struct {
	// Topics is required.
	Topics Topics
	// Describe sends a DescribeACLs request to the destination with the
	// agent's own credentials and returns the answer (required).
	Describe func(ctx context.Context, req *kmsg.DescribeACLsRequest) (*kmsg.DescribeACLsResponse, error)
	// Principal returns the principal the destination will see for the
	// connection of ctx after the cutover (required): the client's own
	// with forwarded credentials, else the agent's destination principal.
	// "" leaves the connection's produce unchecked.
	Principal func(ctx context.Context, info filter.ConnInfo) string
	// Host is the address the destination sees the agent's connections
	// from; ACLs for that host apply as well as host "*" ones. Default
	// "": only "*" ACLs apply.
	Host string
	// SuperUsers are principals the destination allows everything
	// (super.users): ACLs do not show them.
	SuperUsers []string
	// AllowEveryoneIfNoACL mirrors the destination's
	// allow.everyone.if.no.acl.found (default false, as Kafka's): a topic
	// no ACL covers is then writable by everyone.
	AllowEveryoneIfNoACL bool
	// Refresh is how often the ACLs are read again (default 1 minute).
	Refresh time.Duration
	// MinRefresh spaces reads asked for sooner (a cold cache, a newly
	// refused principal; default 5 seconds).
	MinRefresh time.Duration
	// Reporter, if set, takes what the check finds.
	Reporter Reporter
	// Count, if set, counts produce requests with a topic the destination
	// would refuse, per topic, and whether they were refused.
	Count func(topic string, refused bool)
	// Log gets the WARN that the ACLs cannot be read (default: discarded).
	Log *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Defaults.
const (
	DefaultRefresh    = time.Minute
	DefaultMinRefresh = 5 * time.Second
	// reportEvery spaces a Reporter's Missing calls per topic and
	// principal.
	reportEvery = time.Second
	// forgetAfter is when a refused principal and topic no produce met
	// again is forgotten (the Reporter ages its finding out on its own).
	forgetAfter = 10 * time.Minute
	// describeTimeout bounds one DescribeACLs.
	describeTimeout = 30 * time.Second
)

// Factory builds the filter per connection and keeps the ACL cache; Run
// refreshes it.
type Factory struct {
	cfg  Config
	snap atomic.Pointer[snapshot] // nil until the first read
	kick chan struct{}

	mu       sync.Mutex
	reported map[key]time.Time // refused principals and topics, with their last report
	cantRead bool              // ErrCannotRead said at WARN, until a read succeeds
	failed   bool              // another read error said at WARN, until a read succeeds
}

type key struct{ principal, topic string }

// snapshot is one read of the destination's ACLs, with the decisions made
// from it.
type snapshot struct {
	acls       ACLs
	unreadable bool     // the agent may not read them: nothing is checked
	decided    sync.Map // key -> Decision
}

var (
	_ filter.Factory       = (*Factory)(nil)
	_ filter.RequestFilter = (*conn)(nil)
)

// New returns the filter's factory. Run it to fill the cache.
func New(cfg Config) (*Factory, error) {
	switch {
	case cfg.Topics == nil:
		return nil, fmt.Errorf("%w: Topics is required", ErrBadConfig)
	case cfg.Describe == nil:
		return nil, fmt.Errorf("%w: Describe is required", ErrBadConfig)
	case cfg.Principal == nil:
		return nil, fmt.Errorf("%w: Principal is required", ErrBadConfig)
	case cfg.Refresh < 0:
		return nil, fmt.Errorf("%w: Refresh %v is negative", ErrBadConfig, cfg.Refresh)
	case cfg.MinRefresh < 0:
		return nil, fmt.Errorf("%w: MinRefresh %v is negative", ErrBadConfig, cfg.MinRefresh)
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.MinRefresh == 0 {
		cfg.MinRefresh = DefaultMinRefresh
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Factory{cfg: cfg, kick: make(chan struct{}, 1), reported: map[key]time.Time{}}, nil
}

// Name implements filter.Factory.
func (*Factory) Name() string { return "authcheck" }

// New implements filter.Factory.
func (f *Factory) New(info filter.ConnInfo) any { return &conn{f: f, info: info} }

// Refreshed says whether the cache holds a read (the ACLs, or that they
// cannot be read): until then produce requests go on unchecked.
func (f *Factory) Refreshed() bool { return f.snap.Load() != nil }

// Cached returns how many ACLs the cache holds, and false before the first
// read or while the ACLs cannot be read (produce requests go on unchecked
// then).
func (f *Factory) Cached() (int, bool) {
	s := f.snap.Load()
	if s == nil || s.unreadable {
		return 0, false
	}
	return len(s.acls.List), true
}

// Run reads the destination's ACLs once the filter first meets a checked
// produce (an agent with no topic checked never asks), then every Refresh,
// and sooner (MinRefresh after the last read at the earliest) when the
// filter asks, until ctx ends.
func (f *Factory) Run(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-f.kick:
	}
	for {
		last := f.cfg.Now()
		f.refresh(ctx)
		t := time.NewTimer(f.cfg.Refresh)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
			continue
		case <-f.kick:
			t.Stop()
		}
		if d := f.cfg.MinRefresh - f.cfg.Now().Sub(last); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
	}
}

// asksRefresh asks Run for a read soon; it never blocks.
func (f *Factory) asksRefresh() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// refresh reads the ACLs once and swaps the cache. A read that fails for
// another reason than the agent's rights keeps the last read.
func (f *Factory) refresh(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, describeTimeout)
	resp, err := f.cfg.Describe(rctx, ACLRequest())
	cancel()
	var acls ACLs
	if err == nil {
		acls, err = FromResponse(resp)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case errors.Is(err, ErrCannotRead):
		if !f.cantRead {
			f.cantRead = true
			f.cfg.Log.Warn("auth check off: the agent may not read the destination's ACLs, and does not guess; "+
				"grant the agent's destination principal DESCRIBE on the cluster "+
				"(kafka-acls --add --allow-principal <its principal> --operation Describe --cluster)", "err", err)
		}
		f.snap.Store(&snapshot{unreadable: true})
		return
	case err != nil:
		if ctx.Err() != nil {
			return
		}
		if !f.failed {
			f.failed = true
			f.cfg.Log.Warn("auth check: reading the destination's ACLs failed; the last read stays in use, produce requests go on "+
				"unchecked until one succeeds", "err", err, "retry_in", f.cfg.Refresh)
		}
		return
	}
	if f.cantRead || f.failed {
		f.cfg.Log.Info("auth check: the destination's ACLs read again", "acls", len(acls.List), "no_authorizer", acls.NoAuthorizer)
	}
	f.cantRead, f.failed = false, false
	s := &snapshot{acls: acls}
	f.snap.Store(s)
	// What was reported and is allowed now is resolved now, not at its
	// principal's next produce (which an operator waiting for it may not
	// send).
	now := f.cfg.Now()
	for k, last := range f.reported {
		if now.Sub(last) > forgetAfter {
			delete(f.reported, k) // no produce met it for long: the Reporter ages it out
			continue
		}
		if f.decide(s, k.principal, k.topic).OK() {
			delete(f.reported, k)
			if f.cfg.Reporter != nil {
				f.cfg.Reporter.Resolved(k.topic, k.principal)
			}
		}
	}
}

// decide is what the destination would answer principal's WRITE to topic,
// from s, made once per snapshot.
func (f *Factory) decide(s *snapshot, principal, topic string) Decision {
	k := key{principal, topic}
	if d, ok := s.decided.Load(k); ok {
		return d.(Decision)
	}
	d := SuperUser
	if !slices.Contains(f.cfg.SuperUsers, principal) {
		d = s.acls.Write(principal, f.cfg.Host, topic, f.cfg.AllowEveryoneIfNoACL)
	}
	s.decided.Store(k, d)
	return d
}

// found notes a refused principal and topic: the Reporter hears of it at
// most once a second, and a newly refused one asks for a fresh read (the
// ACL may have been added a moment ago).
func (f *Factory) found(principal, topic, clientID string, d Decision) {
	now := f.cfg.Now()
	k := key{principal, topic}
	f.mu.Lock()
	last, known := f.reported[k]
	report := !known || now.Sub(last) >= reportEvery
	if report {
		f.reported[k] = now
	}
	f.mu.Unlock()
	if !known {
		f.asksRefresh()
	}
	if report && f.cfg.Reporter != nil {
		f.cfg.Reporter.Missing(Missing{Topic: topic, Principal: principal, ClientID: clientID, Decision: d,
			Detail: detail(principal, topic, d)})
	}
}

// detail says what to do about a refusal.
func detail(principal, topic string, d Decision) string {
	add := fmt.Sprintf("kafka-acls --add --allow-principal %s --operation Write --topic %s", principal, topic)
	if d == Denied {
		return fmt.Sprintf("the destination would refuse %s WRITE on topic %s: a DENY ACL covers it (DENY wins); remove it "+
			"(kafka-acls --list --topic %s), and have an ALLOW: %s", principal, topic, topic, add)
	}
	return fmt.Sprintf("the destination would refuse %s WRITE on topic %s: no ALLOW ACL covers it; add one before the cutover: %s",
		principal, topic, add)
}

// conn is one connection's filter.
type conn struct {
	f    *Factory
	info filter.ConnInfo
}

// OnRequest implements filter.RequestFilter.
func (c *conn) OnRequest(ctx context.Context, x *filter.Exchange) filter.Status {
	req, ok := x.Req.(*kmsg.ProduceRequest)
	if !ok {
		return filter.Continue
	}
	f := c.f
	s := f.snap.Load()
	principal, asked := "", false
	for i := range req.Topics {
		topic := req.Topics[i].Topic
		check, enforce := f.cfg.Topics.Check(topic)
		switch {
		case !check:
			continue
		case s == nil:
			f.asksRefresh() // a cold cache lets the produce through
			continue
		case s.unreadable:
			continue
		}
		if !asked {
			principal, asked = f.cfg.Principal(ctx, c.info), true
		}
		if principal == "" {
			return filter.Continue
		}
		d := f.decide(s, principal, topic)
		if d.OK() {
			continue
		}
		clientID := ""
		if x.Header.ClientID != nil {
			clientID = *x.Header.ClientID
		}
		f.found(principal, topic, clientID, d)
		if f.cfg.Count != nil {
			f.cfg.Count(topic, enforce)
		}
		if !enforce {
			continue
		}
		if req.Acks == 0 {
			x.Err = fmt.Errorf("%w: %s may not write %s there", ErrRefused, principal, topic)
			return filter.StopIteration
		}
		parts := x.Parts()
		for j := range parts {
			if parts[j].Topic == topic && !parts[j].Answered {
				parts[j].Answer(kerr.TopicAuthorizationFailed.Code)
			}
		}
	}
	return filter.Continue
}
