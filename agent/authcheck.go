package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/authcheck"
	"github.com/baton-kafka/baton/migration"
)

// AuthCheckConfig tunes the PROXY-phase auth check (filter/authcheck),
// which a topic turns on with its route's auth check switch.
type AuthCheckConfig struct {
	// Principal is the principal the destination gives the agent's own
	// connections (DestinationSecurity): the one it checks for clients
	// without forwarded credentials. Default: User:ANONYMOUS when the
	// agent reaches the destination without SASL or a client certificate;
	// otherwise unknown, and such clients are not checked (said once at
	// WARN).
	Principal string
	// SuperUsers are the destination's super.users: ACLs do not show them.
	SuperUsers []string
	// AllowEveryoneIfNoACL mirrors the destination's
	// allow.everyone.if.no.acl.found (default false).
	AllowEveryoneIfNoACL bool
	// Refresh is how often the destination's ACLs are read again (default
	// 1 minute).
	Refresh time.Duration
}

// AuthCheck tunes the auth check, overriding the defaults above.
func AuthCheck(c AuthCheckConfig) Opt { return optFunc(func(cfg *config) { cfg.authCheck = c }) }

// newAuthCheck is the agent's auth check: the route table's switches, the
// agent's own destination connection for DescribeACLs, and the agent's
// findings.
func (a *Agent) newAuthCheck() (*authcheck.Factory, error) {
	c := a.cfg.authCheck
	if c.Principal == "" && a.cfg.dstSec.SASL == nil && (a.cfg.dstSec.TLS == nil || len(a.cfg.dstSec.TLS.Certificates) == 0) {
		c.Principal = "User:ANONYMOUS"
	}
	counted := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "baton_agent_auth_missing_total",
		Help: "Produce requests the destination's ACLs would refuse after the cutover (auth check), by topic and whether the agent refused them.",
	}, []string{"topic", "refused"})
	a.cfg.registry.MustRegister(counted)
	var warnOnce sync.Once
	f, err := authcheck.New(authcheck.Config{
		Topics:   authTopics{a},
		Describe: a.describeDestinationACLs,
		Principal: func(ctx context.Context, _ filter.ConnInfo) string {
			if a.cfg.clientSec.SASL == SASLForward {
				if rt, ok := ctx.Value(routerKey{}).(*router); ok && rt.pair != nil {
					return rt.pair.principal
				}
				return ""
			}
			if c.Principal == "" {
				warnOnce.Do(func() {
					a.log.Warn("auth check off for clients without forwarded credentials: the agent does not know the principal " +
						"the destination gives it; name it (--destination-principal)")
				})
			}
			return c.Principal
		},
		SuperUsers: c.SuperUsers, AllowEveryoneIfNoACL: c.AllowEveryoneIfNoACL, Refresh: c.Refresh,
		Reporter: authReporter{a.findings},
		Count: func(topic string, refused bool) {
			counted.WithLabelValues(topic, fmt.Sprint(refused)).Inc()
		},
		Log: a.log,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: auth check: %w", ErrBadConfig, err)
	}
	a.cfg.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "baton_agent_auth_check_acls",
		Help: "The destination's topic ACLs the auth check holds; -1 before they were read (no checked produce yet) or while the agent may not read them.",
	}, func() float64 {
		if n, ok := f.Cached(); ok {
			return float64(n)
		}
		return -1
	}))
	return f, nil
}

// describeDestinationACLs asks the destination for its ACLs with the
// agent's own credentials.
func (a *Agent) describeDestinationACLs(ctx context.Context, req *kmsg.DescribeACLsRequest) (*kmsg.DescribeACLsResponse, error) {
	v := a.dst.Version(req.Key(), req.MaxVersion())
	if v < 0 {
		if err := a.dst.LoadVersions(ctx); err != nil {
			return nil, err
		}
		if v = a.dst.Version(req.Key(), req.MaxVersion()); v < 0 {
			return nil, errors.New("the destination does not serve DescribeACLs")
		}
	}
	req.SetVersion(v)
	resp, _, err := a.dst.Ask(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.(*kmsg.DescribeACLsResponse), nil
}

// authTopics says which produce requests the auth check checks: those of
// a topic in PROXY, bound for the source, with the route's auth check on.
type authTopics struct{ a *Agent }

var _ authcheck.Topics = authTopics{}

// Check implements authcheck.Topics.
func (t authTopics) Check(topic string) (bool, bool) {
	r := t.a.routes.Lookup(topic)
	if !r.AuthCheck || r.State != migration.Proxy || r.Target() != filter.Source {
		return false, false
	}
	return true, r.AuthEnforce
}

// authReporter turns the auth check's reports into the agent's findings.
type authReporter struct{ fs *findings }

var _ authcheck.Reporter = authReporter{}

func (r authReporter) Missing(m authcheck.Missing) {
	r.fs.open(migration.FindingAuthMissing, m.Topic, m.Principal, m.ClientID, m.Detail)
}

func (r authReporter) Resolved(topic, principal string) {
	r.fs.resolve(migration.FindingAuthMissing, topic, principal)
}
