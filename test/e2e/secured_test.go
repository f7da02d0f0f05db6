package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"go.yaml.in/yaml/v3"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/filter/sasl"
	"github.com/baton-kafka/baton/internal/oauthtest"
	"github.com/baton-kafka/baton/internal/testcert"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/test/clients"
	"github.com/baton-kafka/baton/test/kafka"
)

// TestSecuredEveryClient runs the client matrix through agents whose
// listener is secured, in front of an Apache Kafka source whose only client
// listener is SASL_SSL (PLAIN and OAUTHBEARER, StandardAuthorizer ACLs) and a
// kfake destination with TLS, SASL PLAIN and ACLs. Users, the same on both
// clusters: admin (a superuser, the test's own clients), app (may write the
// topics sec-fwd-*), other (may see sec-fwd-* but not write them), agent
// (the agents' own identity: may write sec-fwd-* and sec-local-*).
//
//   - forward (TLS listener, --client-sasl forward): every client,
//     idempotent and not, produces as app with SASL PLAIN; every ack is
//     checked against what the source stores (clients.Verify) and every
//     stored batch against what reached the agent (checkCRCs). Every client
//     as other (no idempotence) is refused every record with
//     TOPIC_AUTHORIZATION_FAILED, and nothing is stored: the agent, which
//     itself may write the topic, reaches the source as the client. Every
//     client that can give an OAUTHBEARER token produces as app with an
//     unsecured JWT (sub app) that the source checks; kcat says it cannot.
//     A topic routed COMPLETE takes app's records on the destination and
//     refuses other's there.
//   - local (mTLS listener, --client-sasl local): every client presents a
//     client certificate and authenticates with SCRAM-SHA-512 against the
//     agent's users file; its records reach sec-local-* topics that only the
//     agent's own identity may write.
//
// The destination is kfake: what the destination case must show is whose
// credentials the agent presents there, which kfake's SASL and ACLs decide
// as Kafka's do; the agent's upstream TLS and SASL code is the same for
// both clusters, and Apache Kafka checks it on the source.
func TestSecuredEveryClient(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Apache Kafka")
	}
	t.Parallel()
	s := startSecured(t)
	appPlain := &clients.SASL{Mechanism: clients.MechPlain, User: "app", Password: securedPasswords["app"]}
	otherPlain := &clients.SASL{Mechanism: clients.MechPlain, User: "other", Password: securedPasswords["other"]}
	appToken := &clients.SASL{Mechanism: clients.MechOAuthBearer,
		Token: oauthtest.UnsecuredJWT(map[string]any{"sub": "app", "exp": time.Now().Add(time.Hour).Unix()})}
	appSCRAM := &clients.SASL{Mechanism: clients.MechScramSHA512, User: "app", Password: localSCRAMPassword}
	serverTLS := &clients.TLS{CAFile: s.caFile}
	mTLS := &clients.TLS{CAFile: s.caFile, CertFile: s.certFile, KeyFile: s.keyFile}

	type tc struct {
		name string
		run  func(t *testing.T)
	}
	var cases []tc
	for _, c := range clients.Matrix() {
		for _, idem := range []bool{true, false} {
			cases = append(cases, tc{fmt.Sprintf("forward-plain/%s/idempotent=%v", c.Name(), idem), func(t *testing.T) {
				securedCase(t, s.fwd, c, idem, clients.Security{TLS: serverTLS, SASL: appPlain})
			}})
		}
		cases = append(cases, tc{"forward-plain-denied/" + c.Name(), func(t *testing.T) {
			deniedCase(t, s.fwd, c, clients.Security{TLS: serverTLS, SASL: otherPlain}, s.fwd.source, s.fwd.sourceOpts)
		}})
		cases = append(cases, tc{"forward-oauthbearer/" + c.Name(), func(t *testing.T) {
			securedCase(t, s.fwd, c, true, clients.Security{TLS: serverTLS, SASL: appToken})
		}})
		cases = append(cases, tc{"local-scram-sha-512-mtls/" + c.Name(), func(t *testing.T) {
			securedCase(t, s.local, c, true, clients.Security{TLS: mTLS, SASL: appSCRAM})
		}})
	}
	for _, c := range []clients.Client{clients.Matrix()[0], clients.Matrix()[2]} { // franz, kcat
		cases = append(cases, tc{"forward-plain-destination/" + c.Name(), func(t *testing.T) {
			destinationCase(t, s, c, clients.Security{TLS: serverTLS, SASL: appPlain}, clients.Security{TLS: serverTLS, SASL: otherPlain})
		}})
	}
	cases = append(cases, tc{"forward-one-principal-two-mechanisms", func(t *testing.T) {
		twoMechanismsCase(t, s, clients.Security{TLS: serverTLS, SASL: appToken}, clients.Security{TLS: serverTLS, SASL: appPlain})
	}})
	// As TestCutoverEveryClient: the cases run concurrently, as many at
	// once as there are runSlots, rather than bounded by -parallel; a run
	// mostly waits on the network. A case's deadline (caseTimeout) starts
	// when it starts, not while it queues.
	var wg sync.WaitGroup
	started := make(chan struct{}, cap(runSlots))
	for _, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started <- struct{}{}
			defer func() { <-started }()
			t.Run(c.name, c.run)
		}()
	}
	wg.Wait()
}

