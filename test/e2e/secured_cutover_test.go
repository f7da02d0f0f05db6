package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/baton-kafka/baton/agent"
	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/acl"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/internal/testcert"
	"github.com/baton-kafka/baton/internal/testlog"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
	"github.com/baton-kafka/baton/test/clients"
	"github.com/baton-kafka/baton/test/kafka"
	"github.com/baton-kafka/baton/xds"
)

// TestSecuredCutoverRealKafka cuts a topic over between two secured Apache
// Kafka clusters, each producer keeping its own principal on both sides.
//
// S and D (one broker each) have only SASL_SSL client listeners (PEM
// certificates inline), PLAIN and SCRAM-SHA-512, and StandardAuthorizer.
// Users: admin (a superuser, the test's own setup and reads); repl, the
// replicator's principal, with SCRAM-SHA-512 only, may read T on S and
// create and configure T on D, and alter ACLs there, but is granted no
// WRITE on T on D: it writes D.T only through the guard's ALLOW; app may
// write T on both clusters (PLAIN); other may write T on S only; agent,
// the agent's own identity, may write T on both (so that an agent that
// reached a cluster as itself instead of as its client would be let in).
//
// The control plane runs in process as `baton controlplane` wires it
// (embedded etcd, the replicator with --source-sasl-* and
// --destination-sasl-* as repl over SCRAM-SHA-512, the write guard found by
// DetectGuard with the replicator's principal, recorded in etcd); one
// agent serves TLS with --client-sasl forward and reaches both clusters
// over SASL_SSL. franz-go, the Java producer and kcat (librdkafka) produce
// idempotently through it as app, 450 records each at 50 a second, while
// the control plane moves T PROXY -> MIGRATING -> COMPLETE. The order is
// set by conditions:
//
//   - Migrate once every client has 20 records acked (on S).
//   - Each client sends its last 300 records only once every agent has
//     stopped forwarding T (PauseAt/Resume): the cutover is held between
//     its drain and its read of S's end offsets (a wrapper around the
//     replication's SourceEndOffsets) until every client has had a
//     produce request reach the agent since, held there; then it goes on
//     to COMPLETE, and the clients go on producing, to D. That each one
//     still sent requests after COMPLETE is checked, not assumed.
//
// It checks: every acked record is on D exactly as acked
// (clients.Verify), those acked from S also on S at the same offset and
// records sent after COMPLETE only on D, partition order across the
// clusters, one destination producer id per client; the cutover's events in
// order and nothing rolled back; S not written after COMPLETE. On D while
// PROXY, DescribeACLs shows exactly the guard's ACLs (ALLOW WRITE repl,
// DENY WRITE app and agent), and a direct write as app is refused by the
// guard's DENY (D's authorizer log names the rule); at COMPLETE they are
// gone. After COMPLETE, franz-go and kcat as other through the agent are
// refused every record with TOPIC_AUTHORIZATION_FAILED, and D's authorizer
// log names User:other. A wrong password for app at the agent, while app's
// producers run, is the client's SASL_AUTHENTICATION_FAILED: S logs the
// failed authentication the agent tried with it, D logs none, and the
// client's record is on neither cluster.
func TestSecuredCutoverRealKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Apache Kafka")
	}
	t.Parallel()
	dir := t.TempDir()
	ca := testcert.New(t)
	caFile, _, _ := ca.WriteFiles(t, dir, "server", ca.Server)
	clusterTLS := &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}
	brokers := saslSSLBrokers(t, ca, clusterTLS, "SCRAM-SHA-512")
	srcStarted, dstStarted := startKafkaAsync(t, 1, brokers...), startKafkaAsync(t, 1, brokers...)
	src, dst := srcStarted(t), dstStarted(t)

	ctx, cancel := context.WithTimeout(t.Context(), caseTimeout)
	defer cancel()
	topic := fmt.Sprintf("%scutover-%d-%d", seccutPrefix, os.Getpid(), topicSeq.Add(1))
	admin := securedAdmin(clusterTLS)
	srcAdm := kadm.NewClient(newClient(t, src.Bootstrap(), admin...))
	dstAdm := kadm.NewClient(newClient(t, dst.Bootstrap(), admin...))
	setUpSecuredCutover(t, ctx, src, dst, srcAdm, dstAdm, clusterTLS)
	if err := clients.CreateTopic(ctx, src.Bootstrap(), topic, seccutPartitions, 1, admin...); err != nil {
		t.Fatalf("on the source: %v", err)
	}

	// The control plane, as `baton controlplane` builds it.
	var cpLog testlog.Buffer
	log := slog.New(slog.NewTextHandler(&cpLog, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("control plane and replicator log, last lines:\n%s", lastLines(cpLog.String(), 60))
		}
	})
	repl := []kgo.Opt{kgo.DialTLSConfig(clusterTLS.Clone()), kgo.SASL(scram.Auth{User: replUser, Pass: replPassword}.AsSha512Mechanism())}
	store, err := controlplane.OpenEmbedded(ctx, filepath.Join(dir, "etcd"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := store.Close(); err != nil {
			t.Errorf("closing the control plane's store: %v", err)
		}
	})
	r, err := replicator.New(replicator.Source(src.Addrs()...), replicator.Destination(dst.Addrs()...), replicator.Logger(log),
		replicator.SourceClientOpts(repl...), replicator.DestinationClientOpts(repl...))
	if err != nil {
		t.Fatal(err)
	}
	guard, none, err := acl.DetectGuard(ctx, kadm.NewClient(newClient(t, dst.Bootstrap(), repl...)), "User:"+replUser)
	if err != nil {
		t.Fatal(err)
	}
	if guard == nil {
		t.Fatalf("DetectGuard on a destination with StandardAuthorizer found no guard (%+v), want an acl.Guard", none)
	}
	guard.Owned = store
	hold := &holdAfterDrain{
		Replication: &replication.ReplicatorAdapter{R: r, Source: kadm.NewClient(newClient(t, src.Bootstrap(), repl...))},
		reached:     make(chan struct{}), release: make(chan struct{}),
	}
	cp, err := controlplane.New(ctx, controlplane.WithStore(store), controlplane.Logger(log), controlplane.WithGuard(guard),
		controlplane.WithReplication(hold),
		// Room on a loaded machine: the gate wants lag <= timeout/4.
		controlplane.CutoverTimeout(30*time.Second),
		controlplane.Clusters(&batonv1.Cluster{Name: "source", Bootstrap: src.Addrs()},
			&batonv1.Cluster{Name: "destination", Bootstrap: dst.Addrs()}))
	if err != nil {
		t.Fatal(err)
	}
	conn := serveInProcess(t, cp, r)

	// The agent: TLS listener, --client-sasl forward, SASL_SSL upstream
	// with an identity of its own.
	own := agent.Security{TLS: clusterTLS, SASL: plain.Auth{User: "agent", Pass: securedPasswords["agent"]}.AsMechanism()}
	rec := newCrossRecorder(topic)
	reg := prometheus.NewRegistry()
	const node = "seccut-agent"
	a := runAgent(t, ctx, node,
		agent.Source(src.Addrs()...), agent.Destination(dst.Addrs()...),
		agent.SourceSecurity(own), agent.DestinationSecurity(own),
		agent.ListenSecurity(agent.ClientSecurity{
			TLS:  &tls.Config{Certificates: []tls.Certificate{ca.Server}, MinVersion: tls.VersionTLS12},
			SASL: agent.SASLForward,
		}),
		agent.ControlPlane(conn, xds.NodeMeta(node, "e2e", "seccut")),
		agent.Registry(reg), agent.Filters(rec))
	e := &env{name: node, source: src.Bootstrap(), agent: a.Addr(), kafka: src, sourceOpts: admin, topicPrefix: seccutPrefix}

	// T in PROXY: routed to S by the agent, copied to D, guarded on D.
	events, err := cp.Follow(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	evs := collectEvents(events)
	if _, err := cp.AddTopic(ctx, controlplane.TopicSpec{Name: topic, State: migration.Proxy}, "e2e"); err != nil {
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
	wait.For(t, 2*time.Minute, "the replicator to copy "+topic+" (its lag known)", func() string {
		st, err := cp.Status(topic)
		switch {
		case err != nil:
			return err.Error()
		case st.LagError != "":
			return st.LagError
		}
		return ""
	})

	// The guard while PROXY: exactly its ACLs on literal T, and a direct
	// write as app refused by its DENY. DescribeACLs is answered from the
	// broker's own authorizer: once it lists the DENY, the broker enforces
	// it.
	wantGuard := []string{"DENY WRITE User:agent", "DENY WRITE User:app", "ALLOW WRITE User:repl"}
	slices.Sort(wantGuard)
	wait.For(t, 30*time.Second, "DescribeACLs on D to list the guard's ACLs on "+topic, func() string {
		got, err := literalTopicACLs(ctx, dstAdm, topic)
		if err != nil {
			return err.Error()
		}
		if !slices.Equal(got, wantGuard) {
			return fmt.Sprintf("ACLs on literal %s: %q, want %q", topic, got, wantGuard)
		}
		return ""
	})
	direct := newClient(t, dst.Bootstrap(), kgo.DialTLSConfig(clusterTLS.Clone()), plainAs("app"), kgo.DisableIdempotentWrite(),
		kgo.RecordRetries(1), kgo.RecordDeliveryTimeout(30*time.Second))
	err = direct.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(seccutPrefix + "direct"), Value: []byte("bypassing the agent")}).FirstErr()
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("a direct write to D.%s as app while PROXY: %v, want TOPIC_AUTHORIZATION_FAILED from the guard", topic, err)
	}
	wait.For(t, 30*time.Second, "D's authorizer log to name the guard's DENY for app", func() string {
		if l := brokerLog(t, dst, "Principal = User:app is Denied operation = WRITE", topic, "permissionType=DENY"); len(l) == 0 {
			return "no such line"
		}
		return ""
	})
	t.Logf("a direct write as app to D.%s while PROXY: %v", topic, err)

	// The producers.
	appSec := clients.Security{TLS: &clients.TLS{CAFile: caFile},
		SASL: &clients.SASL{Mechanism: clients.MechPlain, User: "app", Password: securedPasswords["app"]}}
	migrating := make(chan struct{})
	resume := sync.OnceFunc(func() { close(migrating) })
	defer resume()
	var runs []*seccutRun
	for _, name := range []string{"franz", "java", "kcat"} {
		c := matrixClient(t, name)
		runs = append(runs, &seccutRun{c: c, clientID: "baton-" + name, done: make(chan error, 1), cfg: clients.ProduceConfig{
			Bootstrap: a.Addr(), Topic: topic, Records: seccutRecords, Rate: seccutRate, Idempotent: true,
			Headers: c.Headers, KeyPrefix: seccutPrefix + name, PauseAt: seccutPauseAt, Resume: migrating, Security: appSec,
		}})
	}
	// The runs count against the package's producer runs at once, and run
	// together.
	slots := min(len(runs), cap(runSlots))
	for range slots {
		select {
		case runSlots <- struct{}{}:
		case <-ctx.Done():
			t.Fatalf("waiting for run slots: %v", ctx.Err())
		}
	}
	released := false
	release := func() {
		if !released {
			released = true
			for range slots {
				<-runSlots
			}
		}
	}
	defer release()
	for _, run := range runs {
		go func() {
			run.done <- run.c.Produce(ctx, run.cfg, func(a clients.Ack) {
				run.mu.Lock()
				run.acks = append(run.acks, a)
				run.mu.Unlock()
				run.acked.Add(1)
			})
		}()
	}
	// waitRuns waits for cond, failing if a run ends first.
	waitRuns := func(what string, limit time.Duration, cond func() string) {
		t.Helper()
		wait.For(t, limit, what, func() string {
			for _, run := range runs {
				select {
				case err := <-run.done:
					run.done <- err
					t.Fatalf("%s finished (err %v, %d acks) before %s", run.c.Name(), err, run.acked.Load(), what)
				default:
				}
			}
			return cond()
		})
	}
	waitRuns(fmt.Sprintf("every client to have %d records acked", seccutMigrateAfter), 2*time.Minute, func() string {
		var behind []string
		for _, run := range runs {
			if n := run.acked.Load(); n < seccutMigrateAfter {
				behind = append(behind, fmt.Sprintf("%s %d", run.c.Name(), n))
			}
		}
		return strings.Join(behind, ", ")
	})

	// A wrong password for app, while app's producers run through the
	// agent (so the agent already has app's upstream connections).
	wrongPassword(t, ctx, a.Addr(), topic, clusterTLS, src, dst)

	// The cutover.
	if _, err := cp.Migrate(ctx, topic, "e2e"); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	select {
	case <-hold.reached:
	case <-evs.seen(controlplane.EventRolledBack):
		t.Fatalf("the cutover rolled back before reading the source's end offsets: %s", evs.String())
	case <-ctx.Done():
		t.Fatalf("the cutover never got past its drain: %v; events %s", ctx.Err(), evs.String())
	}
	// Every agent has stopped forwarding T: what reaches the agent from
	// now on is held until COMPLETE.
	rec.phase(phaseHeld)
	resume()
	waitRuns("every client to have a produce request held in MIGRATING", time.Minute, func() string {
		var not []string
		for _, run := range runs {
			if rec.requests(run.clientID, phaseHeld) == 0 {
				not = append(not, run.c.Name())
			}
		}
		return strings.Join(not, ", ")
	})
	close(hold.release)
	select {
	case <-evs.seen(controlplane.EventCompleted):
	case <-evs.seen(controlplane.EventRolledBack):
		t.Fatalf("the cutover rolled back: %s", evs.String())
	case <-ctx.Done():
		t.Fatalf("no COMPLETE: %v; events %s", ctx.Err(), evs.String())
	}
	rec.phase(phaseComplete)
	srcEnds := endOffsets(t, ctx, srcAdm, topic)
	wait.For(t, 30*time.Second, "the guard's ACLs on D to be lifted", func() string {
		got, err := literalTopicACLs(ctx, dstAdm, topic)
		if err != nil {
			return err.Error()
		}
		if len(got) > 0 {
			return fmt.Sprintf("ACLs on literal %s: %q", topic, got)
		}
		return ""
	})

	for _, run := range runs {
		select {
		case err := <-run.done:
			if err != nil {
				t.Fatalf("%s through the agent: Produce: %v", run.c.Name(), err)
			}
		case <-ctx.Done():
			t.Fatalf("%s never finished: %v (%d acks)", run.c.Name(), ctx.Err(), run.acked.Load())
		}
	}
	release()
	// Every client went on producing after COMPLETE, as the same producer
	// (one destination producer id each, checked below).
	for _, run := range runs {
		held, after := rec.requests(run.clientID, phaseHeld), rec.requests(run.clientID, phaseComplete)
		t.Logf("%s: %d produce requests reached the agent between the drain and COMPLETE (held), %d after COMPLETE", run.c.Name(), held, after)
		if after == 0 {
			t.Errorf("%s sent nothing after COMPLETE: its last %d records were all sent while T was MIGRATING", run.c.Name(), seccutRecords-seccutPauseAt)
		}
	}

	// other, after COMPLETE: refused by D, as other.
	otherSec := clients.Security{TLS: &clients.TLS{CAFile: caFile},
		SASL: &clients.SASL{Mechanism: clients.MechPlain, User: "other", Password: securedPasswords["other"]}}
	for _, name := range []string{"franz", "kcat"} {
		deniedRun(t, ctx, e, matrixClient(t, name), otherSec, topic, seccutPrefix+"other-"+name, dst.Bootstrap(), admin)
	}
	wait.For(t, 30*time.Second, "D's authorizer log to name User:other", func() string {
		if l := brokerLog(t, dst, "Principal = User:other is Denied operation = WRITE", topic); len(l) == 0 {
			return "no such line"
		}
		return ""
	})

	// What the clusters hold.
	srcRecs, err := clients.ReadTopic(ctx, src.Bootstrap(), topic, admin...)
	if err != nil {
		t.Fatal(err)
	}
	dstRecs, err := clients.ReadTopic(ctx, dst.Bootstrap(), topic, admin...)
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range runs {
		run.mu.Lock()
		acks := slices.Clone(run.acks)
		run.mu.Unlock()
		if err := clients.Verify(ctx, dst.Bootstrap(), topic, acks, run.cfg, admin...); err != nil {
			t.Errorf("%s on the destination: %v", run.c.Name(), err)
		}
		onS, onD, err := checkAcrossClusters(acks, run.cfg, srcRecs, dstRecs)
		if err != nil {
			t.Errorf("%s across the cutover: %v", run.c.Name(), err)
		}
		t.Logf("%s: %d records acked from S, %d from D", run.c.Name(), onS, onD)
	}
	for at, r := range srcRecs {
		if k := string(r.Key); strings.Contains(k, "wrong-password") || strings.Contains(k, "direct") || strings.Contains(k, "other-") {
			t.Errorf("S %s holds %q", at, k)
		}
	}
	for at, r := range dstRecs {
		if k := string(r.Key); strings.Contains(k, "wrong-password") || strings.Contains(k, "direct") {
			t.Errorf("D %s holds %q", at, k)
		}
	}
	if got := endOffsets(t, ctx, srcAdm, topic); !maps.Equal(got, srcEnds) {
		t.Errorf("S.%s grew after COMPLETE: end offsets %v, at COMPLETE %v", topic, got, srcEnds)
	}
	if n := int(gauge(t, reg, "baton_agent_producer_ids")); n != len(runs) {
		t.Errorf("the agent mapped %d source producer sessions to the destination, want %d (one per client)", n, len(runs))
	}
	if err := evs.inOrder(controlplane.EventInitiated, controlplane.EventDrained, controlplane.EventEndOffsets,
		controlplane.EventLagZero, controlplane.EventReplStopped, controlplane.EventGuardLifted, controlplane.EventCompleted); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{controlplane.EventGateRefused, controlplane.EventTimedOut, controlplane.EventFailed, controlplane.EventRolledBack} {
		if evs.has(bad) {
			t.Errorf("event %s: %s", bad, evs.String())
		}
	}
	if l := brokerLog(t, dst, "Failed authentication"); len(l) > 0 {
		t.Errorf("D logged failed authentications (the agent tried a client's refused credentials there?):\n%s", strings.Join(l, "\n"))
	}
}

