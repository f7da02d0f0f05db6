package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/baton-kafka/baton/internal/testcert"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/test/clients"
	"github.com/baton-kafka/baton/test/kafka"
)

// What the secured tests (TestSecuredEveryClient,
// TestSecuredCutoverRealKafka) share: Apache Kafka brokers whose one client
// listener speaks SASL_SSL, their users, ACL waits, agents, and the check
// that a user without WRITE is refused.

// securedPasswords are the SASL PLAIN users of the secured clusters: admin
// (a superuser, the tests' own clients), app and other (producers), agent
// (the agents' own identity).
var securedPasswords = map[string]string{"admin": "admin-pw", "app": "app-pw", "other": "other-pw", "agent": "agent-pw"}

func plainAs(user string) kgo.Opt {
	return kgo.SASL(plain.Auth{User: user, Pass: securedPasswords[user]}.AsMechanism())
}

// securedAdmin is how a test's own clients reach a secured cluster: TLS
// trusting clusterTLS's CA, SASL PLAIN as admin.
func securedAdmin(clusterTLS *tls.Config) []kgo.Opt {
	return []kgo.Opt{kgo.DialTLSConfig(clusterTLS.Clone()), plainAs("admin")}
}

// saslSSLBrokers are the broker options of a cluster whose only client
// listener speaks SASL_SSL, between brokers too (as admin, PLAIN), with
// ca's server certificate given inline as PEM, the PLAIN users of
// securedPasswords, every one of mechanisms enabled (PLAIN always;
// OAUTHBEARER checking unsecured JWTs, naming the client User:<sub>;
// SCRAM-SHA-256/512 with the users' credentials stored in the cluster, see
// addSCRAMUser), and StandardAuthorizer with admin a superuser. The
// controller listener stays PLAINTEXT: its principal is User:ANONYMOUS,
// hence a superuser too, and no client reaches it.
func saslSSLBrokers(t *testing.T, ca testcert.CA, clusterTLS *tls.Config, mechanisms ...string) []kafka.Opt {
	t.Helper()
	srvCert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Server.Certificate[0]})
	der, err := x509.MarshalPKCS8PrivateKey(ca.Server.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	users := make([]string, 0, len(securedPasswords))
	for u := range securedPasswords {
		users = append(users, u)
	}
	sort.Strings(users)
	var jaas strings.Builder
	for _, u := range users {
		fmt.Fprintf(&jaas, " user_%s=%q", u, securedPasswords[u])
	}
	mechs := append([]string{"PLAIN"}, mechanisms...)
	opts := []kafka.Opt{
		// The listener named PLAINTEXT speaks SASL_SSL.
		kafka.BrokerConfig("listener.security.protocol.map", "PLAINTEXT:SASL_SSL,CONTROLLER:PLAINTEXT"),
		kafka.BrokerConfig("ssl.keystore.type", "PEM"),
		kafka.BrokerConfig("ssl.keystore.certificate.chain", string(srvCert)),
		kafka.BrokerConfig("ssl.keystore.key", string(srvKey)),
		kafka.BrokerConfig("ssl.truststore.type", "PEM"),
		kafka.BrokerConfig("ssl.truststore.certificates", string(ca.PEM)),
		kafka.BrokerConfig("sasl.enabled.mechanisms", strings.Join(mechs, ",")),
		kafka.BrokerConfig("sasl.mechanism.inter.broker.protocol", "PLAIN"),
		kafka.BrokerConfig("listener.name.plaintext.plain.sasl.jaas.config",
			`org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-pw"`+jaas.String()+";"),
		kafka.BrokerConfig("authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer"),
		kafka.BrokerConfig("super.users", "User:admin;User:ANONYMOUS"),
		kafka.ClientOpts(securedAdmin(clusterTLS)...),
	}
	for _, m := range mechanisms {
		switch m {
		case "OAUTHBEARER":
			// No server callback handler: Kafka checks unsecured JWTs,
			// naming the client User:<sub>.
			opts = append(opts, kafka.BrokerConfig("listener.name.plaintext.oauthbearer.sasl.jaas.config",
				`org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="broker";`))
		case "SCRAM-SHA-256", "SCRAM-SHA-512":
			opts = append(opts, kafka.BrokerConfig("listener.name.plaintext."+strings.ToLower(m)+".sasl.jaas.config",
				`org.apache.kafka.common.security.scram.ScramLoginModule required;`))
		default:
			t.Fatalf("saslSSLBrokers: mechanism %q", m)
		}
	}
	return opts
}

