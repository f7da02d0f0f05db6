package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/baton-kafka/baton/agent"
	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/internal/testcert"
	"github.com/baton-kafka/baton/internal/testlog"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
	"github.com/baton-kafka/baton/test/clients"
	"github.com/baton-kafka/baton/xds"
)

// authchkPrefix starts the auth check test's topics (its users' grants are
// prefixed ACLs).
const authchkPrefix = "authchk-"

// TestAuthCheckRealKafka: the PROXY-phase auth check against a destination
// with StandardAuthorizer. S and D (Apache Kafka, one broker each, SASL_SSL
// only, PLAIN) grant app WRITE on the topics on both clusters and other
// WRITE on S only; the agent's own identity may describe D's ACLs. The
// control plane runs in process (memory store, the replicator as admin,
// no write guard), one agent serves --client-sasl forward, so D will see
// each client's own principal after the cutover.
//
//   - reported: T in PROXY with auth_check. app and other both write T
//     through the agent (to S); the control plane records other's finding
//     (an event naming User:other and the ACL to add, and OpenFindings),
//     never one for app.
//   - refused: T2 in PROXY with auth_enforce. other's produce is refused
//     TOPIC_AUTHORIZATION_FAILED and nothing of it reaches S; app's is
//     acked.
func TestAuthCheckRealKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Apache Kafka")
	}
	t.Parallel()
	ca := testcert.New(t)
	clusterTLS := &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}
	brokers := saslSSLBrokers(t, ca, clusterTLS)
	srcStarted, dstStarted := startKafkaAsync(t, 1, brokers...), startKafkaAsync(t, 1, brokers...)
	src, dst := srcStarted(t), dstStarted(t)

	ctx, cancel := context.WithTimeout(t.Context(), caseTimeout)
	defer cancel()
	admin := securedAdmin(clusterTLS)
	srcAdm := kadm.NewClient(newClient(t, src.Bootstrap(), admin...))
	dstAdm := kadm.NewClient(newClient(t, dst.Bootstrap(), admin...))
	topics := func(user string, ops ...kadm.ACLOperation) *kadm.ACLBuilder {
		return kadm.NewACLs().Topics(authchkPrefix).ResourcePatternType(kadm.ACLPatternPrefixed).Allow("User:" + user).AllowHosts().Operations(ops...)
	}
	createACLs(t, ctx, srcAdm, topics("app", kadm.OpWrite, kadm.OpDescribe), topics("other", kadm.OpWrite, kadm.OpDescribe),
		topics("agent", kadm.OpDescribe))
	createACLs(t, ctx, dstAdm, topics("app", kadm.OpWrite, kadm.OpDescribe), topics("other", kadm.OpDescribe),
		topics("agent", kadm.OpDescribe),
		// What the agent needs to read D's ACLs.
		kadm.NewACLs().Clusters().Allow("User:agent").AllowHosts().Operations(kadm.OpDescribe))
	for _, c := range []struct {
		name, bootstrap string
	}{{"S", src.Bootstrap()}, {"D", dst.Bootstrap()}} {
		probe := authchkPrefix + "probe"
		if err := clients.CreateTopic(ctx, c.bootstrap, probe, 1, 1, admin...); err != nil {
			t.Fatalf("on %s: %v", c.name, err)
		}
		waitWritable(t, ctx, c.bootstrap, clusterTLS, plainAs("app"), "app", probe, 1)
	}
	topic := fmt.Sprintf("%s%d-%d", authchkPrefix, os.Getpid(), topicSeq.Add(1))
	enforced := topic + "-enforced"
	for _, tp := range []string{topic, enforced} {
		if err := clients.CreateTopic(ctx, src.Bootstrap(), tp, 1, 1, admin...); err != nil {
			t.Fatalf("on the source: %v", err)
		}
	}

	// The control plane.
	var cpLog testlog.Buffer
	log := slog.New(slog.NewTextHandler(&cpLog, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("control plane and replicator log, last lines:\n%s", lastLines(cpLog.String(), 60))
		}
	})
	r, err := replicator.New(replicator.Source(src.Addrs()...), replicator.Destination(dst.Addrs()...), replicator.Logger(log),
		replicator.SourceClientOpts(admin...), replicator.DestinationClientOpts(admin...))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := controlplane.New(ctx, controlplane.WithStore(controlplane.NewMemStore()), controlplane.Logger(log),
		controlplane.WithReplication(&replication.ReplicatorAdapter{R: r, Source: srcAdm}),
		controlplane.Clusters(&batonv1.Cluster{Name: "source", Bootstrap: src.Addrs()},
			&batonv1.Cluster{Name: "destination", Bootstrap: dst.Addrs()}))
	if err != nil {
		t.Fatal(err)
	}
	conn := serveInProcess(t, cp, r)

	// The agent: --client-sasl forward (on loopback, no TLS needed), its
	// own identity upstream for what is the agent's (DescribeACLs on D).
	own := agent.Security{TLS: clusterTLS, SASL: plain.Auth{User: "agent", Pass: securedPasswords["agent"]}.AsMechanism()}
	const node = "authchk-agent"
	a := runAgent(t, ctx, node, agent.Source(src.Addrs()...), agent.Destination(dst.Addrs()...),
		agent.SourceSecurity(own), agent.DestinationSecurity(own),
		agent.ListenSecurity(agent.ClientSecurity{SASL: agent.SASLForward}),
		agent.ControlPlane(conn, xds.NodeMeta(node, "e2e", "authchk")))
	as := func(user string) *kgo.Client {
		return newClient(t, a.Addr(), plainAs(user), kgo.DisableIdempotentWrite(), kgo.RecordRetries(2),
			kgo.RecordDeliveryTimeout(20*time.Second))
	}
	app, other := as("app"), as("other")
	produceTo := func(cl *kgo.Client, tp, key string) error {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return cl.ProduceSync(pctx, &kgo.Record{Topic: tp, Key: []byte(key), Value: []byte("v")}).FirstErr()
	}
	addTopic := func(name string, shadow controlplane.Shadow) {
		t.Helper()
		if _, err := cp.AddTopic(ctx, controlplane.TopicSpec{Name: name, State: migration.Proxy, Shadow: shadow}, "e2e"); err != nil {
			t.Fatal(err)
		}
		wait.For(t, time.Minute, "the agent to hold a lease at the current config version", func() string {
			v := cp.Version()
			for _, ag := range cp.Agents() {
				if ag.Node == node && ag.LeaseValid && ag.AckedVersion >= v {
					return ""
				}
			}
			return fmt.Sprintf("agents %+v, version %d", cp.Agents(), v)
		})
	}

	t.Run("reported", func(t *testing.T) {
		addTopic(topic, controlplane.Shadow{AuthCheck: true})
		// The first checked produce has the agent read D's ACLs; from then
		// on other's are found missing, and a heartbeat carries it.
		n := 0
		wait.For(t, time.Minute, "the control plane to hold other's finding on "+topic, func() string {
			n++
			for _, c := range []struct {
				name string
				cl   *kgo.Client
			}{{"app", app}, {"other", other}} {
				if err := produceTo(c.cl, topic, fmt.Sprintf("%s-%d", c.name, n)); err != nil {
					t.Fatalf("%s to %s in PROXY with the check on (not enforced): %v", c.name, topic, err)
				}
			}
			if len(cp.Shadow().OpenFindings(topic, migration.FindingAuthMissing, 0)) == 0 {
				return "none yet"
			}
			return ""
		})
		fs := cp.Shadow().OpenFindings(topic, migration.FindingAuthMissing, time.Minute)
		if len(fs) != 1 || fs[0].Principal != "User:other" || fs[0].Agents[node].IsZero() ||
			!strings.Contains(fs[0].Detail, "--allow-principal User:other --operation Write --topic "+topic) {
			t.Fatalf("open findings %+v, want one: User:other's, from %s, naming the ACL to add", fs, node)
		}
		evs, err := cp.Events(ctx, topic, 0)
		if err != nil {
			t.Fatal(err)
		}
		var found []string
		for _, e := range evs {
			if e.Kind == controlplane.EventFinding {
				found = append(found, e.Reason)
			}
		}
		if len(found) != 1 || !strings.Contains(found[0], "User:other") || strings.Contains(found[0], "User:app") {
			t.Fatalf("finding events %q, want one, other's", found)
		}
		st, err := cp.Status(topic)
		if err != nil || len(st.Findings) != 1 {
			t.Fatalf("status findings %+v (%v), want other's", st.Findings, err)
		}
		t.Logf("event: %s", found[0])
	})

	t.Run("refused", func(t *testing.T) {
		addTopic(enforced, controlplane.Shadow{AuthCheck: true, AuthEnforce: true})
		if err := produceTo(app, enforced, "app-enforced"); err != nil {
			t.Fatalf("app to %s, enforced: %v", enforced, err)
		}
		err := produceTo(other, enforced, "other-enforced")
		if !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("other to %s, enforced: %v, want TOPIC_AUTHORIZATION_FAILED (S would have taken it)", enforced, err)
		}
		recs, err := clients.ReadTopic(ctx, src.Bootstrap(), enforced, admin...)
		if err != nil {
			t.Fatal(err)
		}
		keys := map[string]bool{}
		for _, r := range recs {
			keys[string(r.Key)] = true
		}
		if !keys["app-enforced"] || keys["other-enforced"] {
			t.Fatalf("S.%s holds %v: want app's record and not other's", enforced, keys)
		}
		wait.For(t, time.Minute, "the control plane to hold other's finding on "+enforced, func() string {
			fs := cp.Shadow().OpenFindings(enforced, migration.FindingAuthMissing, 0)
			if len(fs) != 1 || fs[0].Principal != "User:other" {
				return fmt.Sprintf("findings %+v", fs)
			}
			return ""
		})
	})
}