const (
	// seccutPrefix starts the topics the secured cutover's users are
	// granted (prefixed ACLs).
	seccutPrefix       = "seccut-"
	seccutPartitions   = 3
	seccutRecords      = 450
	seccutPauseAt      = 150 // the last 300 records are sent once T is MIGRATING
	seccutRate         = 50  // records per second: the second part takes 6 s
	seccutMigrateAfter = 20  // acks per client before Migrate
	replUser           = "repl"
	replPassword       = "repl-scram-pw"
)

// setUpSecuredCutover creates repl's SCRAM-SHA-512 credentials and the
// users' ACLs on both clusters, and waits until each broker authenticates
// repl, enforces app's grant and hands out producer ids.
func setUpSecuredCutover(t *testing.T, ctx context.Context, src, dst *kafka.Cluster, srcAdm, dstAdm *kadm.Client, clusterTLS *tls.Config) {
	t.Helper()
	topics := func(user string, ops ...kadm.ACLOperation) *kadm.ACLBuilder {
		return kadm.NewACLs().Topics(seccutPrefix).ResourcePatternType(kadm.ACLPatternPrefixed).Allow("User:" + user).AllowHosts().Operations(ops...)
	}
	cluster := func(user string, ops ...kadm.ACLOperation) *kadm.ACLBuilder {
		return kadm.NewACLs().Clusters().Allow("User:" + user).AllowHosts().Operations(ops...)
	}
	for _, adm := range []*kadm.Client{srcAdm, dstAdm} {
		res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: replUser, Mechanism: kadm.ScramSha512, Iterations: 4096, Password: replPassword}})
		if err == nil {
			err = res.Error()
		}
		if err != nil {
			t.Fatalf("creating %s's SCRAM-SHA-512 credentials: %v", replUser, err)
		}
	}
	createACLs(t, ctx, srcAdm,
		topics("app", kadm.OpWrite, kadm.OpDescribe), cluster("app", kadm.OpIdempotentWrite),
		topics("other", kadm.OpWrite, kadm.OpDescribe),
		topics("agent", kadm.OpWrite, kadm.OpDescribe),
		topics(replUser, kadm.OpRead, kadm.OpDescribe, kadm.OpDescribeConfigs), cluster(replUser, kadm.OpDescribe))
	createACLs(t, ctx, dstAdm,
		topics("app", kadm.OpWrite, kadm.OpDescribe), cluster("app", kadm.OpIdempotentWrite),
		topics("other", kadm.OpDescribe),
		topics("agent", kadm.OpWrite, kadm.OpDescribe),
		// No WRITE on T for the replicator: the guard's ALLOW is what
		// lets it copy.
		topics(replUser, kadm.OpCreate, kadm.OpRead, kadm.OpDescribe, kadm.OpDescribeConfigs, kadm.OpAlterConfigs),
		kadm.NewACLs().Topics(replicator.DefaultOffsetMapTopic).ResourcePatternType(kadm.ACLPatternLiteral).Allow("User:"+replUser).AllowHosts().
			Operations(kadm.OpCreate, kadm.OpWrite, kadm.OpRead, kadm.OpDescribe, kadm.OpDescribeConfigs),
		cluster(replUser, kadm.OpAlter, kadm.OpDescribe, kadm.OpIdempotentWrite))
	for _, c := range []*kafka.Cluster{src, dst} {
		admin := securedAdmin(clusterTLS)
		waitProducerIDs(t, ctx, newClient(t, c.Bootstrap(), admin...))
		probe := seccutPrefix + "probe"
		if err := clients.CreateTopic(ctx, c.Bootstrap(), probe, 1, 1, admin...); err != nil {
			t.Fatal(err)
		}
		waitWritable(t, ctx, c.Bootstrap(), clusterTLS, plainAs("app"), "app", probe, 1)
		repl := newClient(t, c.Bootstrap(), kgo.DialTLSConfig(clusterTLS.Clone()),
			kgo.SASL(scram.Auth{User: replUser, Pass: replPassword}.AsSha512Mechanism()))
		wait.For(t, time.Minute, replUser+" to authenticate with SCRAM-SHA-512", func() string {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if _, err := kmsg.NewPtrMetadataRequest().RequestWith(rctx, repl); err != nil {
				return err.Error()
			}
			return ""
		})
	}
}

