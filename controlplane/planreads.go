package controlplane

import (
	"context"
	"fmt"
	"slices"
)

// What `baton apply` reads besides the topics (docs/kubernetes.md, Plan),
// through the HTTP API (package httpapi): the clusters this control plane
// migrates between, so that a plan written for other clusters is refused,
// and the source's topics, which a plan's regex entries are matched
// against.

// ClusterInfo is one cluster as the control plane knows it: its name in
// the routes (TopicSpec.Source, .Destination) and its bootstrap brokers.
type ClusterInfo struct {
	Name      string   `json:"name"`
	Bootstrap []string `json:"bootstrap"`
}

// ClustersView is GET /v1/clusters.
type ClustersView struct {
	Source      ClusterInfo `json:"source"`
	Destination ClusterInfo `json:"destination"`
}

// SourceTopicLister is a Replication that can list the source cluster's
// topics (internal topics left out).
type SourceTopicLister interface {
	SourceTopics(ctx context.Context) ([]string, error)
}

// Clusters is the clusters this control plane migrates between.
func (cp *ControlPlane) Clusters() ClustersView {
	return ClustersView{
		Source:      ClusterInfo{Name: cp.cfg.source.GetName(), Bootstrap: slices.Clone(cp.cfg.source.GetBootstrap())},
		Destination: ClusterInfo{Name: cp.cfg.dest.GetName(), Bootstrap: slices.Clone(cp.cfg.dest.GetBootstrap())},
	}
}

// SourceTopics lists the source cluster's topics, sorted, through the
// replication (ErrBadConfig if it cannot list them).
func (cp *ControlPlane) SourceTopics(ctx context.Context) ([]string, error) {
	l, ok := cp.cfg.repl.(SourceTopicLister)
	if !ok {
		return nil, fmt.Errorf("%w: this control plane's replication (%T) cannot list the source's topics", ErrBadConfig, cp.cfg.repl)
	}
	return l.SourceTopics(ctx)
}
