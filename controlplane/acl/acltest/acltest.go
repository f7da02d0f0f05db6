// Package acltest is what the tests of the write guard and the source
// fence share, in package acl and in the control plane that drives them: a
// kfake cluster with an authorizer and SASL/PLAIN users, their clients,
// and checks of who may write a topic and which ACLs are on it.
package acltest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/baton-kafka/baton/internal/embedded"
)

// Cluster starts a kfake cluster with an authorizer, closed when t ends:
// "admin" is a superuser; "repl" (the replicator) and "app" (a producer)
// may write every topic (ALLOW WRITE on literal "*"); "other" may write
// nothing. Each user's password is its name and "-pw". The guard's tests
// use it as the destination, the fence's as the source.
func Cluster(t *testing.T, extra ...kfake.Opt) *embedded.Cluster {
	t.Helper()
	writeAll := kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "*", Pattern: kmsg.ACLResourcePatternTypeLiteral,
		Operation: kmsg.ACLOperationWrite, Allow: true}
	opts := append([]kfake.Opt{kfake.EnableSASL(), kfake.EnableACLs(), kfake.Superuser("PLAIN", "admin", "admin-pw"),
		kfake.User("PLAIN", "repl", "repl-pw", writeAll), kfake.User("PLAIN", "app", "app-pw", writeAll),
		kfake.User("PLAIN", "other", "other-pw")}, extra...)
	c, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(1), embedded.KfakeOpts(opts...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// Client is a client of c authenticated as user, closed when t ends.
func Client(t *testing.T, c *embedded.Cluster, user, pass string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()),
		kgo.DisableIdempotentWrite(), kgo.RecordDeliveryTimeout(3*time.Second), kgo.RecordRetries(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// CanWrite produces one record as user with a fresh client.
func CanWrite(t *testing.T, c *embedded.Cluster, user, topic string) error {
	t.Helper()
	cl := Client(t, c, user, user+"-pw")
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("x")}).FirstErr()
}

// WantRefused checks that user's write to topic is refused by the fence:
// TOPIC_AUTHORIZATION_FAILED.
func WantRefused(t *testing.T, c *embedded.Cluster, user, topic, when string) {
	t.Helper()
	if err := CanWrite(t, c, user, topic); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("%s writing %s %s: %v, want TOPIC_AUTHORIZATION_FAILED", user, topic, when, err)
	}
}

// WantWrites checks that user may write topic.
func WantWrites(t *testing.T, c *embedded.Cluster, user, topic, when string) {
	t.Helper()
	if err := CanWrite(t, c, user, topic); err != nil {
		t.Errorf("%s writing %s %s: %v, want it written", user, topic, when, err)
	}
}

// CreateTopics creates each of topics with one partition.
func CreateTopics(t *testing.T, ctx context.Context, adm *kadm.Client, topics ...string) {
	t.Helper()
	for _, topic := range topics {
		r, err := adm.CreateTopic(ctx, 1, 1, nil, topic)
		if err == nil {
			err = r.Err
		}
		if err != nil {
			t.Fatalf("creating %s: %v", topic, err)
		}
	}
}

// HasACL reports whether an ALLOW (allow) or DENY WRITE ACL for
// principal is on the literal topic.
func HasACL(t *testing.T, ctx context.Context, adm *kadm.Client, topic, principal string, allow bool) bool {
	t.Helper()
	b := kadm.NewACLs().Topics(topic).Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)
	if allow {
		b = b.Allow(principal).AllowHosts()
	} else {
		b = b.Deny(principal).DenyHosts()
	}
	res, err := adm.DescribeACLs(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		for _, a := range r.Described {
			if a.Principal == principal && a.Name == topic {
				return true
			}
		}
	}
	return false
}

// FenceACLs counts the DENY WRITE ACLs for User:* from any host on the
// literal topic: the fence's, or an operator's identical one.
func FenceACLs(t *testing.T, ctx context.Context, adm *kadm.Client, topic string) int {
	t.Helper()
	res, err := adm.DescribeACLs(ctx, kadm.NewACLs().Topics(topic).Operations(kadm.OpWrite).
		ResourcePatternType(kadm.ACLPatternLiteral).Deny("User:*").DenyHosts("*"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("%v %s", r.Err, r.ErrMessage)
		}
		for _, a := range r.Described {
			if a.Name == topic && a.Principal == "User:*" && a.Host == "*" && a.Permission == kmsg.ACLPermissionTypeDeny &&
				a.Operation == kadm.OpWrite && a.Pattern == kadm.ACLPatternLiteral {
				n++
			}
		}
	}
	return n
}
