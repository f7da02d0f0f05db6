package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/testlog"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/test/etcdcluster"
	"github.com/baton-kafka/baton/test/kafka"
)

// fencePasswords are the SASL PLAIN users of the fenced source: admin (a
// superuser: the control plane's admin and replicator, the test's own
// clients), agent (the agents' identity) and app (a producer that writes
// the source directly, as a forgotten producer would).
var fencePasswords = map[string]string{"admin": "admin-pw", "agent": "agent-pw", "app": "app-pw"}

func fenceSASL(user string) plain.Auth { return plain.Auth{User: user, Pass: fencePasswords[user]} }

// TestSourceFenceRealKafka is the source fence's acceptance, on
// Apache Kafka with StandardAuthorizer on the source. Two control-plane
// replicas on etcd, started with the default --source-fence=auto, find the
// authorizer and fence. Two agents produce through PROXY; every replica is
// killed (SIGKILL) for 60 s: the agents' leases run out, and their
// producers keep writing, none failing, because the topic's route says the
// source fences it at the cutover. The replicas are started again and the
// topic cut over; a producer writing the source directly meanwhile is
// refused by the source (TOPIC_AUTHORIZATION_FAILED), and every record
// acked to anyone is on the destination.
func TestSourceFenceRealKafka(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts Apache Kafka, etcd and control plane processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	endpoints := strings.Join(etcdcluster.Start(t, 1).Endpoints(), ",")
	var jaas strings.Builder
	for _, u := range []string{"admin", "agent", "app"} {
		fmt.Fprintf(&jaas, " user_%s=%q", u, fencePasswords[u])
	}
	src := kafka.StartT(t, kafka.Brokers(3), kafka.Partitions(3),
		kafka.BrokerConfig("listener.security.protocol.map", "PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"),
		kafka.BrokerConfig("sasl.enabled.mechanisms", "PLAIN"),
		kafka.BrokerConfig("sasl.mechanism.inter.broker.protocol", "PLAIN"),
		kafka.BrokerConfig("listener.name.plaintext.plain.sasl.jaas.config",
			`org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-pw"`+jaas.String()+";"),
		kafka.BrokerConfig("authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer"),
		// The controller listener is PLAINTEXT: User:ANONYMOUS, which no
		// client reaches.
		kafka.BrokerConfig("super.users", "User:admin;User:ANONYMOUS"),
		kafka.ClientOpts(kgo.SASL(fenceSASL("admin").AsMechanism())))
	admin, err := kgo.NewClient(kgo.SeedBrokers(src.Addrs()...), kgo.SASL(fenceSASL("admin").AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	adm := kadm.NewClient(admin)
	if _, err := adm.CreateTopic(ctx, 3, 2, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	// The agents and the direct producer may write orders; idempotent
	// producers need IDEMPOTENT_WRITE on the cluster.
	if err := createACLsAndWait(ctx, admin,
		kadm.NewACLs().Allow("User:agent", "User:app").AllowHosts().Topics("orders").
			Operations(kadm.OpWrite, kadm.OpDescribe).ResourcePatternType(kadm.ACLPatternLiteral),
		kadm.NewACLs().Allow("User:agent", "User:app").AllowHosts().Clusters().Operations(kadm.OpIdempotentWrite),
	); err != nil {
		t.Fatal(err)
	}
	dst, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dst.Close)

	pwFile := filepath.Join(t.TempDir(), "source-password")
	if err := os.WriteFile(pwFile, []byte(fencePasswords["admin"]), 0o600); err != nil {
		t.Fatal(err)
	}
	grpcAddrs := []string{freeTCPAddr(t), freeTCPAddr(t)}
	kills := map[string]func(){}
	logs := map[string]*testlog.Buffer{}
	startReplicas := func(round int) {
		for i, addr := range grpcAddrs {
			id := fmt.Sprintf("r%d", i+1)
			p := startReplica(t, "--source", src.Bootstrap(), "--destination", dst.Bootstrap(),
				"--source-sasl-mechanism", "PLAIN", "--source-sasl-user", "admin", "--source-sasl-password-file", pwFile,
				"--source-fence", "auto", "--write-guard", "none",
				"--etcd-endpoints", endpoints, "--replica-id", id, "--leader-ttl", "1s",
				"--grpc", addr, "--http", "127.0.0.1:0", "--cutover-timeout", "60s")
			kills[id], logs[id] = p.kill, p.log
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("replica %s (round %d) log:\n%s", id, round, logs[id])
				}
			})
		}
	}
	leaderAPI := func() string {
		var api string
		wait.For(t, 2*time.Minute, "a replica elected and serving", func() string {
			for _, l := range logs {
				if m := upLine.FindStringSubmatch(l.String()); m != nil {
					api = m[1]
					return ""
				}
			}
			return "none up yet"
		})
		return api
	}
	startReplicas(1)
	api := leaderAPI()
	for id, l := range logs {
		if strings.Contains(l.String(), "control plane up") && !strings.Contains(l.String(), "source fence: a cutover denies writes") {
			t.Fatalf("%s did not pick the ACL source fence on a source with an authorizer:\n%s", id, l)
		}
	}
	if _, err := runCLI("topic", "add", "orders", "--server", api); err != nil {
		t.Fatal(err)
	}

	agentSec := agent.SourceSecurity(agent.Security{SASL: fenceSASL("agent").AsMechanism()})
	var producers []*haProducer
	for _, node := range []string{"pod-1", "pod-2"} {
		a, _ := startHAAgent(t, ctx, node, grpcAddrs, src.Addrs(), dst.Addrs(), agentSec)
		producers = append(producers, startHAProducer(t, ctx, a.Addr()))
	}
	waitAcked(t, "records acked through PROXY", 50, producers...)

	// Every replica killed for 60 s: the leases run out after 5 s.
	for _, p := range producers {
		p.resetGap()
	}
	before := []int{producers[0].count(), producers[1].count()}
	for _, kill := range kills {
		kill()
	}
	outage := time.Now()
	// The outage lasts the acceptance's 60 s; a producer that fails
	// meanwhile ends the test at once.
	wait.For(t, 2*time.Minute, "60 s without a control plane", func() string {
		for i, p := range producers {
			if err := p.failed(); err != nil {
				t.Fatalf("producer %d failed while no control plane was up: %v", i+1, err)
			}
		}
		if d := time.Since(outage); d < 60*time.Second {
			return fmt.Sprintf("%v so far", d.Round(time.Second))
		}
		return ""
	})
	for i, p := range producers {
		// A producer stuck now has its longest gap still open.
		gap := max(p.gap(), time.Since(p.lastAckAt()))
		t.Logf("producer %d: %d records acked during the 60 s without a control plane; longest gap between acks %v",
			i+1, p.count()-before[i], gap.Round(time.Millisecond))
		if err := p.failed(); err != nil {
			t.Fatalf("producer %d failed while no control plane was up: %v", i+1, err)
		}
		// Without the fence the lease gate holds every produce from the
		// lease's end (5 s in) for the rest of the outage.
		if gap >= migration.DefaultLease {
			t.Errorf("producer %d stalled %v while no control plane was up: the agents stopped forwarding without a lease",
				i+1, gap.Round(time.Millisecond))
		}
		if p.lastAckAt().Before(outage.Add(55 * time.Second)) {
			t.Errorf("producer %d: last ack at %v into the outage, want acks until its end", i+1, p.lastAckAt().Sub(outage))
		}
	}

	startReplicas(2)
	api = leaderAPI()
	waitAcked(t, "records acked with the replicas back", 50, producers...)
	wait.For(t, 2*time.Minute, "the cutover starts", func() string {
		if _, err := runCLI("topic", "migrate", "orders", "--server", api); err != nil {
			return err.Error() // a gate: the time lag right after the restart
		}
		return ""
	})
	// A producer writing the source directly, started as the cutover
	// began: the source refuses it once the fence is up.
	direct := startDirectProducer(t, ctx, src.Addrs())
	wait.For(t, 2*time.Minute, "orders COMPLETE", func() string {
		out, err := runCLI("topic", "status", "orders", "--server", api)
		if err != nil || !strings.Contains(out, "COMPLETE") {
			return fmt.Sprint(out, err)
		}
		return ""
	})
	events, err := runCLI("events", "--topic", "orders", "--server", api)
	if err != nil || !strings.Contains(events, "source_fenced") {
		t.Errorf("no source_fenced event in the cutover: %v\n%s", err, events)
	}
	directAcked, directErr := direct.wait(t)
	t.Logf("the direct producer: %d records acked before the fence, then: %v", len(directAcked), directErr)
	if !errors.Is(directErr, kerr.TopicAuthorizationFailed) {
		t.Errorf("the direct producer ended with %v, want TOPIC_AUTHORIZATION_FAILED from the source", directErr)
	}
	waitAcked(t, "records acked after COMPLETE", 50, producers...)
	for i, p := range producers {
		acked := p.stop(t)
		t.Logf("producer %d: %d records acked", i+1, len(acked))
		checkOnDestination(t, ctx, dst.Addrs(), acked)
	}
	checkOnDestination(t, ctx, dst.Addrs(), directAcked)
}

