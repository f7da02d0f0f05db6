package acl

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/test/kafka"
)

// The guard on Apache Kafka with StandardAuthorizer (KRaft's authorizer),
// SASL/PLAIN on the client listener: "admin" is a superuser, "repl" and
// "app" may write every topic, "other" nothing.
func TestGuardStandardAuthorizer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Apache Kafka")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client := standardAuthorizer(t)
	write := func(user, topic string) error {
		cl := client(user)
		defer cl.Close()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return cl.ProduceSync(wctx, &kgo.Record{Topic: topic, Value: []byte("x")}).FirstErr()
	}
	adm := kadm.NewClient(client("admin"))
	for _, topic := range []string{"orders", "probe"} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := adm.CreateACLs(ctx, kadm.NewACLs().Topics("*").Allow("User:repl", "User:app").AllowHosts().
		Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)); err != nil {
		t.Fatal(err)
	}
	expect := func(user, topic string, allowed bool) {
		t.Helper()
		// ACL changes reach the broker's authorizer through the metadata
		// log, a moment after CreateACLs answers.
		wait.For(t, 30*time.Second, fmt.Sprintf("%s allowed=%v to write %s", user, allowed, topic), func() string {
			if err := write(user, topic); (err == nil) != allowed {
				return fmt.Sprintf("write: %v", err)
			}
			return ""
		})
	}
	expect("repl", "orders", true)
	expect("app", "orders", true)

	// What the guard's design rests on: DENY User:* beats an ALLOW for a
	// named principal, so it cannot mean "everyone but the replicator".
	if _, err := adm.CreateACLs(ctx, kadm.NewACLs().Topics("probe").Deny("User:*").DenyHosts().
		Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateACLs(ctx, kadm.NewACLs().Topics("probe").Allow("User:repl").AllowHosts().
		Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)); err != nil {
		t.Fatal(err)
	}
	expect("repl", "probe", false)

	g := detectStandardAuthorizer(t, ctx, adm)
	if err := g.Protect(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	expect("app", "orders", false)
	expect("repl", "orders", true)
	expect("other", "orders", false)

	// A grant made after the guard went up works until the next Protect.
	if _, err := adm.CreateACLs(ctx, kadm.NewACLs().Topics("orders").Allow("User:other").AllowHosts().
		Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)); err != nil {
		t.Fatal(err)
	}
	expect("other", "orders", true)
	if err := g.Protect(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	expect("other", "orders", false)
	expect("repl", "orders", true)

	if err := g.Lift(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	expect("app", "orders", true)
	expect("other", "orders", true)
	expect("repl", "orders", true)
}

// standardAuthorizer starts TestGuardStandardAuthorizer's Apache Kafka
// and returns a client of it for a user (password: user + "-pw").
func standardAuthorizer(t *testing.T) func(user string) *kgo.Client {
	t.Helper()
	jaas := `org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-pw" ` +
		`user_admin="admin-pw" user_repl="repl-pw" user_app="app-pw" user_other="other-pw";`
	c := kafka.StartT(t, kafka.Brokers(1),
		// The listener named PLAINTEXT speaks SASL_PLAINTEXT; the
		// controller listener stays PLAINTEXT (its principal is
		// User:ANONYMOUS, hence a superuser; no client reaches it).
		kafka.BrokerConfig("listener.security.protocol.map", "PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"),
		kafka.BrokerConfig("sasl.enabled.mechanisms", "PLAIN"),
		kafka.BrokerConfig("sasl.mechanism.inter.broker.protocol", "PLAIN"),
		kafka.BrokerConfig("listener.name.plaintext.plain.sasl.jaas.config", jaas),
		kafka.BrokerConfig("authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer"),
		kafka.BrokerConfig("super.users", "User:admin;User:ANONYMOUS"),
		kafka.ClientOpts(kgo.SASL(plain.Auth{User: "admin", Pass: "admin-pw"}.AsMechanism())))
	client := func(user string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.SASL(plain.Auth{User: user, Pass: user + "-pw"}.AsMechanism()),
			kgo.DisableIdempotentWrite(), kgo.RecordDeliveryTimeout(5*time.Second), kgo.RecordRetries(2))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	return client
}

// detectStandardAuthorizer checks DetectGuard on Apache Kafka with
// StandardAuthorizer: no guard for an anonymous replicator, saying so;
// the wildcard principal refused; a Guard for a named replicator, which
// it returns.
func detectStandardAuthorizer(t *testing.T, ctx context.Context, adm *kadm.Client) *Guard {
	t.Helper()
	if g, none, err := DetectGuard(ctx, adm, "User:ANONYMOUS"); err != nil || g != nil || none == nil ||
		*none != (Unguarded{Why: AnonymousWhy, Remedy: AnonymousRemedy}) {
		t.Errorf("DetectGuard with an anonymous replicator = %v, %#v, %v; want the Unguarded saying so", g, none, err)
	}
	if _, _, err := DetectGuard(ctx, adm, "User:*"); !errors.Is(err, ErrGuardPrincipal) {
		t.Errorf("DetectGuard with the wildcard principal: %v, want ErrGuardPrincipal", err)
	}
	g, none, err := DetectGuard(ctx, adm, "repl")
	if err != nil || g == nil {
		t.Fatalf("DetectGuard with a named replicator = %v, %#v, %v; want a Guard", g, none, err)
	}
	return g
}
