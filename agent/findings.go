package agent

import (
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/xds"
)

// Findings are what the agent's PROXY-phase checks find for an operator
// to act on before a cutover (docs/design.md §12). Every heartbeat carries
// all the open ones (at most xds.MaxFindings) to the control
// plane, which records an event when one opens; a finding closes when its
// check says it is resolved, or when no request met it for findingTTL.

// findingTTL is how long an open finding lasts after a request last met
// it: a producer that stopped (or was moved) stops being reported.
const findingTTL = 10 * time.Minute

// maxFindings bounds the findings the agent keeps; past it, the least
// recently seen one is dropped for a new one. Every heartbeat carries all
// of them (xds.MaxFindings).
const maxFindings = xds.MaxFindings

// findings are the agent's open findings, by migration.FindingKey.
type findings struct {
	log *slog.Logger
	now func() time.Time

	mu sync.Mutex
	m  map[migration.FindingKey]*batonv1.Finding
}

func newFindings(log *slog.Logger, reg prometheus.Registerer) *findings {
	fs := &findings{log: log, now: time.Now, m: map[migration.FindingKey]*batonv1.Finding{}}
	reg.MustRegister(findingsCollector{fs})
	return fs
}

// open notes a finding seen now. The first sighting of each is said at
// WARN: the detail says what to do.
func (fs *findings) open(kind migration.FindingKind, topic, principal, clientID, detail string) {
	k := migration.KeyOfFinding(kind, topic, principal, clientID)
	now := timestamppb.New(fs.now())
	fs.mu.Lock()
	f, ok := fs.m[k]
	if !ok {
		fs.pruneLocked()
		if len(fs.m) >= maxFindings {
			fs.dropOldestLocked()
		}
		f = &batonv1.Finding{Kind: string(kind), Topic: topic, FirstSeen: now}
		fs.m[k] = f
	}
	f.Principal, f.ClientId, f.Detail, f.LastSeen = principal, clientID, detail, now
	fs.mu.Unlock()
	if !ok {
		fs.log.Warn("finding: "+detail, "kind", kind, "topic", topic, "principal", principal, "client_id", clientID)
	}
}

// resolve closes principal's finding.
func (fs *findings) resolve(kind migration.FindingKind, topic, principal string) {
	k := migration.KeyOfFinding(kind, topic, principal, "")
	fs.mu.Lock()
	_, ok := fs.m[k]
	delete(fs.m, k)
	fs.mu.Unlock()
	if ok {
		fs.log.Info("finding resolved", "kind", kind, "topic", topic, "principal", principal)
	}
}

func (fs *findings) pruneLocked() {
	now := fs.now()
	for k, f := range fs.m {
		if now.Sub(f.GetLastSeen().AsTime()) > findingTTL {
			delete(fs.m, k)
		}
	}
}

func (fs *findings) dropOldestLocked() {
	var oldest migration.FindingKey
	var at time.Time
	for k, f := range fs.m {
		if t := f.GetLastSeen().AsTime(); at.IsZero() || t.Before(at) {
			oldest, at = k, t
		}
	}
	delete(fs.m, oldest)
}

// report is what a heartbeat carries: copies of the open findings, the
// most recently seen first, at most xds.MaxFindings.
func (fs *findings) report() []*batonv1.Finding {
	fs.mu.Lock()
	fs.pruneLocked()
	out := make([]*batonv1.Finding, 0, len(fs.m))
	for _, f := range fs.m {
		out = append(out, &batonv1.Finding{Kind: f.Kind, Topic: f.Topic, Principal: f.Principal, ClientId: f.ClientId,
			Detail: f.Detail, FirstSeen: f.FirstSeen, LastSeen: f.LastSeen})
	}
	fs.mu.Unlock()
	slices.SortFunc(out, func(a, b *batonv1.Finding) int { return b.GetLastSeen().AsTime().Compare(a.GetLastSeen().AsTime()) })
	return out[:min(len(out), xds.MaxFindings)]
}

// openFindingsDesc is the gauge of the agent's open findings.
var openFindingsDesc = prometheus.NewDesc("baton_agent_open_findings",
	"Open findings of the agent's PROXY-phase checks (docs/design.md §12), by kind and topic.", []string{"kind", "topic"}, nil)

type findingsCollector struct{ fs *findings }

func (c findingsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- openFindingsDesc }

func (c findingsCollector) Collect(ch chan<- prometheus.Metric) {
	n := map[[2]string]int{}
	c.fs.mu.Lock()
	c.fs.pruneLocked()
	for k := range c.fs.m {
		n[[2]string{string(k.Kind), k.Topic}]++
	}
	c.fs.mu.Unlock()
	for k, v := range n {
		ch <- prometheus.MustNewConstMetric(openFindingsDesc, prometheus.GaugeValue, float64(v), k[0], k[1])
	}
}
