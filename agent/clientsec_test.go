package agent_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"go.yaml.in/yaml/v3"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/filter/sasl"
	"github.com/baton-kafka/baton/internal/testcert"
	"github.com/baton-kafka/baton/internal/testlog"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
)

// aclCluster is a kfake cluster with SASL PLAIN and ACLs: admin a
// superuser, alice allowed to write and describe topics "shared" and
// "alice-only", bob allowed "shared" only.
func aclCluster(t *testing.T, name string) *kfake.Cluster {
	t.Helper()
	allow := func(topic string, op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: topic, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
	}
	idem := kfake.ACL{Resource: kmsg.ACLResourceTypeCluster, Name: "kafka-cluster", Pattern: kmsg.ACLResourcePatternTypeLiteral,
		Operation: kmsg.ACLOperationIdempotentWrite, Allow: true}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ClusterID(name),
		kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", "admin-secret"),
		kfake.User("PLAIN", "alice", "alice-secret", idem,
			allow("shared", kmsg.ACLOperationWrite), allow("shared", kmsg.ACLOperationDescribe),
			allow("alice-only", kmsg.ACLOperationWrite), allow("alice-only", kmsg.ACLOperationDescribe)),
		kfake.User("PLAIN", "bob", "bob-secret", idem,
			allow("shared", kmsg.ACLOperationWrite), allow("shared", kmsg.ACLOperationDescribe)),
		kfake.SeedTopics(2, "shared", "alice-only"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// produceOne writes one record and returns its error.
func produceOne(cl *kgo.Client, topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("v")}).FirstErr()
}