// wrongPassword: a client authenticating to the agent as app with a wrong
// password must be refused with SASL_AUTHENTICATION_FAILED, its record
// must reach no cluster (checked by the caller), S must log the failed
// authentication the agent tried with the client's credentials, and D none.
func wrongPassword(t *testing.T, ctx context.Context, agentAddr, topic string, clusterTLS *tls.Config, src, dst *kafka.Cluster) {
	t.Helper()
	before := len(brokerLog(t, src, "Failed authentication"))
	cl := newClient(t, agentAddr, kgo.DialTLSConfig(clusterTLS.Clone()),
		kgo.SASL(plain.Auth{User: "app", Pass: "not-" + securedPasswords["app"]}.AsMechanism()),
		kgo.RecordRetries(2), kgo.RecordDeliveryTimeout(time.Minute))
	err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(seccutPrefix + "wrong-password")}).FirstErr()
	if !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("producing through the agent as app with a wrong password: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
	cl.Close()
	t.Logf("as app with a wrong password: %v", err)
	wait.For(t, 30*time.Second, "S to log the failed authentication", func() string {
		if n := len(brokerLog(t, src, "Failed authentication")); n <= before {
			return fmt.Sprintf("%d lines, %d before", n, before)
		}
		return ""
	})
	if l := brokerLog(t, dst, "Failed authentication"); len(l) > 0 {
		t.Fatalf("D logged failed authentications after a wrong password at the agent:\n%s", strings.Join(l, "\n"))
	}
}

