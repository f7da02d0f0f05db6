package agent_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/baton-kafka/baton/agent"
	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/xds"
)

// authClusters are a source where alice and bob may write "orders", and a
// destination where only alice may: admin is a super user of both.
func authClusters(t *testing.T) (src, dst *kfake.Cluster) {
	t.Helper()
	topicACL := func(op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "orders", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
	}
	idem := kfake.ACL{Resource: kmsg.ACLResourceTypeCluster, Name: "kafka-cluster", Pattern: kmsg.ACLResourcePatternTypeLiteral,
		Operation: kmsg.ACLOperationIdempotentWrite, Allow: true}
	cluster := func(name string, bobWrites bool) *kfake.Cluster {
		bob := []kfake.ACL{idem, topicACL(kmsg.ACLOperationDescribe)}
		if bobWrites {
			bob = append(bob, topicACL(kmsg.ACLOperationWrite))
		}
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ClusterID(name), kfake.EnableSASL(), kfake.EnableACLs(),
			kfake.Superuser("PLAIN", "admin", "admin-secret"),
			kfake.User("PLAIN", "alice", "alice-secret", idem, topicACL(kmsg.ACLOperationDescribe), topicACL(kmsg.ACLOperationWrite)),
			kfake.User("PLAIN", "bob", "bob-secret", bob...),
			kfake.SeedTopics(1, "orders"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	return cluster("source", true), cluster("destination", false)
}

// findingsOf returns the findings of the last heartbeat.
func (cp *testControlPlane) findingsOf() []*batonv1.Finding {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.last.GetFindings()
}

// counterValue sums a counter's series whose labels include want.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v != l.GetValue() {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestAuthCheckForwardedPrincipals: with SASL forward, the destination will
// see each client's own principal. In PROXY with the auth check on, bob,
// who may write "orders" on the source but not on the destination, is
// reported to the control plane with his heartbeats (naming the ACL to
// add) while his writes still go to the source; alice is not. With
// auth_enforce, bob's produce is refused TOPIC_AUTHORIZATION_FAILED (his
// client gives up at once) and alice's goes on.
func TestAuthCheckForwardedPrincipals(t *testing.T) {
	t.Parallel()
	src, dst := authClusters(t)
	cp := startTestControlPlane(t, 3*time.Second, time.Second)
	cp.grant.Store(true)
	conn, err := grpc.NewClient(cp.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	reg := prometheus.NewRegistry()
	admin := agent.Security{SASL: plain.Auth{User: "admin", Pass: "admin-secret"}.AsMechanism()}
	a := quietAgent(t, agent.Source(src.ListenAddrs()...), agent.Destination(dst.ListenAddrs()...),
		agent.SourceSecurity(admin), agent.DestinationSecurity(admin), agent.Registry(reg),
		agent.ListenSecurity(agent.ClientSecurity{SASL: agent.SASLForward}),
		agent.ControlPlane(conn, xds.NodeMeta("pod-auth", "ns", "wl")))
	as := func(user string) *kgo.Client {
		return newClient(t, a.Addr(), kgo.SASL(plain.Auth{User: user, Pass: user + "-secret"}.AsMechanism()),
			kgo.RecordDeliveryTimeout(10*time.Second), kgo.RequestRetries(2))
	}
	alice, bob := as("alice"), as("bob")
	route := func(enforce bool) *batonv1.TopicRoute {
		return &batonv1.TopicRoute{Topic: "orders", State: batonv1.State_STATE_PROXY, HoldMax: durationpb.New(4 * time.Second),
			Shadow: &batonv1.ShadowFeatures{AuthCheck: true, AuthEnforce: enforce}}
	}
	cp.publishRoute(t, 1, route(false))

	// The first checked produce finds the cache cold, goes on, and has the
	// ACLs read; bob is reported from his next ones.
	wait.For(t, 20*time.Second, "bob's finding in a heartbeat", func() string {
		if err := produceOne(bob, "orders"); err != nil {
			t.Fatalf("bob to orders, not enforced: %v", err)
		}
		if err := produceOne(alice, "orders"); err != nil {
			t.Fatalf("alice to orders: %v", err)
		}
		fs := cp.findingsOf()
		if len(fs) == 0 {
			return "no finding reported yet"
		}
		return ""
	})
	fs := cp.findingsOf()
	if len(fs) != 1 || fs[0].GetKind() != string(migration.FindingAuthMissing) || fs[0].GetTopic() != "orders" || fs[0].GetPrincipal() != "User:bob" ||
		!strings.Contains(fs[0].GetDetail(), "--allow-principal User:bob --operation Write --topic orders") {
		t.Fatalf("findings reported: %v; want one, bob's on orders, naming the ACL to add", fs)
	}
	if n := gaugeValue(t, reg, "baton_agent_open_findings"); n != 1 {
		t.Fatalf("baton_agent_open_findings = %v, want 1", n)
	}
	if n := counterValue(t, reg, "baton_agent_auth_missing_total", map[string]string{"topic": "orders", "refused": "false"}); n < 1 {
		t.Fatalf("baton_agent_auth_missing_total{refused=false} = %v, want at least 1", n)
	}

	cp.publishRoute(t, 2, route(true))
	if err := produceOne(bob, "orders"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("bob to orders, enforced: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	if err := produceOne(alice, "orders"); err != nil {
		t.Fatalf("alice to orders, enforced: %v", err)
	}
	if n := counterValue(t, reg, "baton_agent_auth_missing_total", map[string]string{"topic": "orders", "refused": "true"}); n < 1 {
		t.Fatalf("baton_agent_auth_missing_total{refused=true} = %v, want at least 1", n)
	}
	for _, f := range cp.findingsOf() {
		if f.GetPrincipal() != "User:bob" {
			t.Fatalf("a finding of %s: %v", f.GetPrincipal(), f)
		}
	}

	// Out of PROXY nothing is checked: COMPLETE writes the destination,
	// which refuses bob itself.
	cp.publishRoute(t, 3, &batonv1.TopicRoute{Topic: "orders", State: batonv1.State_STATE_COMPLETE,
		Shadow: &batonv1.ShadowFeatures{AuthCheck: true, AuthEnforce: true}})
	if err := produceOne(alice, "orders"); err != nil {
		t.Fatalf("alice to orders, COMPLETE: %v", err)
	}
}

// TestAuthCheckAgentPrincipal: without forwarded credentials, the
// destination will see the agent's own principal (AuthCheckConfig's): it
// is reported when it may not write, unless it is one of the destination's
// super users; a topic whose check is off is not looked at.
func TestAuthCheckAgentPrincipal(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		principal string
		super     []string
		check     bool
		want      float64 // open findings
	}{
		{"may not write", "User:bob", nil, true, 1},
		{"may write", "User:alice", nil, true, 0},
		{"super user", "User:bob", []string{"User:bob"}, true, 0},
		{"check off", "User:bob", nil, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src, dst := authClusters(t)
			reg := prometheus.NewRegistry()
			admin := agent.Security{SASL: plain.Auth{User: "admin", Pass: "admin-secret"}.AsMechanism()}
			routes := agent.NewRouteTable([]agent.Route{{Topic: "orders", State: migration.Proxy, AuthCheck: true}})
			a := quietAgent(t, agent.Source(src.ListenAddrs()...), agent.Destination(dst.ListenAddrs()...),
				agent.SourceSecurity(admin), agent.DestinationSecurity(admin), agent.Registry(reg), agent.Routes(routes),
				agent.AuthCheck(agent.AuthCheckConfig{Principal: tc.principal, SuperUsers: tc.super}))
			cl := newClient(t, a.Addr())
			// The first checked produce finds the cache cold, goes on
			// unchecked, and has the ACLs read.
			if err := produceOne(cl, "orders"); err != nil {
				t.Fatalf("produce: %v", err)
			}
			wait.For(t, 20*time.Second, "the destination's ACLs read", func() string {
				if n := gaugeValue(t, reg, "baton_agent_auth_check_acls"); n < 0 {
					return "not yet"
				}
				return ""
			})
			if n := gaugeValue(t, reg, "baton_agent_open_findings"); n != 0 {
				t.Fatalf("baton_agent_open_findings = %v before a produce was checked", n)
			}
			routes.Replace([]agent.Route{{Topic: "orders", State: migration.Proxy, AuthCheck: tc.check}})
			if err := produceOne(cl, "orders"); err != nil {
				t.Fatalf("produce: %v", err)
			}
			if n := gaugeValue(t, reg, "baton_agent_open_findings"); n != tc.want {
				t.Fatalf("baton_agent_open_findings = %v, want %v", n, tc.want)
			}
		})
	}
}