const (
	securedRecords    = 200
	securedPartitions = 3 // one led by each broker, mostly
	// securedPrefix names the topics app may write; localPrefix those
	// only the agents' own identity may write.
	securedPrefix      = "sec-fwd-"
	localPrefix        = "sec-local-"
	localSCRAMPassword = "app-scram-pw"
)

// secured is TestSecuredEveryClient's clusters and agents.
type secured struct {
	ca                        testcert.CA
	caFile, certFile, keyFile string      // the CA; app's client certificate and key
	clusterTLS                *tls.Config // trusts the CA
	source                    *kafka.Cluster
	dst                       *kfake.Cluster
	dstOpts                   []kgo.Opt      // admin on the destination
	fwd, local                *env           // an agent each, in front of the source
	own                       agent.Security // the agents' identity upstream
	listenTLS                 *tls.Config    // the agents' listener certificate
}

// startSecured starts the clusters, grants the ACLs, waits until every
// broker enforces them, and starts both agents. Everything stops with t.
func startSecured(t *testing.T) *secured {
	t.Helper()
	dir := t.TempDir()
	ca := testcert.New(t)
	caFile, certFile, keyFile := ca.WriteFiles(t, dir, "app", ca.Client(t, "app"))
	s := &secured{ca: ca, caFile: caFile, certFile: certFile, keyFile: keyFile,
		clusterTLS: &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}}

	admin := securedAdmin(s.clusterTLS)
	s.source = kafka.StartT(t, append(saslSSLBrokers(t, ca, s.clusterTLS, "OAUTHBEARER"), kafka.Brokers(sourceBrokers))...)

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	grantSourceACLs(t, ctx, s.source.Bootstrap(), s.clusterTLS, admin)

	dst, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(&tls.Config{Certificates: []tls.Certificate{ca.Server}, MinVersion: tls.VersionTLS12}),
		kfake.EnableSASL(), kfake.EnableACLs(), kfake.Superuser("PLAIN", "admin", securedPasswords["admin"]),
		kfake.User("PLAIN", "app", securedPasswords["app"], kfakeAllow(securedPrefix, kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe)...),
		kfake.User("PLAIN", "other", securedPasswords["other"], kfakeAllow(securedPrefix, kmsg.ACLOperationDescribe)...),
		kfake.User("PLAIN", "agent", securedPasswords["agent"], append(kfakeAllow(securedPrefix, kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe),
			kfakeAllow(localPrefix, kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe)...)...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dst.Close)
	s.dst = dst
	s.dstOpts = securedAdmin(s.clusterTLS)

	own := agent.Security{TLS: s.clusterTLS, SASL: plain.Auth{User: "agent", Pass: securedPasswords["agent"]}.AsMechanism()}
	listenTLS := &tls.Config{Certificates: []tls.Certificate{ca.Server}, MinVersion: tls.VersionTLS12}
	s.own, s.listenTLS = own, listenTLS
	// forward: the agent has an identity of its own that may write every
	// topic of the test, so that an agent that reached the source as
	// itself instead of as its client would let other write.
	s.fwd = startSecuredAgent(t, ctx, s, "secured-forward", securedPrefix, own,
		agent.ClientSecurity{TLS: listenTLS, SASL: agent.SASLForward})
	mtls := listenTLS.Clone()
	mtls.ClientCAs, mtls.ClientAuth = ca.Pool, tls.RequireAndVerifyClientCert
	s.local = startSecuredAgent(t, ctx, s, "secured-local", localPrefix, own,
		agent.ClientSecurity{TLS: mtls, SASL: agent.SASLLocal, SCRAM: scramUsers(t, dir)})
	return s
}