// createACLsAndWait creates the builders' ACLs on a cluster that has none
// yet, and waits until every broker of cl lists them (each applies ACLs
// from the metadata log a moment later, and answers DescribeAcls from the
// ones it authorizes with).
func createACLsAndWait(ctx context.Context, cl *kgo.Client, bs ...*kadm.ACLBuilder) error {
	adm := kadm.NewClient(cl)
	want := 0
	for _, b := range bs {
		res, err := adm.CreateACLs(ctx, b)
		if err == nil {
			for _, r := range res {
				err = errors.Join(err, r.Err)
			}
		}
		if err != nil {
			return err
		}
		want += len(res)
	}
	brokers, err := adm.ListBrokers(ctx)
	if err != nil {
		return err
	}
	for _, br := range brokers {
		for {
			req := kmsg.NewPtrDescribeACLsRequest()
			req.ResourceType, req.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
			req.Operation, req.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
			resp, err := req.RequestWith(ctx, cl.Broker(int(br.NodeID)))
			if err != nil {
				return err
			}
			n := 0
			for _, r := range resp.Resources {
				n += len(r.ACLs)
			}
			if n >= want {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("broker %d lists %d ACLs, want at least %d: %w", br.NodeID, n, want, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// directProducer writes orders on the source as app, one record after
// another, until the source refuses a write (or 2 minutes pass).
type directProducer struct {
	mu    sync.Mutex
	acked []string
	err   error
	done  chan struct{}
}

func startDirectProducer(t *testing.T, ctx context.Context, src []string) *directProducer {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(src...), kgo.SASL(fenceSASL("app").AsMechanism()),
		kgo.DefaultProduceTopic("orders"), kgo.RecordDeliveryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	d := &directProducer{done: make(chan struct{})}
	go func() {
		defer close(d.done)
		end := time.Now().Add(2 * time.Minute)
		for i := 0; time.Now().Before(end); i++ {
			v := fmt.Sprintf("direct-%05d", i)
			err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr()
			d.mu.Lock()
			if err != nil {
				d.err = err
				d.mu.Unlock()
				return
			}
			d.acked = append(d.acked, v)
			d.mu.Unlock()
		}
		d.mu.Lock()
		d.err = errors.New("never refused in 2 minutes")
		d.mu.Unlock()
	}()
	return d
}

func (d *directProducer) wait(t *testing.T) ([]string, error) {
	t.Helper()
	<-d.done
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.acked, d.err
}
