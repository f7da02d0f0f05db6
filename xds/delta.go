package xds

import (
	"context"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
)

// Delta (incremental) xDS on groupCache.
//
// go-control-plane's delta server keeps, per stream and type, what the
// client holds as the subscription's returned resources: a name -> version
// map it replaces with each response's GetNextVersionMap and hands to
// CreateDeltaWatch. A full map would be 10,000 entries per stream, rebuilt
// per response. Instead a response to a wildcard stream returns a compact
// map: kState names the prebuilt the stream now holds (every name at that
// prebuilt's version) and kFrom the prebuilt the response was diffed from
// (what the stream holds again if it NACKs). Entries the server adds to it
// (a wildcard stream unsubscribing a name by name gets name -> "": "send it
// again") override the prebuilt's versions. A map without kState is
// explicit: a reconnecting client's initial_resource_versions, or what a
// response to a stream subscribed by name returned (kSys then names the
// prebuilt whose version it was sent). Keys starting with keyPrefix are not
// resource names: Kafka topic names cannot contain a NUL.
const (
	keyPrefix = "\x00baton:"
	kState    = keyPrefix + "state"
	kFrom     = keyPrefix + "from"
	kSys      = keyPrefix + "sys"
)

// histLen is how many prebuilts per group and type a compact map can name.
// A stream that has not answered for longer (it gets a response per Update
// and answers each) is resent everything, plus removals of every name the
// group ever had.
const histLen = 16

// deltaWatch is an open delta watch.
type deltaWatch struct {
	req      *discovery.DeltaDiscoveryRequest
	ch       chan cache.DeltaResponse
	wildcard bool
	subs     map[string]struct{} // names subscribed, when not wildcard (a copy: the server changes its own)
	known    known
}

// known is what a delta stream holds, read from its returned resources.
type known struct {
	// m is the stream's returned map, read-only (the server owns it and
	// changes it only after cancelling the watch); nil after a NACK.
	m       map[string]string
	compact bool
	// base is the prebuilt a compact map names; nil if it left the history
	// (then the stream is resynchronised).
	base *prebuilt
	// sys is the id of the prebuilt whose version the stream was last
	// sent; "" before the first response.
	sys string
	// pure: compact, base known, no overrides: the stream holds exactly
	// base. Only then can the precomputed diff be sent.
	pure bool
}

func (k *known) version(name string) (string, bool) {
	if v, ok := k.m[name]; ok {
		return v, true
	}
	if k.base != nil {
		if i, ok := k.base.index[name]; ok {
			return k.base.vers[i], true
		}
	}
	return "", false
}

// eachHeld calls f for every name the stream may hold (duplicates possible).
func (k *known) eachHeld(ever map[string]struct{}, f func(string)) {
	for n := range k.m {
		if !strings.HasPrefix(n, keyPrefix) {
			f(n)
		}
	}
	switch {
	case !k.compact:
	case k.base != nil:
		for _, n := range k.base.names {
			f(n)
		}
	default:
		for n := range ever {
			f(n)
		}
	}
}

// lookup returns the prebuilt of typ named id if still in the history.
func (g *group) lookup(typ, id string) *prebuilt {
	if id == "" {
		return nil
	}
	for _, pb := range g.history[typ] {
		if pb.id == id {
			return pb
		}
	}
	return nil
}

// remember adds pb to the history of typ and its names to the names ever
// served.
func (g *group) remember(typ string, pb *prebuilt) {
	h := g.history[typ]
	if len(h) > 0 && h[len(h)-1] == pb {
		return // unchanged, reused
	}
	if len(h) == histLen {
		h = slices.Delete(h, 0, 1)
	}
	g.history[typ] = append(h, pb)
	if pb.sameNames {
		return
	}
	ever := g.ever[typ]
	if ever == nil {
		ever = make(map[string]struct{}, len(pb.names))
		g.ever[typ] = ever
	}
	for _, n := range pb.names {
		ever[n] = struct{}{}
	}
}