// kfakeAllow allows the operations on the topics with prefix, and
// idempotent writes.
func kfakeAllow(prefix string, ops ...kmsg.ACLOperation) []kfake.ACL {
	acls := []kfake.ACL{{Resource: kmsg.ACLResourceTypeCluster, Name: "kafka-cluster", Pattern: kmsg.ACLResourcePatternTypeLiteral,
		Operation: kmsg.ACLOperationIdempotentWrite, Allow: true}}
	for _, op := range ops {
		acls = append(acls, kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: prefix, Pattern: kmsg.ACLResourcePatternTypePrefixed,
			Operation: op, Allow: true})
	}
	return acls
}

// grantSourceACLs grants the ACLs on the source and waits until every
// broker enforces them and hands out producer ids.
func grantSourceACLs(t *testing.T, ctx context.Context, bootstrap string, clusterTLS *tls.Config, admin []kgo.Opt) {
	t.Helper()
	cl := newClient(t, bootstrap, admin...)
	grant := func(prefix, user string, ops ...kadm.ACLOperation) *kadm.ACLBuilder {
		return kadm.NewACLs().Topics(prefix).ResourcePatternType(kadm.ACLPatternPrefixed).Allow("User:" + user).AllowHosts().Operations(ops...)
	}
	createACLs(t, ctx, kadm.NewClient(cl),
		grant(securedPrefix, "app", kadm.OpWrite, kadm.OpDescribe),
		grant(securedPrefix, "other", kadm.OpDescribe),
		grant(securedPrefix, "agent", kadm.OpWrite, kadm.OpDescribe),
		grant(localPrefix, "agent", kadm.OpWrite, kadm.OpDescribe))
	waitProducerIDs(t, ctx, cl)

	// A probe topic per prefix with a partition on every broker: a user's
	// write to each partition succeeds once every leader's authorizer has
	// the grant.
	for _, probe := range []struct{ topic, user string }{
		{securedPrefix + "probe", "app"}, {securedPrefix + "probe", "agent"}, {localPrefix + "probe", "agent"},
	} {
		if err := clients.CreateTopic(ctx, bootstrap, probe.topic, sourceBrokers, sourceBrokers, admin...); err != nil && !strings.Contains(err.Error(), "TOPIC_ALREADY_EXISTS") {
			t.Fatal(err)
		}
		waitWritable(t, ctx, bootstrap, clusterTLS, plainAs(probe.user), probe.user, probe.topic, sourceBrokers)
	}
}

