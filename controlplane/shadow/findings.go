package shadow

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/xds"
)

// Findings are what agents report with their heartbeats for an operator to
// act on before a cutover (docs/design.md §12): a principal that may write
// a topic on the source but not on the destination
// (migration.FindingAuthMissing), and the further kinds package migration
// declares as PROXY-phase features report them. They are kept in
// memory: an agent sends its open findings with every heartbeat, so a
// restarted control plane knows them again within one heartbeat interval
// (lease/3) of each agent, and records each one's event again then.

// Finding is one open finding, merged over the agents that report it.
type Finding struct {
	Kind      migration.FindingKind `json:"kind"`
	Topic     string                `json:"topic"`
	Principal string                `json:"principal,omitempty"`
	ClientID  string                `json:"clientId,omitempty"`
	// Detail says what to do (for auth_missing, the ACL to add).
	Detail string `json:"detail"`
	// FirstSeen and LastSeen are the agents' clocks (LastSeen never later
	// than the control plane's), the earliest and the latest of any agent.
	FirstSeen time.Time `json:"firstSeen"`
	LastSeen  time.Time `json:"lastSeen"`
	// Agents are the nodes that report it, with when each last did (the
	// control plane's clock).
	Agents map[string]time.Time `json:"agents"`
}

// Bounds of the findings kept. An agent sends at most xds.MaxFindings per
// heartbeat; the control plane keeps at most maxOpenFindings in all, and
// says once at WARN when it drops one.
const maxOpenFindings = 1024

// findingTTL is how long a finding stays open after the last heartbeat
// that carried it: an agent sends its open findings with every heartbeat
// (every lease/3), so three leases cover missed heartbeats, and a finding
// the agents resolved or aged out closes soon after.
func (j *Job) findingTTL() time.Duration { return 3 * j.lease }

// findingSet is the control plane's open findings, by
// migration.FindingKey: one event is recorded per key when it opens. Its
// lock is its own: heartbeats update it outside any lock of the control
// plane's.
type findingSet struct {
	mu      sync.Mutex
	open    map[migration.FindingKey]*Finding
	warned  bool      // the bound was hit and said
	started time.Time // the control plane's start, for events after a restart
}

// noteFindings merges what node reported, recording an event for each
// finding that opens. now is the heartbeat's arrival.
func (j *Job) noteFindings(ctx context.Context, node string, fs []*batonv1.Finding, now time.Time) {
	if len(fs) > xds.MaxFindings {
		fs = fs[:xds.MaxFindings]
	}
	var opened []Finding
	set := &j.findings
	set.mu.Lock()
	j.pruneFindingsLocked(now)
	for _, f := range fs {
		if f.GetKind() == "" || f.GetTopic() == "" {
			continue
		}
		k := migration.KeyOfFinding(migration.FindingKind(f.GetKind()), f.GetTopic(), f.GetPrincipal(), f.GetClientId())
		first, last := f.GetFirstSeen().AsTime(), f.GetLastSeen().AsTime()
		if last.After(now) || f.GetLastSeen() == nil {
			last = now // an agent's clock ahead of ours says nothing later than now
		}
		if f.GetFirstSeen() == nil || first.After(last) {
			first = last
		}
		o := set.open[k]
		if o == nil {
			if len(set.open) >= maxOpenFindings {
				if !set.warned {
					set.warned = true
					j.log.Warn("too many open findings: new ones are dropped until some close; act on the open ones (baton status TOPIC)",
						"max", maxOpenFindings)
				}
				continue
			}
			o = &Finding{Kind: k.Kind, Topic: k.Topic, FirstSeen: first, Agents: map[string]time.Time{}}
			set.open[k] = o
			opened = append(opened, Finding{Kind: k.Kind, Topic: k.Topic, Principal: f.GetPrincipal(),
				ClientID: f.GetClientId(), Detail: f.GetDetail(), FirstSeen: first})
		}
		o.Principal, o.ClientID, o.Detail = f.GetPrincipal(), f.GetClientId(), f.GetDetail()
		if first.Before(o.FirstSeen) {
			o.FirstSeen = first
		}
		if last.After(o.LastSeen) {
			o.LastSeen = last
		}
		o.Agents[node] = now
	}
	started := set.started
	set.mu.Unlock()
	for _, f := range opened {
		who := f.Principal
		if f.ClientID != "" {
			who += fmt.Sprintf(" (client id %q)", f.ClientID)
		}
		reason := fmt.Sprintf("%s: %s: %s", f.Kind, strings.TrimSpace(who), f.Detail)
		if f.FirstSeen.Before(started) {
			reason += " (open since before the control plane started)"
		}
		j.rec.Record(ctx, Event{Topic: f.Topic, Kind: EventFinding, Agent: node, Reason: reason})
	}
}

// pruneFindingsLocked forgets what each agent stopped reporting findingTTL
// ago, and the findings no agent reports any more.
func (j *Job) pruneFindingsLocked(now time.Time) {
	ttl := j.findingTTL()
	for k, f := range j.findings.open {
		for n, at := range f.Agents {
			if now.Sub(at) > ttl {
				delete(f.Agents, n)
			}
		}
		if len(f.Agents) == 0 {
			delete(j.findings.open, k)
		}
	}
	if len(j.findings.open) < maxOpenFindings {
		j.findings.warned = false
	}
}

// OpenFindings returns topic's open findings of kind ("" for every kind)
// that an agent saw within the last within (0: any open one), sorted by
// kind, then principal or client id: what a cutover gate asks.
func (j *Job) OpenFindings(topic string, kind migration.FindingKind, within time.Duration) []Finding {
	now := j.now()
	set := &j.findings
	set.mu.Lock()
	defer set.mu.Unlock()
	j.pruneFindingsLocked(now)
	var out []Finding
	for k, f := range set.open {
		if (topic != "" && k.Topic != topic) || (kind != "" && k.Kind != kind) {
			continue
		}
		if within > 0 && now.Sub(f.LastSeen) > within {
			continue
		}
		c := *f
		c.Agents = maps.Clone(f.Agents)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Finding) int {
		return strings.Compare(a.Topic+"\x00"+string(a.Kind)+"\x00"+a.Principal+"\x00"+a.ClientID,
			b.Topic+"\x00"+string(b.Kind)+"\x00"+b.Principal+"\x00"+b.ClientID)
	})
	return out
}

// openFindingsDesc is the gauge of open findings by kind and topic.
var openFindingsDesc = prometheus.NewDesc("baton_controlplane_open_findings",
	"Open findings agents report (docs/design.md §12), by kind and topic.", []string{"kind", "topic"}, nil)

// findingsCollector exports the open findings at each scrape.
type findingsCollector struct{ j *Job }

var _ prometheus.Collector = findingsCollector{}

func (c findingsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- openFindingsDesc }

func (c findingsCollector) Collect(ch chan<- prometheus.Metric) {
	n := map[[2]string]int{}
	for _, f := range c.j.OpenFindings("", "", 0) {
		n[[2]string{string(f.Kind), f.Topic}]++
	}
	for k, v := range n {
		ch <- prometheus.MustNewConstMetric(openFindingsDesc, prometheus.GaugeValue, float64(v), k[0], k[1])
	}
}
