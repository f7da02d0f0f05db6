package controlplane

import (
	"context"
	"fmt"
	"net/http"
	"slices"
)

// What `baton apply` reads besides the topics (docs/kubernetes.md, Plan):
// the clusters this control plane migrates between, so that a plan written
// for other clusters is refused, and the source's topics, which a plan's
// regex entries are matched against.

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

// handlePlanReads adds the reads of `baton apply` to mux:
//
//	GET /v1/clusters       the source and destination: name, bootstrap
//	GET /v1/source-topics  the source cluster's topics (internal ones left out)
func (cp *ControlPlane) handlePlanReads(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/clusters", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, cp.Clusters()) })
	mux.HandleFunc("GET /v1/source-topics", func(w http.ResponseWriter, r *http.Request) {
		ts, err := cp.SourceTopics(r.Context())
		if ts == nil {
			ts = []string{}
		}
		reply(w, ts, err)
	})
}

// Clusters reads the clusters the control plane migrates between.
func (c *APIClient) Clusters(ctx context.Context) (ClustersView, error) {
	var out ClustersView
	return out, c.do(ctx, http.MethodGet, "/v1/clusters", nil, &out)
}

// SourceTopics lists the source cluster's topics.
func (c *APIClient) SourceTopics(ctx context.Context) ([]string, error) {
	var out []string
	return out, c.do(ctx, http.MethodGet, "/v1/source-topics", nil, &out)
}