// startSecuredAgent starts an agent in front of s's source and
// destination with listener security cs and its own identity own upstream,
// waits until it serves, and returns it as an env whose topics start with
// prefix. It stops with t.
func startSecuredAgent(t *testing.T, ctx context.Context, s *secured, name, prefix string, own agent.Security, cs agent.ClientSecurity) *env {
	t.Helper()
	e := &env{name: name, source: s.source.Bootstrap(), kafka: s.source, routes: agent.NewRouteTable(nil),
		sourceOpts: securedAdmin(s.clusterTLS), topicPrefix: prefix}
	a := runAgent(t, ctx, name,
		agent.Source(s.source.Addrs()...),
		agent.Destination(s.dst.ListenAddrs()...),
		agent.SourceSecurity(own),
		agent.DestinationSecurity(own),
		agent.ListenSecurity(cs),
		agent.Routes(e.routes),
		agent.Filters(ingress),
	)
	e.agent = a.Addr()
	return e
}

// scramUsers writes the local agent's users file, as `baton agent
// scram-credential` does (app, both SCRAM mechanisms), and loads it.
func scramUsers(t *testing.T, dir string) *sasl.SCRAMCredentials {
	t.Helper()
	var list []sasl.SCRAMCredential
	for _, mech := range []string{sasl.ScramSHA256, sasl.ScramSHA512} {
		c, err := sasl.NewSCRAMCredential(mech, "app", localSCRAMPassword, 4096)
		if err != nil {
			t.Fatal(err)
		}
		list = append(list, c)
	}
	b, err := yaml.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "scram-users.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	creds, err := sasl.LoadSCRAMCredentials(path)
	if err != nil {
		t.Fatal(err)
	}
	return creds
}

// securedCase: c produces securedRecords records through e's agent with
// sec to a fresh topic of e's prefix; every ack must be where the source
// stores it, in batches as they reached the agent. A client that cannot do
// sec must say so (clients.ErrUnsupported), and only kcat with OAUTHBEARER
// may.
func securedCase(t *testing.T, e *env, c clients.Client, idempotent bool, sec clients.Security) {
	ctx, cancel := context.WithTimeout(t.Context(), caseTimeout)
	defer cancel()
	what := fmt.Sprintf("%s-%s-idem%v", c.Name(), strings.ToLower(sec.SASL.Mechanism), idempotent)
	topic := freshTopic(t, ctx, e, what, securedPartitions)
	cfg := clients.ProduceConfig{
		Bootstrap:  e.agent,
		Topic:      topic,
		Records:    securedRecords,
		Idempotent: idempotent,
		Headers:    c.Headers,
		KeyPrefix:  what,
		Security:   sec,
	}
	acks, err := produceErr(t, ctx, c, cfg)
	if err != nil {
		// Only kcat may say it cannot, and only with OAUTHBEARER (it
		// cannot send a token it is given) or SCRAM (a librdkafka before
		// 2.6.1 gets the nonce of SCRAM's last message wrong): see
		// clients.Kcat.
		m := sec.SASL.Mechanism
		if c.Name() != "kcat" || m != clients.MechOAuthBearer && m != clients.MechScramSHA256 && m != clients.MechScramSHA512 {
			t.Fatalf("%s with %s: %v", c.Name(), m, err)
		}
		t.Logf("%s with %s: %v", c.Name(), m, err)
		return
	}
	if err := clients.Verify(ctx, e.source, topic, acks, cfg, e.sourceOpts...); err != nil {
		t.Fatalf("%s through the %s agent (%s, %s): %v", c.Name(), e.name, sec.Protocol(), sec.SASL.Mechanism, err)
	}
	checkCRCs(t, ctx, e, topic)
}