// createACLs creates every ACL the builders describe, failing t on error.
func createACLs(t *testing.T, ctx context.Context, adm *kadm.Client, bs ...*kadm.ACLBuilder) {
	t.Helper()
	for _, b := range bs {
		res, err := adm.CreateACLs(ctx, b)
		if err == nil {
			for _, r := range res {
				err = errors.Join(err, r.Err)
			}
		}
		if err != nil {
			t.Fatalf("creating ACLs: %v", err)
		}
	}
}

// waitProducerIDs waits until every broker of cl's cluster hands out
// producer ids. A broker does once it has a block of them from the
// controller, and answers COORDINATOR_LOAD_IN_PROGRESS until then, which
// sarama's idempotent producer takes as fatal.
func waitProducerIDs(t *testing.T, ctx context.Context, cl *kgo.Client) {
	t.Helper()
	for _, id := range adminBrokers(t, ctx, kadm.NewClient(cl)) {
		wait.For(t, time.Minute, fmt.Sprintf("broker %d to hand out producer ids", id), func() string {
			req := kmsg.NewPtrInitProducerIDRequest()
			req.TransactionTimeoutMillis = -1
			req.ProducerID, req.ProducerEpoch = -1, -1
			rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			resp, err := req.RequestWith(rctx, cl.Broker(int(id)))
			if err == nil {
				err = kerr.ErrorForCode(resp.ErrorCode)
			}
			if err != nil {
				return err.Error()
			}
			return ""
		})
	}
}

// waitWritable waits until every partition of topic (partitions of them)
// takes a write from auth (a SASL option): ACLs reach each broker's
// authorizer through the metadata log, a moment after CreateACLs answers.
func waitWritable(t *testing.T, ctx context.Context, bootstrap string, clusterTLS *tls.Config, auth kgo.Opt, what, topic string, partitions int32) {
	t.Helper()
	w := newClient(t, bootstrap, kgo.DialTLSConfig(clusterTLS.Clone()), auth, kgo.DisableIdempotentWrite(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(1), kgo.RecordDeliveryTimeout(10*time.Second))
	wait.For(t, time.Minute, fmt.Sprintf("every broker to let %s write %s", what, topic), func() string {
		var recs []*kgo.Record
		for p := range partitions {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte("probe")})
		}
		pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		if err := w.ProduceSync(pctx, recs...).FirstErr(); err != nil {
			return err.Error()
		}
		return ""
	})
}

// topicDenied is how each client says TOPIC_AUTHORIZATION_FAILED: franz-go
// and librdkafka by the error's name, sarama, kafkajs and the Java client
// by its message.
var topicDenied = regexp.MustCompile(`(?i)topic[ _]authorization[ _]failed|not authorized to access (this )?topics?`)

// deniedRun: c produces 10 records to topic through e's agent with sec,
// without idempotence (an idempotent producer would first be refused a
// producer id), as a user the cluster at verify lets see but not write
// the topic. Every record must fail with TOPIC_AUTHORIZATION_FAILED, and
// none be stored (read back from verify).
func deniedRun(t *testing.T, ctx context.Context, e *env, c clients.Client, sec clients.Security, topic, what, verify string, verifyOpts []kgo.Opt) {
	t.Helper()
	cfg := clients.ProduceConfig{Bootstrap: e.agent, Topic: topic, Records: 10, KeyPrefix: what, Headers: c.Headers, Security: sec}
	acks := produce(t, ctx, c, cfg)
	if len(acks) != cfg.Records {
		t.Fatalf("%s as %s: %d outcomes for %d records", c.Name(), sec.SASL.User, len(acks), cfg.Records)
	}
	for _, a := range acks {
		if a.Err == "" {
			t.Fatalf("%s as %s: record %d acked at %d/%d: the cluster took a write from a user without WRITE on %s (whose principal reached it?)",
				c.Name(), sec.SASL.User, a.Seq, a.Partition, a.Offset, topic)
		}
		if !topicDenied.MatchString(a.Err) {
			t.Fatalf("%s as %s: record %d failed with %q, want TOPIC_AUTHORIZATION_FAILED", c.Name(), sec.SASL.User, a.Seq, a.Err)
		}
	}
	recs, err := clients.ReadTopic(ctx, verify, topic, verifyOpts...)
	if err != nil {
		t.Fatal(err)
	}
	for at, r := range recs {
		if strings.HasPrefix(string(r.Key), what+"-") {
			t.Fatalf("%s as %s: record %q stored in %s at %s, want none", c.Name(), sec.SASL.User, r.Key, topic, at)
		}
	}
	t.Logf("%s as %s: all %d records refused, e.g. %q", c.Name(), sec.SASL.User, len(acks), acks[0].Err)
}

// adminBrokers lists the cluster's broker ids.
func adminBrokers(t *testing.T, ctx context.Context, adm *kadm.Client) []int32 {
	t.Helper()
	bs, err := adm.ListBrokers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return bs.NodeIDs()
}
