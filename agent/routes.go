package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/latency"
	"github.com/baton-kafka/baton/filter/pidmap"
	"github.com/baton-kafka/baton/migration"
)

// Route is how the agent treats one topic.
type Route struct {
	Topic   string
	State   migration.State
	Mode    migration.HoldMode
	HoldMax time.Duration
	// ForwardDeadline is F for this topic as the control plane pushed it;
	// 0: the control plane's (or, with static routes, the agent's) own.
	ForwardDeadline time.Duration
	// LatencyEmulation is the route's shadow switch for latency emulation
	// (filter/latency), as pushed for the agent's namespace; Latency is the
	// destination's latency to emulate, nil until the control plane
	// measured one.
	LatencyEmulation bool
	Latency          *latency.Profile

	// copied are, once COMPLETE, the last batches of each idempotent
	// source producer the replicator copied, with their offsets: a retry
	// of one is answered, not written again (filter/pidmap).
	copied *pidmap.Copied

	// AuthCheck and AuthEnforce are the route's auth check switches
	// (ShadowFeatures, filter/authcheck): in PROXY, check each produce's
	// principal against the destination's ACLs, and refuse what they
	// would refuse.
	AuthCheck, AuthEnforce bool
	// Headroom is the route's headroom switch (ShadowFeatures,
	// filter/headroom): in PROXY, with a latency profile, warn of
	// producers that will not sustain their rate at it.
	Headroom bool
	// SourceFenced: the control plane fences the topic on the source at
	// its cutover, so the agent may forward it there without a lease (see
	// ForwardWithoutLease), and a TOPIC_AUTHORIZATION_FAILED the source
	// answers is the fence: retriable.
	SourceFenced bool
}

// Target is where writes for the route go: nowhere while MIGRATING (held
// or refused), the destination once COMPLETE, else the source.
func (r Route) Target() filter.Cluster {
	switch r.State {
	case migration.Migrating:
		return filter.Nowhere
	case migration.Complete:
		return filter.Destination
	default:
		return filter.Source
	}
}

// RouteTable is the agent's per-topic routing, swapped whole on each
// update. Readers never block writers for long.
type RouteTable struct {
	mu      sync.RWMutex
	routes  map[string]Route
	version uint64
	changed chan struct{}
}

// NewRouteTable returns a table with the given routes.
func NewRouteTable(routes []Route) *RouteTable {
	t := &RouteTable{changed: make(chan struct{})}
	t.Replace(routes)
	return t
}

// Lookup returns the topic's route; Unmanaged if it has none.
func (t *RouteTable) Lookup(topic string) Route {
	t.mu.RLock()
	r, ok := t.routes[topic]
	t.mu.RUnlock()
	if !ok {
		return Route{Topic: topic, State: migration.Unmanaged}
	}
	return r
}

// Target is where writes to topic go now (route.Table).
func (t *RouteTable) Target(topic string) filter.Cluster { return t.Lookup(topic).Target() }

// Snapshot returns every route, sorted by topic, and the table version.
func (t *RouteTable) Snapshot() ([]Route, uint64) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]Route, 0, len(t.routes))
	for _, r := range t.routes {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out, t.version
}

// Changed returns a channel closed at the next Replace.
func (t *RouteTable) Changed() <-chan struct{} {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.changed
}

// Replace swaps in a new set of routes and wakes held requests.
func (t *RouteTable) Replace(routes []Route) {
	m := make(map[string]Route, len(routes))
	for _, r := range routes {
		if r.HoldMax <= 0 {
			r.HoldMax = migration.DefaultHoldMax
		}
		m[r.Topic] = r
	}
	t.mu.Lock()
	t.routes = m
	t.version++
	old := t.changed
	t.changed = make(chan struct{})
	t.mu.Unlock()
	close(old)
}

// routesFile is the static route file format.
type routesFile struct {
	Routes []struct {
		Topic   string `yaml:"topic"`
		State   string `yaml:"state"`
		Mode    string `yaml:"mode"`
		HoldMax string `yaml:"holdMax"`
		// AuthCheck and AuthEnforce: see Route.
		AuthCheck   bool `yaml:"authCheck"`
		AuthEnforce bool `yaml:"authEnforce"`
		// LatencyEmulation, DestinationLatency and Headroom: see Route.
		// With no control plane to measure the destination, its latency
		// is given here.
		LatencyEmulation   bool `yaml:"latencyEmulation"`
		DestinationLatency *struct {
			P50 string `yaml:"p50"`
			P99 string `yaml:"p99"`
		} `yaml:"destinationLatency"`
		Headroom bool `yaml:"headroom"`
	} `yaml:"routes"`
}

// LoadRoutes reads a static route file:
//
//	routes:
//	  - topic: orders
//	    state: PROXY          # REJECT | PROXY | MIGRATING | COMPLETE
//	    mode: hold            # hold (default) | retriable
//	    holdMax: 5s           # default 5s
//	    authCheck: true       # PROXY: check producers' WRITE on the destination (default false)
//	    authEnforce: false    # and refuse what it would refuse (default false)
//	    latencyEmulation: true  # PROXY: hold produce responses to destinationLatency (default false)
//	    destinationLatency: {p50: 40ms, p99: 250ms}  # the destination's produce ack latency (default none)
//	    headroom: true        # PROXY: warn of producers short at destinationLatency's p50 (default false)
func LoadRoutes(path string) ([]Route, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRoutes, err)
	}
	return ParseRoutes(b)
}

// ParseRoutes parses the route file format; errors name the field.
func ParseRoutes(b []byte) ([]Route, error) {
	var f routesFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %w", ErrBadRoutes, err)
	}
	seen := map[string]bool{}
	out := make([]Route, 0, len(f.Routes))
	for i, e := range f.Routes {
		at := fmt.Sprintf("routes[%d]", i)
		if e.Topic == "" {
			return nil, fmt.Errorf("%w: %s.topic: required", ErrBadRoutes, at)
		}
		if seen[e.Topic] {
			return nil, fmt.Errorf("%w: %s.topic: %q listed twice", ErrBadRoutes, at, e.Topic)
		}
		seen[e.Topic] = true
		st, err := migration.ParseState(e.State)
		if err != nil {
			return nil, fmt.Errorf("%w: %s.state: %w", ErrBadRoutes, at, err)
		}
		mode, err := migration.ParseHoldMode(e.Mode)
		if err != nil {
			return nil, fmt.Errorf("%w: %s.mode: %w", ErrBadRoutes, at, err)
		}
		r := Route{Topic: e.Topic, State: st, Mode: mode, HoldMax: migration.DefaultHoldMax,
			AuthCheck: e.AuthCheck || e.AuthEnforce, AuthEnforce: e.AuthEnforce}
		if e.HoldMax != "" {
			d, err := time.ParseDuration(e.HoldMax)
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("%w: %s.holdMax: %q is not a positive duration", ErrBadRoutes, at, e.HoldMax)
			}
			r.HoldMax = d
		}
		r.LatencyEmulation, r.Headroom = e.LatencyEmulation, e.Headroom
		if l := e.DestinationLatency; l != nil {
			var p latency.Profile
			for _, q := range []struct {
				name, v string
				d       *time.Duration
			}{{"p50", l.P50, &p.P50}, {"p99", l.P99, &p.P99}} {
				d, err := time.ParseDuration(q.v)
				if err != nil || d < 0 {
					return nil, fmt.Errorf("%w: %s.destinationLatency.%s: %q is not a duration of 0 or more", ErrBadRoutes, at, q.name, q.v)
				}
				*q.d = d
			}
			r.Latency = &p
		}
		out = append(out, r)
	}
	return out, nil
}