// parseKnown reads a stream's returned resources.
func (g *group) parseKnown(typ string, m map[string]string) known {
	if id, ok := m[kState]; ok {
		k := known{m: m, compact: true, sys: id, base: g.lookup(typ, id)}
		k.pure = k.base != nil
		for n := range m {
			if !strings.HasPrefix(n, keyPrefix) {
				k.pure = false
				break
			}
		}
		return k
	}
	return known{m: m, sys: m[kSys]}
}

// nacked is what a stream holds after NACKing the response that brought it
// to m: what it held before, if that was a prebuilt still in the history,
// else nothing known (resynchronised at the next version). Either way it is
// not sent anything until the next version: resending what it refused would
// only be refused again.
func (g *group) nacked(typ string, m map[string]string) known {
	sent := m[kState]
	if sent == "" {
		sent = m[kSys]
	}
	k := known{compact: true, sys: sent}
	if from := g.lookup(typ, m[kFrom]); from != nil {
		k.base, k.pure = from, true
	}
	return k
}

// CreateDeltaWatch implements cache.ConfigWatcher. The watch is answered at
// once if the stream lacks something of the current version (or was never
// sent its version), else at the next Update.
func (c *groupCache) CreateDeltaWatch(req *cache.DeltaRequest, sub cache.Subscription, ch chan cache.DeltaResponse) (func(), error) {
	key := groupHash{}.ID(req.GetNode())
	typ := req.GetTypeUrl()
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groupLocked(key)
	w := &deltaWatch{req: req, ch: ch, wildcard: sub.IsWildcard()}
	if !w.wildcard {
		w.subs = maps.Clone(sub.SubscribedResources())
	}
	nack := req.GetErrorDetail() != nil
	if nack {
		w.known = g.nacked(typ, sub.ReturnedResources())
	} else {
		w.known = g.parseKnown(typ, sub.ReturnedResources())
	}
	if g.types != nil {
		cur := g.prebuiltLocked(typ)
		if !(nack && cur.id == w.known.sys) && g.answer(w, typ, cur) {
			return func() {}, nil
		}
	}
	c.nextID++
	id := c.nextID
	if g.deltaWatches[typ] == nil {
		g.deltaWatches[typ] = map[int64]*deltaWatch{}
	}
	g.deltaWatches[typ][id] = w
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(g.deltaWatches[typ], id)
	}, nil
}

// answerDeltaLocked answers the group's open delta watches after an Update.
func (g *group) answerDeltaLocked() {
	for _, typ := range orderedDeltaTypes(g.deltaWatches) {
		cur := g.prebuiltLocked(typ)
		for id, w := range g.deltaWatches[typ] {
			if g.answer(w, typ, cur) {
				delete(g.deltaWatches[typ], id)
			}
		}
	}
}

func orderedDeltaTypes(m map[string]map[int64]*deltaWatch) []string {
	out := slices.Clone(typeOrder)
	for _, typ := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(typeOrder, typ) {
			out = append(out, typ)
		}
	}
	return out
}

// answer sends w what its stream lacks of cur, and reports whether it sent
// anything. A stream that lacks nothing is still sent an empty response if
// it was never sent cur's version: the acked version (system_version_info)
// must advance on every Update, changed resources or not.
func (g *group) answer(w *deltaWatch, typ string, cur *prebuilt) bool {
	res, removed := w.diff(cur, g.ever[typ])
	if len(res) == 0 && len(removed) == 0 && w.known.sys == cur.id {
		return false
	}
	from := ""
	if w.known.pure {
		from = w.known.base.id
	}
	var returned map[string]string
	if w.wildcard {
		returned = map[string]string{kState: cur.id, kFrom: from}
	} else {
		// Subscribed by name: an explicit map, which the server can prune
		// when a name is unsubscribed (so it is sent again if subscribed
		// again); small, as it holds only the names subscribed.
		returned = make(map[string]string, len(w.subs)+2)
		for n := range w.subs {
			if i, ok := cur.index[n]; ok {
				returned[n] = cur.vers[i]
			}
		}
		returned[kSys], returned[kFrom] = cur.id, from
	}
	r := &deltaResponse{req: w.req, version: cur.version, res: res, removed: removed, returned: returned}
	select {
	case w.ch <- r:
	default: // never expected: the server buffers responses per type
		go func() { w.ch <- r }()
	}
	return true
}

