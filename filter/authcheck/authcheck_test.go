package authcheck_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/authcheck"
	"github.com/baton-kafka/baton/internal/testlog"
	"github.com/baton-kafka/baton/internal/wait"
)

// destination is a kfake cluster with ACLs: admin a super user, alice
// allowed to write "orders" and "strict", bob allowed nothing, carl
// allowed to read "orders" (and not to describe the cluster's ACLs).
func destination(t *testing.T) *kfake.Cluster {
	t.Helper()
	allowWrite := func(topic string) kfake.ACL {
		return kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: topic, Pattern: literal, Operation: write, Allow: true}
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", "admin-secret"),
		kfake.User("PLAIN", "alice", "alice-secret", allowWrite("orders"), allowWrite("strict")),
		kfake.User("PLAIN", "bob", "bob-secret"),
		kfake.User("PLAIN", "carl", "carl-secret",
			kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "orders", Pattern: literal, Operation: read, Allow: true}),
		kfake.SeedTopics(1, "orders", "strict"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func client(t *testing.T, c *kfake.Cluster, user, pass string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// describeAs sends DescribeACLs with cl's credentials, as the agent does
// with its own.
func describeAs(cl *kgo.Client) func(context.Context, *kmsg.DescribeACLsRequest) (*kmsg.DescribeACLsResponse, error) {
	return func(ctx context.Context, req *kmsg.DescribeACLsRequest) (*kmsg.DescribeACLsResponse, error) {
		resp, err := cl.Request(ctx, req)
		if err != nil {
			return nil, err
		}
		return resp.(*kmsg.DescribeACLsResponse), nil
	}
}

// topics checks every topic; "strict" is enforced.
type topics struct{}

func (topics) Check(topic string) (bool, bool) { return topic != "unchecked", topic == "strict" }

// recorder is a Reporter.
type recorder struct {
	mu       sync.Mutex
	missing  []authcheck.Missing
	resolved []string
	counted  []string
}

func (r *recorder) Missing(m authcheck.Missing) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.missing = append(r.missing, m)
}

func (r *recorder) Resolved(topic, principal string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resolved = append(r.resolved, principal+" "+topic)
}

func (r *recorder) count(topic string, refused bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counted = append(r.counted, fmt.Sprintf("%s refused=%v", topic, refused))
}

func (r *recorder) snapshot() (missing []authcheck.Missing, resolved, counted []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(missing, r.missing...), append(resolved, r.resolved...), append(counted, r.counted...)
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.missing, r.resolved, r.counted = nil, nil, nil
}

// produce runs one produce of principal's connection through the filter
// and returns it; each topic has partitions 0 and 1.
func produce(f *authcheck.Factory, principal string, acks int16, ts ...string) (*filter.Exchange, filter.Status) {
	req := kmsg.NewPtrProduceRequest()
	req.Acks = acks
	for _, topic := range ts {
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		for p := range int32(2) {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition = p
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	cid := "app-" + principal
	x := &filter.Exchange{Header: filter.Header{APIKey: 0, APIVersion: 9, ClientID: &cid}, Req: req}
	st := f.New(filter.ConnInfo{Remote: principal}).(filter.RequestFilter).OnRequest(context.Background(), x)
	return x, st
}

// answered lists the parts the filter answered, as "topic/partition=code".
func answered(x *filter.Exchange) []string {
	var out []string
	for _, p := range x.Parts() {
		if p.Answered {
			out = append(out, fmt.Sprintf("%s/%d=%d", p.Topic, p.Partition, p.Code))
		}
	}
	return out
}

// TestCheckAgainstKfake: the filter reads a kfake destination's ACLs with
// the agent's (here admin's) credentials. A cold cache lets a produce
// through unchecked. Then bob, with no WRITE on the destination, is
// reported on "orders" (not enforced: sent on) and refused
// TOPIC_AUTHORIZATION_FAILED on "strict" (enforced), in one request; an
// acks=0 produce refused closes the connection; alice is neither reported
// nor refused. Once bob is granted WRITE on "orders", the next read
// resolves him.
func TestCheckAgainstKfake(t *testing.T) {
	t.Parallel()
	d := destination(t)
	admin := client(t, d, "admin", "admin-secret")
	rec := &recorder{}
	f, err := authcheck.New(authcheck.Config{Topics: topics{}, Describe: describeAs(admin),
		Principal: func(_ context.Context, info filter.ConnInfo) string { return info.Remote },
		Reporter:  rec, Count: rec.count, Refresh: 50 * time.Millisecond, MinRefresh: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}

	x, st := produce(f, "User:bob", -1, "strict")
	if st != filter.Continue || len(answered(x)) > 0 {
		t.Fatalf("cold cache: status %v, answered %v; want the produce through unchecked", st, answered(x))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.Run(ctx)
	wait.For(t, 10*time.Second, "the first read of the ACLs", func() string {
		if !f.Refreshed() {
			return "not read yet"
		}
		return ""
	})

	x, st = produce(f, "User:bob", -1, "orders", "strict")
	want := []string{"strict/0=29", "strict/1=29"}
	if got := answered(x); st != filter.Continue || strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("bob to orders and strict: status %v, answered %v; want strict's parts TOPIC_AUTHORIZATION_FAILED (%d), orders' sent on",
			st, got, kerr.TopicAuthorizationFailed.Code)
	}
	missing, _, counted := rec.snapshot()
	if len(missing) != 2 || missing[0].Topic != "orders" || missing[0].Principal != "User:bob" || missing[0].ClientID != "app-User:bob" ||
		missing[0].Decision != authcheck.NoAllow || !strings.Contains(missing[0].Detail, "--allow-principal User:bob --operation Write --topic orders") {
		t.Fatalf("reported %+v; want bob on orders and strict, naming the ACL to add", missing)
	}
	if strings.Join(counted, ",") != "orders refused=false,strict refused=true" {
		t.Fatalf("counted %v", counted)
	}

	x, st = produce(f, "User:bob", 0, "strict")
	if st != filter.StopIteration || !errors.Is(x.Err, authcheck.ErrRefused) {
		t.Fatalf("acks=0 refused: status %v, err %v; want the connection closed with ErrRefused", st, x.Err)
	}
	if x, st = produce(f, "User:bob", -1, "unchecked"); st != filter.Continue || len(answered(x)) > 0 {
		t.Fatalf("a topic not checked: status %v, answered %v", st, answered(x))
	}

	rec.reset()
	for _, ts := range [][]string{{"orders"}, {"strict"}, {"orders", "strict"}} {
		if x, st := produce(f, "User:alice", -1, ts...); st != filter.Continue || len(answered(x)) > 0 {
			t.Fatalf("alice to %v: status %v, answered %v; want it through", ts, st, answered(x))
		}
	}
	if missing, _, _ := rec.snapshot(); len(missing) > 0 {
		t.Fatalf("alice, allowed, reported: %+v", missing)
	}

	// bob gets WRITE on orders (a PREFIXED ACL): the next read resolves him.
	b := kadm.NewACLs().Allow("User:bob").AllowHosts("*").Topics("ord").ResourcePatternType(kadm.ACLPatternPrefixed).Operations(kadm.OpWrite)
	res, err := kadm.NewClient(admin).CreateACLs(ctx, b)
	if err == nil {
		for _, r := range res {
			err = errors.Join(err, r.Err)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "bob resolved on orders", func() string {
		if _, resolved, _ := rec.snapshot(); strings.Join(resolved, ",") != "User:bob orders" {
			return fmt.Sprintf("resolved %v", resolved)
		}
		return ""
	})
	rec.reset()
	if x, _ := produce(f, "User:bob", -1, "orders"); len(answered(x)) > 0 {
		t.Fatalf("bob to orders after the grant: answered %v", answered(x))
	}
	if missing, _, _ := rec.snapshot(); len(missing) > 0 {
		t.Fatalf("bob on orders reported after the grant: %+v", missing)
	}
}

// TestCannotReadACLs: an agent whose destination principal may not
// describe the cluster says so once at WARN, with what to grant, and
// checks nothing rather than guess.
func TestCannotReadACLs(t *testing.T) {
	t.Parallel()
	d := destination(t)
	var logs testlog.Buffer
	rec := &recorder{}
	var reads atomic.Int32
	describe := describeAs(client(t, d, "carl", "carl-secret"))
	counted := func(ctx context.Context, req *kmsg.DescribeACLsRequest) (*kmsg.DescribeACLsResponse, error) {
		defer reads.Add(1)
		return describe(ctx, req)
	}
	f, err := authcheck.New(authcheck.Config{Topics: topics{}, Describe: counted,
		Principal: func(_ context.Context, info filter.ConnInfo) string { return info.Remote },
		Reporter:  rec, Refresh: 20 * time.Millisecond, MinRefresh: time.Millisecond,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.Run(ctx)
	produce(f, "User:bob", -1, "strict") // the first checked produce asks for the first read
	wait.For(t, 10*time.Second, "the first read", func() string {
		if !f.Refreshed() {
			return "not read yet"
		}
		return ""
	})
	if x, st := produce(f, "User:bob", -1, "strict"); st != filter.Continue || len(answered(x)) > 0 {
		t.Fatalf("ACLs unreadable: status %v, answered %v; want the produce through unchecked", st, answered(x))
	}
	wait.For(t, 10*time.Second, "the WARN", func() string {
		if !strings.Contains(logs.String(), "level=WARN") {
			return "none yet"
		}
		return ""
	})
	n := reads.Load()
	wait.For(t, 10*time.Second, "three more reads, refused too", func() string {
		if got := reads.Load(); got < n+3 {
			return fmt.Sprintf("%d reads", got)
		}
		return ""
	})
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "--operation Describe --cluster") {
		t.Fatalf("%d WARNs, want one naming the grant:\n%s", n, logs.String())
	}
	if missing, _, _ := rec.snapshot(); len(missing) > 0 {
		t.Fatalf("reported while the ACLs cannot be read: %+v", missing)
	}
}
