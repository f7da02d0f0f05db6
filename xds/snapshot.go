package xds

import (
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/proto"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
)

// snapshot is one node group's resources: a cache.ResourceSnapshot for
// Baton's own type URLs (go-control-plane's Snapshot only knows Envoy's).
type snapshot struct {
	versions  map[string]string
	resources map[string]map[string]types.ResourceWithTTL
	perName   map[string]map[string]string // delta: resource versions
}

var _ cache.ResourceSnapshot = (*snapshot)(nil)

// buildSnapshot renders res for nodes in (namespace, workload).
func buildSnapshot(res *Resources, clusterVersion, namespace, workload string) *snapshot {
	routes := make(map[string]types.ResourceWithTTL, len(res.Routes))
	routeVers := make(map[string]string, len(res.Routes))
	for _, r := range res.Routes {
		out := r
		if t, ok := res.Targets[r.GetTopic()]; ok && !t.Matches(namespace, workload) &&
			(r.GetShadow() != nil || r.GetDestinationLatency() != nil) {
			out = proto.Clone(r).(*batonv1.TopicRoute)
			// Not targeted: shadow features off, and no latency profile,
			// so that a new measurement is not pushed to nodes that do
			// not emulate it.
			out.Shadow, out.DestinationLatency = nil, nil
		}
		routes[r.GetTopic()] = types.ResourceWithTTL{Resource: out}
		routeVers[r.GetTopic()] = FormatVersion(r.GetVersion())
	}
	clusters := make(map[string]types.ResourceWithTTL, len(res.Clusters))
	clusterVers := make(map[string]string, len(res.Clusters))
	for _, c := range res.Clusters {
		clusters[c.GetName()] = types.ResourceWithTTL{Resource: c}
		clusterVers[c.GetName()] = clusterVersion
	}
	return &snapshot{
		versions:  map[string]string{TopicRouteType: FormatVersion(res.Version), ClusterType: clusterVersion},
		resources: map[string]map[string]types.ResourceWithTTL{TopicRouteType: routes, ClusterType: clusters},
		perName:   map[string]map[string]string{TopicRouteType: routeVers, ClusterType: clusterVers},
	}
}

func (s *snapshot) GetVersion(typeURL string) string { return s.versions[typeURL] }

func (s *snapshot) GetResourcesAndTTL(typeURL string) map[string]types.ResourceWithTTL {
	return s.resources[typeURL]
}

func (s *snapshot) GetResources(typeURL string) map[string]types.Resource {
	in := s.resources[typeURL]
	out := make(map[string]types.Resource, len(in))
	for k, v := range in {
		out[k] = v.Resource
	}
	return out
}

func (s *snapshot) ConstructVersionMap() error { return nil }

func (s *snapshot) GetVersionMap(typeURL string) map[string]string { return s.perName[typeURL] }