func quietAgent(t *testing.T, opts ...agent.Opt) *agent.Agent {
	t.Helper()
	a, err := agent.New(append([]agent.Opt{agent.Listen("127.0.0.1:0"),
		agent.Logger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, a)
	return a
}

// TestClientCredentialsForwarded: with SASL forward, each client reaches
// both clusters as itself. Alice may write alice-only, bob may not: the
// clusters' ACLs, not the agent, decide, on the source (PROXY) and on the
// destination (COMPLETE). A password the source refuses is the client's
// SASL_AUTHENTICATION_FAILED, and a client without SASL gets nothing
// through.
func TestClientCredentialsForwarded(t *testing.T) {
	t.Parallel()
	src, dst := aclCluster(t, "source"), aclCluster(t, "destination")
	routes := agent.NewRouteTable(nil)
	a := quietAgent(t, agent.Source(src.ListenAddrs()...), agent.Destination(dst.ListenAddrs()...),
		agent.Routes(routes), agent.ListenSecurity(agent.ClientSecurity{SASL: agent.SASLForward}))
	as := func(user, pass string) *kgo.Client {
		return newClient(t, a.Addr(), kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()),
			kgo.RecordDeliveryTimeout(10*time.Second), kgo.RequestRetries(2))
	}
	alice, bob := as("alice", "alice-secret"), as("bob", "bob-secret")

	for _, state := range []migration.State{migration.Proxy, migration.Complete} {
		routes.Replace([]agent.Route{{Topic: "shared", State: state}, {Topic: "alice-only", State: state}})
		if err := produceOne(alice, "shared"); err != nil {
			t.Fatalf("%s: alice to shared: %v", state, err)
		}
		if err := produceOne(alice, "alice-only"); err != nil {
			t.Fatalf("%s: alice to alice-only: %v", state, err)
		}
		if err := produceOne(bob, "shared"); err != nil {
			t.Fatalf("%s: bob to shared: %v", state, err)
		}
		if err := produceOne(bob, "alice-only"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("%s: bob to alice-only: %v, want TOPIC_AUTHORIZATION_FAILED from the cluster (bob's own principal upstream)", state, err)
		}
	}

	wrong := as("alice", "not-her-password")
	if err := produceOne(wrong, "shared"); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("a password the source refuses: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
	anon := newClient(t, a.Addr(), kgo.RecordDeliveryTimeout(5*time.Second), kgo.RequestRetries(1))
	if err := produceOne(anon, "shared"); err == nil {
		t.Fatal("a client without SASL produced through an agent that requires it")
	}
}

// TestClientPasswordRefusedIsNotTheAgents: with SASL forward, a client
// whose password the source refuses is the client's problem, which the
// client SASL filter reports ("client SASL authentication refused"). The
// agent must not say, let alone at every attempt, that the source is
// unreachable, or that the brokers refused its own SASL authentication and
// its password file is to be checked: the source answers the agent, its
// own credentials are fine, and an operator following that advice looks
// in the wrong place.
func TestClientPasswordRefusedIsNotTheAgents(t *testing.T) {
	t.Parallel()
	src, dst := aclCluster(t, "source"), aclCluster(t, "destination")
	logs := &logRecorder{}
	own := agent.Security{SASL: plain.Auth{User: "admin", Pass: "admin-secret"}.AsMechanism()}
	a, err := agent.New(agent.Listen("127.0.0.1:0"), agent.Logger(slog.New(logs)),
		agent.Source(src.ListenAddrs()...), agent.Destination(dst.ListenAddrs()...),
		agent.SourceSecurity(own), agent.DestinationSecurity(own),
		agent.ListenSecurity(agent.ClientSecurity{SASL: agent.SASLForward}))
	if err != nil {
		t.Fatal(err)
	}
	serve(t, a)
	as := func(pass string) *kgo.Client {
		return newClient(t, a.Addr(), kgo.SASL(plain.Auth{User: "alice", Pass: pass}.AsMechanism()),
			kgo.RecordDeliveryTimeout(10*time.Second), kgo.RequestRetries(2))
	}
	// A wrong password for a principal the agent does not know yet, then
	// for one it forwards for already.
	if err := produceOne(as("not-her-password"), "shared"); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("a password the source refuses: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
	if err := produceOne(as("alice-secret"), "shared"); err != nil {
		t.Fatalf("alice with her password: %v", err)
	}
	if err := produceOne(as("still-not-her-password"), "shared"); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("a password the source refuses, for a principal forwarded already: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
	if n := logs.count(slog.LevelWarn, "client SASL authentication refused"); n == 0 {
		t.Error("no WARN that a client's SASL authentication was refused")
	}
	// The source answered the agent throughout: what it refused was a
	// client's password. (Apache Kafka answers SASL_AUTHENTICATION_FAILED,
	// and the WARN blamed the agent's own credentials; kfake closes the
	// connection, and the WARN said no broker was up.)
	if bad := logs.matching(slog.LevelWarn, "source cluster unreachable"); len(bad) > 0 {
		t.Errorf("%d WARN records say the source is unreachable, about clients' wrong passwords:\n%s", len(bad), strings.Join(bad, "\n"))
	}
}

// TestClientSCRAMLocal: with SASL local, a client proves its SCRAM
// password to the agent, which reaches the clusters as itself (the
// workload's identity, here admin).
func TestClientSCRAMLocal(t *testing.T) {
	t.Parallel()
	src, dst := aclCluster(t, "source"), aclCluster(t, "destination")
	var list []sasl.SCRAMCredential
	for _, mech := range []string{sasl.ScramSHA256, sasl.ScramSHA512} {
		c, err := sasl.NewSCRAMCredential(mech, "app", "app-secret", 4096)
		if err != nil {
			t.Fatal(err)
		}
		list = append(list, c)
	}
	b, err := yaml.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := sasl.ParseSCRAMCredentials(b)
	if err != nil {
		t.Fatal(err)
	}
	admin := plain.Auth{User: "admin", Pass: "admin-secret"}.AsMechanism()
	a := quietAgent(t, agent.Source(src.ListenAddrs()...), agent.Destination(dst.ListenAddrs()...),
		agent.SourceSecurity(agent.Security{SASL: admin}), agent.DestinationSecurity(agent.Security{SASL: admin}),
		agent.ListenSecurity(agent.ClientSecurity{SASL: agent.SASLLocal, SCRAM: creds}))

	app := newClient(t, a.Addr(), kgo.SASL(scram.Auth{User: "app", Pass: "app-secret"}.AsSha512Mechanism()))
	acks := produceN(t, app, "alice-only", 10) // admin may write anything
	checkAcked(t, acks, readAllWith(t, "alice-only", 10, kgo.SeedBrokers(src.ListenAddrs()...), kgo.SASL(admin)))
	app256 := newClient(t, a.Addr(), kgo.SASL(scram.Auth{User: "app", Pass: "app-secret"}.AsSha256Mechanism()))
	if err := produceOne(app256, "shared"); err != nil {
		t.Fatalf("SCRAM-SHA-256: %v", err)
	}
	wrong := newClient(t, a.Addr(), kgo.SASL(scram.Auth{User: "app", Pass: "guess"}.AsSha512Mechanism()),
		kgo.RecordDeliveryTimeout(5*time.Second), kgo.RequestRetries(1))
	if err := produceOne(wrong, "shared"); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("a wrong SCRAM password: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
}

// TestClientTLS: the listener serves TLS, and with client certificates
// required only a client with one the CA signed gets through.
func TestClientTLS(t *testing.T) {
	t.Parallel()
	ca := testcert.New(t)
	src, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "tls"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	for _, mtls := range []bool{false, true} {
		srv := &tls.Config{Certificates: []tls.Certificate{ca.Server}, MinVersion: tls.VersionTLS12}
		if mtls {
			srv.ClientCAs, srv.ClientAuth = ca.Pool, tls.RequireAndVerifyClientCert
		}
		a := quietAgent(t, agent.Source(src.ListenAddrs()...), agent.Destination(src.ListenAddrs()...),
			agent.ListenSecurity(agent.ClientSecurity{TLS: srv}))
		withCert := &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{ca.Client(t, "app")}}
		if err := produceOne(newClient(t, a.Addr(), kgo.DialTLSConfig(withCert)), "tls"); err != nil {
			t.Fatalf("mTLS %v: a client with a certificate: %v", mtls, err)
		}
		noCert := &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}
		err := produceOne(newClient(t, a.Addr(), kgo.DialTLSConfig(noCert), kgo.RecordDeliveryTimeout(5*time.Second)), "tls")
		if mtls != (err != nil) {
			t.Fatalf("mTLS %v: a client without a certificate: %v", mtls, err)
		}
		plainText := newClient(t, a.Addr(), kgo.RecordDeliveryTimeout(3*time.Second), kgo.RequestRetries(1))
		if err := produceOne(plainText, "tls"); err == nil {
			t.Fatalf("mTLS %v: a plaintext client produced through a TLS listener", mtls)
		}
	}
}

// TestClientTLSProbeIsNoFailure: a TCP probe (connect, close) of a TLS
// listener is not a client's failed handshake: not counted, not warned
// about. A plaintext Kafka client is one.
func TestClientTLSProbeIsNoFailure(t *testing.T) {
	t.Parallel()
	ca := testcert.New(t)
	src, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	reg := prometheus.NewRegistry()
	var logs testlog.Buffer
	a, err := agent.New(agent.Listen("127.0.0.1:0"), agent.Source(src.ListenAddrs()...), agent.Destination(src.ListenAddrs()...),
		agent.Registry(reg), agent.Logger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		agent.ListenSecurity(agent.ClientSecurity{TLS: &tls.Config{Certificates: []tls.Certificate{ca.Server}, MinVersion: tls.VersionTLS12}}))
	if err != nil {
		t.Fatal(err)
	}
	serve(t, a)
	failures := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "baton_agent_client_tls_failures_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return 0
	}
	const probes = 3
	for range probes {
		c, err := net.Dial("tcp", a.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	wait.For(t, 10*time.Second, "the probes seen", func() string {
		if n := strings.Count(logs.String(), "connection closed before a TLS handshake"); n < probes {
			return fmt.Sprintf("%d of %d", n, probes)
		}
		return ""
	})
	if n := failures(); n != 0 || strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("after %d TCP probes: %v failed handshakes counted, log:\n%s", probes, n, logs.String())
	}
	plainText := newClient(t, a.Addr(), kgo.RecordDeliveryTimeout(3*time.Second), kgo.RequestRetries(1))
	if err := produceOne(plainText, "t"); err == nil {
		t.Fatal("a plaintext client produced through a TLS listener")
	}
	wait.For(t, 10*time.Second, "the plaintext client's failed handshake counted and warned", func() string {
		if n := failures(); n < 1 || !strings.Contains(logs.String(), "level=WARN msg=\"client TLS handshake failed") {
			return fmt.Sprintf("%v failures", n)
		}
		return ""
	})
}