// seccutRun is one client's producer run.
type seccutRun struct {
	c        clients.Client
	clientID string // the client.id its driver sets
	cfg      clients.ProduceConfig
	done     chan error

	mu    sync.Mutex
	acks  []clients.Ack
	acked atomic.Int64
}

func matrixClient(t *testing.T, name string) clients.Client {
	t.Helper()
	for _, c := range clients.Matrix() {
		if c.Name() == name {
			return c
		}
	}
	t.Fatalf("no client %q in the matrix", name)
	return clients.Client{}
}

// holdAfterDrain is the control plane's Replication, holding the cutover
// between its drain and its read of the source's end offsets until
// release is closed (or the cutover's deadline): T stays MIGRATING, with
// every agent stopped, so that the test can see the agent hold produce.
type holdAfterDrain struct {
	controlplane.Replication
	once             sync.Once
	reached, release chan struct{}
}

func (h *holdAfterDrain) SourceEndOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	h.once.Do(func() { close(h.reached) })
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return h.Replication.SourceEndOffsets(ctx, topic)
}

// crossRecorder is a filter on the agent counting, per client id and
// phase of the cutover, the produce requests for its topic that reached
// the agent.
type crossRecorder struct {
	topic string

	mu    sync.Mutex
	now   int // the phase
	count map[string]*[3]int
}

