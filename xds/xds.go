// Package xds owns Baton's xDS wiring: the ADS server (go-control-plane's,
// on a cache that marshals each node group's resources once per version and
// shares them across the group's nodes) that serves Cluster and TopicRoute
// resources (api/baton/v1) to agents, targeted per node by its metadata
// (namespace, workload), with every node's ACKs and NACKs recorded; and the
// client side agents and test stand-ins use: Client subscribes over ADS,
// applies each response through a callback and ACKs or NACKs it,
// reconnecting until stopped; LeaseKeeper heartbeats to the Lease service
// and says whether the agent may forward.
//
// Protocols: the server answers both state-of-the-world ADS (every response
// carries every resource of its type) and incremental, delta ADS (a response
// carries only the resources that changed for the node since what it holds,
// and the names of removed ones); Client speaks delta unless told otherwise
// (UseProtocol). With 10,000 routes, delta is what keeps one topic's change
// from costing every node a 10,000-route response.
//
// Versions: every response's version_info (SotW) or system_version_info
// (delta) is the control plane's config version (a decimal uint64) for
// TopicRoute, and a cluster-set version for Cluster. A delta resource's own
// version is the config version at which it last changed and a hash of its
// bytes. An agent's acked version only advances on an ACK; a NACK is
// recorded with its error and leaves the acked version where it was. A delta
// ACK carries no version: the server takes the one it sent with the nonce.
//
// Targeting: a topic's Target (namespaces, workloads; empty means all) says
// which nodes get its shadow features in REJECT and PROXY. Every node gets
// every TopicRoute, and MIGRATING and COMPLETE routes go to every node
// whatever the target: a node left out of a cutover would keep writing to
// the source (invariant 4, docs/design.md §4). So a rollout is staged per
// namespace by turning shadow features on namespace by namespace.
package xds

import (
	"errors"
	"strconv"

	"google.golang.org/protobuf/types/known/structpb"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// Type URLs of the resources served.
const (
	TopicRouteType = "type.googleapis.com/baton.v1.TopicRoute"
	ClusterType    = "type.googleapis.com/baton.v1.Cluster"
)

// Node metadata keys read for targeting.
const (
	MetaNamespace = "namespace"
	MetaWorkload  = "workload"
)

// Errors.
var (
	// ErrBadConfig is returned for options out of range.
	ErrBadConfig = errors.New("xds: bad config")
	// ErrBadResource is what a client NACKs when a resource cannot be decoded.
	ErrBadResource = errors.New("xds: bad resource")
	// ErrBadVersion is returned for a version_info that is not a uint64.
	ErrBadVersion = errors.New("xds: bad version")
	// errOlderRoutes: a delta stream sent routes older than the ones
	// applied (a control-plane replica lagging behind); the client starts
	// the stream again, telling the server what it holds.
	errOlderRoutes = errors.New("xds: the server sent routes older than the ones applied")
)

// NodeMeta returns an xDS node with Baton's metadata keys set.
func NodeMeta(id, namespace, workload string) *core.Node {
	md, _ := structpb.NewStruct(map[string]any{MetaNamespace: namespace, MetaWorkload: workload})
	return &core.Node{Id: id, Metadata: md}
}

// nodeLabels reads namespace and workload from a node's metadata.
func nodeLabels(n *core.Node) (namespace, workload string) {
	f := n.GetMetadata().GetFields()
	return f[MetaNamespace].GetStringValue(), f[MetaWorkload].GetStringValue()
}

// FormatVersion renders a config version as version_info.
func FormatVersion(v uint64) string { return strconv.FormatUint(v, 10) }

// ParseVersion reads a version_info written by FormatVersion; "" is 0.
func ParseVersion(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, errors.Join(ErrBadVersion, err)
	}
	return v, nil
}
