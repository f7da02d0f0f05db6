package xds

import (
	"context"
	"slices"
	"strconv"
	"sync"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// groupCache is the cache.Cache behind the ADS server. For state-of-the-world
// xDS it keeps, per node group and type URL, the response resources marshalled
// once per Update (prebuilt), and answers every watch of the group with them:
// go-control-plane's SnapshotCache marshals every resource again for every
// node, which made a push cost nodes x resources marshals. Watch semantics are
// the SnapshotCache's in ADS mode: a request whose version_info differs from
// the group's version is answered at once (so a NACK, which carries the last
// ACKed version, is answered with the current version again); one at the
// current version waits for the next version unless it subscribes to
// resources not yet returned on the stream.
//
// Delta xDS (delta.go) is answered from the same prebuilt resources: each
// Update also computes, once per group and type, which resources changed or
// went away since the previous version, and a delta watch at that previous
// version is answered with that diff alone.
//
// Fetch is delegated to a SnapshotCache fed the same snapshots.
type groupCache struct {
	other cache.SnapshotCache

	mu     sync.Mutex
	nextID int64
	gen    uint64
	groups map[string]*group
}

var _ cache.Cache = (*groupCache)(nil)

type group struct {
	types   map[string]*prebuilt          // by type URL; nil: no snapshot yet
	watches map[string]map[int64]*watchOf // by type URL, then watch id

	// Delta xDS: open delta watches, the last few prebuilts per type (a
	// delta stream's state names the prebuilt it was last sent, and is
	// diffed against it), and every name ever served per type (what a stream
	// whose prebuilt has left the history may still hold, for removals).
	deltaWatches map[string]map[int64]*deltaWatch
	history      map[string][]*prebuilt
	ever         map[string]map[string]struct{}
}

// prebuilt is one group's resources of one type at one version, marshalled.
type prebuilt struct {
	version string
	names   []string     // sorted
	anys    []*anypb.Any // anys[i] is names[i]; shared read-only by every response
	index   map[string]int
	// gen names the generation of resource names a full response covers:
	// what a stream was sent is recorded (the response's returned resources)
	// not as a name -> version map per stream (10,000 entries per node) but as
	// one entry, returnedKey -> gen.
	gen      string
	genNames map[string]struct{} // names covered by gen: a superset of names

	// Delta xDS. id names this prebuilt in a delta stream's returned
	// resources (see delta.go); vers[i] and res[i] are names[i]'s resource
	// version and delta resource, shared read-only by every response.
	// changed and removed are the diff from the prebuilt of the same group
	// and type it replaced (prevID), computed once per Update.
	id        string
	sameNames bool // names are the replaced prebuilt's
	vers      []string
	res       []*discovery.Resource
	prevID    string
	changed   []*discovery.Resource
	removed   []string
}

type watchOf struct {
	req *discovery.DiscoveryRequest
	sub cache.Subscription
	ch  chan cache.Response
}

// returnedKey is the key of the one entry a full response returns; not a
// valid topic or cluster name.
const returnedKey = "\x00baton:all-of-generation"

// typeOrder is the order watches of one stream are answered in: clusters
// before the routes that name them.
var typeOrder = []string{ClusterType, TopicRouteType}

func newGroupCache() *groupCache {
	return &groupCache{other: cache.NewSnapshotCache(true, groupHash{}, nil), groups: map[string]*group{}}
}

func (c *groupCache) groupLocked(key string) *group {
	g := c.groups[key]
	if g == nil {
		g = &group{watches: map[string]map[int64]*watchOf{}, deltaWatches: map[string]map[int64]*deltaWatch{},
			history: map[string][]*prebuilt{}, ever: map[string]map[string]struct{}{}}
		c.groups[key] = g
	}
	return g
}

// set publishes snap to the group key and answers its open watches whose
// version differs.
func (c *groupCache) set(key string, snap *snapshot) error {
	c.mu.Lock()
	old := c.groupLocked(key).types
	c.mu.Unlock()
	built := make(map[string]*prebuilt, len(snap.resources))
	for typ, rs := range snap.resources {
		pb, err := c.build(typ, snap.versions[typ], rs, snap.perName[typ], old[typ])
		if err != nil {
			return err
		}
		built[typ] = pb
	}
	c.mu.Lock()
	g := c.groupLocked(key)
	g.types = built
	for typ, pb := range built {
		g.remember(typ, pb)
	}
	for _, typ := range orderedTypes(g.watches) {
		pb := g.prebuiltLocked(typ)
		for id, w := range g.watches[typ] {
			if w.req.GetVersionInfo() != pb.version {
				respond(w, pb)
				delete(g.watches[typ], id)
			}
		}
	}
	g.answerDeltaLocked()
	c.mu.Unlock()
	return c.other.SetSnapshot(context.Background(), key, snap)
}

func orderedTypes(m map[string]map[int64]*watchOf) []string {
	out := slices.Clone(typeOrder)
	var rest []string
	for typ := range m {
		if !slices.Contains(typeOrder, typ) {
			rest = append(rest, typ)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}

func (c *groupCache) build(typeURL, version string, rs map[string]types.ResourceWithTTL, perName map[string]string,
	old *prebuilt) (*prebuilt, error) {
	pb := &prebuilt{version: version, names: make([]string, 0, len(rs))}
	for name := range rs {
		pb.names = append(pb.names, name)
	}
	slices.Sort(pb.names)
	if old != nil && slices.Equal(old.names, pb.names) {
		pb.names, pb.index, pb.sameNames = old.names, old.index, true // same names: share the index
	} else {
		pb.index = make(map[string]int, len(pb.names))
		for i, name := range pb.names {
			pb.index[name] = i
		}
	}
	pb.anys = make([]*anypb.Any, len(pb.names))
	pb.vers = make([]string, len(pb.names))
	pb.res = make([]*discovery.Resource, len(pb.names))
	for i, name := range pb.names {
		b, err := cache.MarshalResource(rs[name].Resource)
		if err != nil {
			return nil, err
		}
		v := resourceVersion(perName[name], b)
		if j, ok := old.lookup(name); ok && old.vers[j] == v {
			// Unchanged: keep the previous bytes and delta resource, so
			// consecutive versions share them.
			pb.anys[i], pb.vers[i], pb.res[i] = old.anys[j], old.vers[j], old.res[j]
			continue
		}
		pb.anys[i] = &anypb.Any{TypeUrl: typeURL, Value: b}
		pb.vers[i] = v
		pb.res[i] = &discovery.Resource{Name: name, Version: v, Resource: pb.anys[i]}
		pb.changed = append(pb.changed, pb.res[i])
	}
	if old != nil {
		pb.prevID = old.id
		for _, name := range old.names {
			if _, ok := pb.index[name]; !ok {
				pb.removed = append(pb.removed, name)
			}
		}
		if pb.version == old.version && len(pb.changed) == 0 && len(pb.removed) == 0 {
			// Nothing changed (the clusters on a route change): keep the
			// old one, so no delta stream is sent an empty response.
			return old, nil
		}
	}
	// A stream that got every name of an older generation still has every
	// name of this one if no name was added since.
	if old != nil && old.gen != "" && coversAll(old.genNames, pb.names) {
		pb.gen, pb.genNames = old.gen, old.genNames
	} else {
		c.mu.Lock()
		c.gen++
		pb.gen = strconv.FormatUint(c.gen, 10)
		c.mu.Unlock()
		pb.genNames = make(map[string]struct{}, len(pb.names))
		for _, n := range pb.names {
			pb.genNames[n] = struct{}{}
		}
	}
	c.mu.Lock()
	c.gen++
	pb.id = "p" + strconv.FormatUint(c.gen, 10)
	c.mu.Unlock()
	return pb, nil
}

// lookup returns the index of name in pb; pb may be nil.
func (pb *prebuilt) lookup(name string) (int, bool) {
	if pb == nil {
		return 0, false
	}
	i, ok := pb.index[name]
	return i, ok
}

func coversAll(set map[string]struct{}, names []string) bool {
	for _, n := range names {
		if _, ok := set[n]; !ok {
			return false
		}
	}
	return true
}

// prebuiltLocked returns the group's resources of typ; a group with a
// snapshot that lacks typ serves it empty at version "".
func (g *group) prebuiltLocked(typ string) *prebuilt {
	if pb := g.types[typ]; pb != nil {
		return pb
	}
	return &prebuilt{}
}

// CreateWatch implements cache.ConfigWatcher.
func (c *groupCache) CreateWatch(req *cache.Request, sub cache.Subscription, ch chan cache.Response) (func(), error) {
	key := groupHash{}.ID(req.GetNode())
	typ := req.GetTypeUrl()
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groupLocked(key)
	w := &watchOf{req: req, sub: sub, ch: ch}
	if g.types != nil {
		pb := g.prebuiltLocked(typ)
		if req.GetVersionInfo() != pb.version || hasUnreturned(pb, sub) {
			respond(w, pb)
			return func() {}, nil
		}
	}
	c.nextID++
	id := c.nextID
	if g.watches[typ] == nil {
		g.watches[typ] = map[int64]*watchOf{}
	}
	g.watches[typ][id] = w
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(g.watches[typ], id)
	}, nil
}

// hasUnreturned reports whether sub wants a resource of pb the stream has
// not been sent.
func hasUnreturned(pb *prebuilt, sub cache.Subscription) bool {
	known := sub.ReturnedResources()
	if g, ok := known[returnedKey]; ok && g == pb.gen {
		return false // every name of pb was sent
	}
	isKnown := func(name string) bool { _, ok := known[name]; return ok }
	if !sub.IsWildcard() {
		for name := range sub.SubscribedResources() {
			if _, ok := pb.index[name]; ok && !isKnown(name) {
				return true
			}
		}
		return false
	}
	return slices.ContainsFunc(pb.names, func(n string) bool { return !isKnown(n) })
}

// respond sends pb to w. A request naming resources is answered with those
// alone, and, as in ADS mode of go-control-plane, not at all unless it names
// every resource of pb.
func respond(w *watchOf, pb *prebuilt) {
	// returned is the server's to modify (a change of subscription prunes
	// it): one small map per response, never shared.
	r := &response{req: w.req, version: pb.version, anys: pb.anys}
	if pb.gen != "" {
		r.returned = map[string]string{returnedKey: pb.gen}
	} else {
		r.returned = map[string]string{}
	}
	if names := w.req.GetResourceNames(); len(names) != 0 {
		want := make(map[string]bool, len(names))
		for _, n := range names {
			want[n] = true
		}
		if !slices.ContainsFunc(pb.names, func(n string) bool { return !want[n] }) {
			r.anys, r.returned = nil, map[string]string{}
			for i, n := range pb.names {
				if want[n] {
					r.anys = append(r.anys, pb.anys[i])
					r.returned[n] = pb.version
				}
			}
		} else {
			return
		}
	}
	select {
	case w.ch <- r:
	default: // never expected: the server buffers a response per type
		go func() { w.ch <- r }()
	}
}

// Fetch implements cache.ConfigFetcher.
func (c *groupCache) Fetch(ctx context.Context, req *cache.Request) (cache.Response, error) {
	return c.other.Fetch(ctx, req)
}

// response is a prebuilt cache.Response. GetDiscoveryResponse returns a new
// message each time (the server stamps its nonce on it) sharing the
// marshalled resources.
type response struct {
	req      *discovery.DiscoveryRequest
	version  string
	anys     []*anypb.Any
	returned map[string]string
}

var _ cache.Response = (*response)(nil)

func (r *response) GetDiscoveryResponse() (*discovery.DiscoveryResponse, error) {
	return &discovery.DiscoveryResponse{VersionInfo: r.version, Resources: r.anys, TypeUrl: r.req.GetTypeUrl()}, nil
}

func (r *response) GetRequest() *discovery.DiscoveryRequest { return r.req }

func (r *response) GetVersion() (string, error) { return r.version, nil }

func (r *response) GetResponseVersion() string { return r.version }

func (r *response) GetReturnedResources() map[string]string { return r.returned }

func (r *response) GetContext() context.Context { return context.Background() }