// deniedCase: c produces through e's agent with sec, as a user the
// cluster at verify lets see but not write the topic, without idempotence
// (an idempotent producer would first be refused a producer id). Every
// record must fail with TOPIC_AUTHORIZATION_FAILED, and none be stored
// (read back from verify).
func deniedCase(t *testing.T, e *env, c clients.Client, sec clients.Security, verify string, verifyOpts []kgo.Opt) {
	ctx, cancel := context.WithTimeout(t.Context(), caseTimeout)
	defer cancel()
	what := c.Name() + "-denied"
	topic := freshTopic(t, ctx, e, what, securedPartitions)
	deniedRun(t, ctx, e, c, sec, topic, what, verify, verifyOpts)
}

// destinationCase: a topic routed COMPLETE on the forward agent goes to
// the destination as the client: app's records are acked and stored there,
// other's refused there.
func destinationCase(t *testing.T, s *secured, c clients.Client, app, other clients.Security) {
	ctx, cancel := context.WithTimeout(t.Context(), caseTimeout)
	defer cancel()
	e := s.fwd
	what := c.Name() + "-complete"
	topic := freshTopic(t, ctx, e, what, securedPartitions)
	dst := strings.Join(s.dst.ListenAddrs(), ",")
	if err := clients.CreateTopic(ctx, dst, topic, securedPartitions, 1, s.dstOpts...); err != nil {
		t.Fatalf("on the destination: %v", err)
	}
	e.setRoute(topic, migration.Complete)
	cfg := clients.ProduceConfig{Bootstrap: e.agent, Topic: topic, Records: securedRecords, Idempotent: true,
		Headers: c.Headers, KeyPrefix: what, Security: app}
	acks := produce(t, ctx, c, cfg)
	if err := clients.Verify(ctx, dst, topic, acks, cfg, s.dstOpts...); err != nil {
		t.Fatalf("%s through the forward agent to the destination: %v", c.Name(), err)
	}
	src, err := clients.ReadTopic(ctx, e.source, topic, e.sourceOpts...)
	if err != nil {
		t.Fatal(err)
	}
	if len(src) != 0 {
		t.Fatalf("%d records of a COMPLETE topic on the source", len(src))
	}
	deniedRun(t, ctx, e, c, other, topic, what+"-other", dst, s.dstOpts)
}

// twoMechanismsCase: one principal, User:app, authenticates to a fresh
// forward agent with OAUTHBEARER (a JWT with sub app), then with PLAIN
// (user app). Both are the principal's valid credentials, and the second
// client must produce: the principal's upstream connections to brokers
// not dialed yet (the first client only authenticated, which reached one
// broker) must authenticate with credentials the source takes.
func twoMechanismsCase(t *testing.T, s *secured, first, second clients.Security) {
	ctx, cancel := context.WithTimeout(t.Context(), caseTimeout)
	defer cancel()
	e := startSecuredAgent(t, ctx, s, "secured-forward-two-mechanisms", securedPrefix, s.own,
		agent.ClientSecurity{TLS: s.listenTLS, SASL: agent.SASLForward})
	topic := freshTopic(t, ctx, e, "two-mechanisms", securedPartitions)

	opts, err := first.KgoOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, e.agent, opts...)
	if _, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl); err != nil {
		t.Fatalf("authenticating with %s: %v", first.SASL.Mechanism, err)
	}

	// franz-go gives up on a record after a minute (a liveness bound: a
	// record is acked in well under a second here), so that a principal
	// the source no longer lets in fails the case rather than its timeout.
	c := clients.Client{Producer: clients.Franz{Opts: []kgo.Opt{kgo.RecordDeliveryTimeout(time.Minute)}}, Headers: true}
	cfg := clients.ProduceConfig{Bootstrap: e.agent, Topic: topic, Records: securedRecords, Idempotent: true,
		Headers: true, KeyPrefix: "two-mechanisms", Security: second}
	acks := produce(t, ctx, c, cfg)
	if err := clients.Verify(ctx, e.source, topic, acks, cfg, e.sourceOpts...); err != nil {
		t.Fatalf("%s after %s, as the same principal: %v", second.SASL.Mechanism, first.SASL.Mechanism, err)
	}
}