// Phases of the cutover, as the test sets them.
const (
	phaseProxy    = iota // before the drain
	phaseHeld            // every agent stopped forwarding: held until COMPLETE
	phaseComplete        // after COMPLETE
)

func newCrossRecorder(topic string) *crossRecorder {
	return &crossRecorder{topic: topic, count: map[string]*[3]int{}}
}

func (r *crossRecorder) Name() string            { return "e2e-cross-recorder" }
func (r *crossRecorder) New(filter.ConnInfo) any { return r }

func (r *crossRecorder) phase(p int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now = p
}

func (r *crossRecorder) requests(client string, phase int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.count[client]; c != nil {
		return c[phase]
	}
	return 0
}

func (r *crossRecorder) OnRequest(_ context.Context, x *filter.Exchange) filter.Status {
	pr, ok := x.Req.(*kmsg.ProduceRequest)
	if !ok || x.Header.ClientID == nil {
		return filter.Continue
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, tp := range pr.Topics {
		if tp.Topic == r.topic {
			c := r.count[*x.Header.ClientID]
			if c == nil {
				c = new([3]int)
				r.count[*x.Header.ClientID] = c
			}
			c[r.now]++
			break
		}
	}
	return filter.Continue
}

// eventLog collects a topic's control-plane events.
type eventLog struct {
	mu    sync.Mutex
	all   []controlplane.Event
	kinds map[string]chan struct{}
}

func collectEvents(ch <-chan controlplane.Event) *eventLog {
	l := &eventLog{kinds: map[string]chan struct{}{}}
	go func() {
		for e := range ch {
			l.mu.Lock()
			l.all = append(l.all, e)
			c := l.kindLocked(e.Kind)
			select {
			case <-c:
			default:
				close(c)
			}
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *eventLog) kindLocked(kind string) chan struct{} {
	c, ok := l.kinds[kind]
	if !ok {
		c = make(chan struct{})
		l.kinds[kind] = c
	}
	return c
}

// seen is closed once an event of kind came.
func (l *eventLog) seen(kind string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.kindLocked(kind)
}

func (l *eventLog) has(kind string) bool {
	select {
	case <-l.seen(kind):
		return true
	default:
		return false
	}
}

// inOrder checks that events of kinds came, in that order.
func (l *eventLog) inOrder(kinds ...string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := 0
	for _, e := range l.all {
		if i < len(kinds) && e.Kind == kinds[i] {
			i++
		}
	}
	if i < len(kinds) {
		return fmt.Errorf("events: no %s after %v: %s", kinds[i], kinds[:i], l.stringLocked())
	}
	return nil
}

func (l *eventLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stringLocked()
}

func (l *eventLog) stringLocked() string {
	var b strings.Builder
	for _, e := range l.all {
		fmt.Fprintf(&b, "\n  %s %s", e.Kind, e.Reason)
		if e.Agent != "" {
			fmt.Fprintf(&b, " (agent %s)", e.Agent)
		}
	}
	return b.String()
}

// literalTopicACLs describes every ACL on the literal resource Topic:topic
// as "PERMISSION OPERATION principal", sorted.
func literalTopicACLs(ctx context.Context, adm *kadm.Client, topic string) ([]string, error) {
	b := kadm.NewACLs().Topics(topic).ResourcePatternType(kadm.ACLPatternLiteral).Operations(kadm.OpAny).
		Allow().AllowHosts().Deny().DenyHosts()
	res, err := adm.DescribeACLs(ctx, b)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range res {
		if r.Err != nil {
			return nil, fmt.Errorf("%v %s", r.Err, r.ErrMessage)
		}
		for _, a := range r.Described {
			if a.Name != topic || a.Pattern != kadm.ACLPatternLiteral {
				continue
			}
			out = append(out, fmt.Sprintf("%s %s %s", a.Permission, a.Operation, a.Principal))
		}
	}
	sort.Strings(out)
	return slices.Compact(out), nil
}

// brokerLog returns the lines of c's broker logs that contain every one of
// substrs.
func brokerLog(t *testing.T, c *kafka.Cluster, substrs ...string) []string {
	t.Helper()
	var out []string
	for _, nd := range c.Nodes() {
		f, err := os.Open(nd.Log())
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
	line:
		for sc.Scan() {
			for _, s := range substrs {
				if !strings.Contains(sc.Text(), s) {
					continue line
				}
			}
			out = append(out, sc.Text())
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func endOffsets(t *testing.T, ctx context.Context, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// checkAcrossClusters checks one idempotent run's acks against S and D
// after the cutover (clients.Verify has checked them against D): a record
// acked from S is on D at the same offset with the same key and value
// (offset parity), and so is every record of the run S holds; a record
// sent only once T was MIGRATING (seq >= PauseAt) is not on S; per partition,
// every record acked from S comes before every record acked from D; and
// the run has records on both. It returns how many acks came from each.
func checkAcrossClusters(acks []clients.Ack, cfg clients.ProduceConfig, src, dst map[clients.Position]*kgo.Record) (onS, onD int, _ error) {
	var problems []string
	problem := func(format string, args ...any) {
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	same := func(a, b *kgo.Record) bool {
		return a != nil && b != nil && string(a.Key) == string(b.Key) && string(a.Value) == string(b.Value)
	}
	for at, r := range src {
		if strings.HasPrefix(string(r.Key), cfg.KeyPrefix+"-") && !same(r, dst[at]) {
			problem("S %s holds %q, D there %v (offset parity)", at, r.Key, describeRecord(dst[at]))
		}
	}
	maxS, minD := map[int32]int{}, map[int32]int{}
	for _, a := range acks {
		if a.Err != "" {
			continue // clients.Verify said so
		}
		at := clients.Position{Partition: a.Partition, Offset: a.Offset}
		if r := src[at]; r != nil && string(r.Key) == clients.Key(cfg.KeyPrefix, a.Seq) {
			onS++
			if a.Seq >= cfg.PauseAt {
				problem("record %d, sent only once every agent had stopped forwarding, is on S at %s", a.Seq, at)
			}
			if m, ok := maxS[a.Partition]; !ok || a.Seq > m {
				maxS[a.Partition] = a.Seq
			}
			continue
		}
		onD++
		if m, ok := minD[a.Partition]; !ok || a.Seq < m {
			minD[a.Partition] = a.Seq
		}
	}
	for p, s := range maxS {
		if d, ok := minD[p]; ok && d < s {
			problem("partition %d: record %d was acked from D but the later record %d from S (order across the cutover)", p, d, s)
		}
	}
	if onS == 0 || onD == 0 {
		problem("%d records acked from S and %d from D: the cutover was not mid-stream", onS, onD)
	}
	if len(problems) > 0 {
		return onS, onD, errors.New(strings.Join(problems, "\n  "))
	}
	return onS, onD, nil
}

func describeRecord(r *kgo.Record) string {
	if r == nil {
		return "nothing"
	}
	return fmt.Sprintf("%q", r.Key)
}