// diff returns the resources of cur the stream lacks (or holds at another
// version) and the names it holds that cur has not. A stream holding
// exactly the prebuilt cur replaced gets the diff computed once at Update:
// O(changed), the common case. Any other is compared name by name.
func (w *deltaWatch) diff(cur *prebuilt, ever map[string]struct{}) ([]*discovery.Resource, []string) {
	k := &w.known
	switch {
	case w.wildcard && k.pure && k.base == cur:
		return nil, nil
	case w.wildcard && k.pure && cur.prevID != "" && cur.prevID == k.base.id:
		return cur.changed, cur.removed
	case w.wildcard && !k.compact && len(k.m) == 0:
		return cur.res, nil // a new client: everything, shared
	}
	var res []*discovery.Resource
	lacks := func(i int) bool {
		v, ok := k.version(cur.names[i])
		return !ok || v != cur.vers[i]
	}
	if w.wildcard {
		for i := range cur.names {
			if lacks(i) {
				res = append(res, cur.res[i])
			}
		}
	} else {
		var idx []int
		for n := range w.subs {
			if i, ok := cur.index[n]; ok && lacks(i) {
				idx = append(idx, i)
			}
		}
		slices.Sort(idx)
		for _, i := range idx {
			res = append(res, cur.res[i])
		}
	}
	var removed []string
	k.eachHeld(ever, func(n string) {
		if _, ok := cur.index[n]; ok {
			return
		}
		if _, ok := w.subs[n]; w.wildcard || ok {
			removed = append(removed, n)
		}
	})
	slices.Sort(removed)
	return res, slices.Compact(removed)
}

// resourceVersion is a delta resource's version: the snapshot's version of
// the name (a TopicRoute's config version, the cluster-set version) and a
// hash of its bytes. The config version says when it changed to a reader;
// the hash catches a resource rendered differently at the same config
// version (the control plane restarted with other defaults, targeting),
// which a reconnecting client's initial_resource_versions would otherwise
// hide.
func resourceVersion(named string, b []byte) string {
	h := fnv.New32a()
	_, _ = h.Write(b)
	return named + "." + strconv.FormatUint(uint64(h.Sum32()), 16)
}

// deltaResponse is a cache.DeltaResponse sharing the prebuilt resources.
// GetDeltaDiscoveryResponse returns a new message each time (the server
// stamps its nonce on it).
type deltaResponse struct {
	req      *discovery.DeltaDiscoveryRequest
	version  string
	res      []*discovery.Resource
	removed  []string
	returned map[string]string
}

var _ cache.DeltaResponse = (*deltaResponse)(nil)

func (r *deltaResponse) GetDeltaDiscoveryResponse() (*discovery.DeltaDiscoveryResponse, error) {
	return &discovery.DeltaDiscoveryResponse{SystemVersionInfo: r.version, Resources: r.res,
		RemovedResources: r.removed, TypeUrl: r.req.GetTypeUrl()}, nil
}

func (r *deltaResponse) GetDeltaRequest() *discovery.DeltaDiscoveryRequest { return r.req }

func (r *deltaResponse) GetSystemVersion() (string, error) { return r.version, nil }

func (r *deltaResponse) GetResponseVersion() string { return r.version }

func (r *deltaResponse) GetNextVersionMap() map[string]string { return r.returned }

func (r *deltaResponse) GetReturnedResources() map[string]string { return r.returned }

func (r *deltaResponse) GetContext() context.Context { return context.Background() }
