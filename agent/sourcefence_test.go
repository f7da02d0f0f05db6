package agent_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
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
	"github.com/baton-kafka/baton/xds"
)

const (
	fenceLease   = 900 * time.Millisecond
	fenceForward = 300 * time.Millisecond
)

func cpConn(t *testing.T, cp *testControlPlane) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(cp.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// fencedRoute is topic in PROXY, its source fenced at the cutover or not.
// HoldMax is short: a produce held for the lease is answered retriable
// after it (and retried by the client).
func fencedRoute(topic string, fenced bool) *batonv1.TopicRoute {
	return &batonv1.TopicRoute{Topic: topic, State: batonv1.State_STATE_PROXY, HoldMax: durationpb.New(time.Second),
		SourceFenced: fenced}
}

// loseLease stops the control plane granting leases and waits until the
// agent's lease ran out: it was granted by a heartbeat answered before
// now, so it ends before now + the lease (the agent counts from its send).
func loseLease(t *testing.T, cp *testControlPlane) {
	t.Helper()
	cp.grant.Store(false)
	revoked := time.Now()
	wait.For(t, 2*fenceLease, "the agent's lease ran out", func() string {
		if left := fenceLease - time.Since(revoked); left >= 0 {
			return fmt.Sprintf("up to %v left", left)
		}
		return ""
	})
}

// produceUnderLease produces one record once the agent holds its lease.
func produceUnderLease(t *testing.T, cl *kgo.Client, topic string) {
	t.Helper()
	wait.For(t, 15*time.Second, "a produce under the lease", func() string {
		if err := produceOne(cl, topic); err != nil {
			return err.Error()
		}
		return ""
	})
}

// Without a lease, the agent forwards produce for a PROXY topic whose route
// says the source is fenced at the cutover (source_fenced): a control
// plane out of reach stalls none of its producers. Without that promise,
// or with ForwardWithoutLease(false), produce waits for the lease (held,
// then answered retriable) and reaches the source only once it is back.
func TestSourceFencedForwardsWithoutLease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fenced  bool
		opts    []agent.Opt
		forward bool // acked without a lease
	}{
		{"source_fenced", true, nil, true},
		{"source_fenced, ForwardWithoutLease(true)", true, []agent.Opt{agent.ForwardWithoutLease(true)}, true},
		{"not source_fenced", false, nil, false},
		{"source_fenced, ForwardWithoutLease(false)", true, []agent.Opt{agent.ForwardWithoutLease(false)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cp := startTestControlPlane(t, fenceLease, fenceForward)
			cp.grant.Store(true)
			reg := prometheus.NewRegistry()
			f := startFixture(t, nil, append([]agent.Opt{agent.ControlPlane(cpConn(t, cp), xds.NodeMeta("pod-fence", "ns", "wl")),
				agent.Registry(reg)}, tc.opts...)...)
			const topic = "fenced"
			createTopic(t, f.src.Bootstrap(), topic, 1)
			cp.publishRoute(t, 1, fencedRoute(topic, tc.fenced))
			produceUnderLease(t, newClient(t, f.addr), topic)

			loseLease(t, cp)
			before := endSum(t, f.src.Bootstrap(), topic)
			// A producer that starts now (idempotent, franz-go's default)
			// and one already running.
			const n = 20
			timeout := 20 * time.Second
			if !tc.forward {
				timeout = 3 * time.Second
			}
			cl := newClient(t, f.addr, kgo.RecordDeliveryTimeout(timeout))
			res := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				recs := make([]*kgo.Record, n)
				for i := range recs {
					recs[i] = &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "unleased-%d", i)}
				}
				res <- cl.ProduceSync(ctx, recs...).FirstErr()
			}()
			if tc.forward {
				// Forwarded at once: nothing waits for the lease.
				var err error
				var held float64
			watch:
				for {
					held = max(held, gaugeValue(t, reg, "baton_agent_held_requests"))
					select {
					case err = <-res:
						break watch
					case <-time.After(5 * time.Millisecond):
					}
				}
				if err != nil {
					t.Fatalf("produce without a lease to a source_fenced topic: %v, want acks", err)
				}
				if held > 0 {
					t.Errorf("%v requests held for the lease on their way to a source_fenced topic", held)
				}
				if got := endSum(t, f.src.Bootstrap(), topic); got != before+n {
					t.Fatalf("the source holds %d records, want %d", got, before+n)
				}
				return
			}
			wait.For(t, 10*time.Second, "the produce held for the lease", func() string {
				if g := gaugeValue(t, reg, "baton_agent_held_requests"); g < 1 {
					return fmt.Sprintf("held %v", g)
				}
				return ""
			})
			err := <-res
			if err == nil {
				t.Fatal("produce without a lease was acked")
			}
			if !errors.Is(err, kgo.ErrRecordTimeout) {
				t.Errorf("produce without a lease: %v, want the client to time out retrying", err)
			}
			if got := endSum(t, f.src.Bootstrap(), topic); got != before {
				t.Fatalf("%d records reached the source without a lease", got-before)
			}
			cp.grant.Store(true)
			produceUnderLease(t, cl, topic)
		})
	}
}

// fenceableSource is a source with an authorizer the agent reaches as its
// own principal "agent", allowed everything but no superuser (the fence
// binds it): "admin" is the superuser the fence is put up with.
func fenceableSource(t *testing.T, topics ...string) *kfake.Cluster {
	t.Helper()
	all := func(rt kmsg.ACLResourceType, name string) kfake.ACL {
		return kfake.ACL{Resource: rt, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationAll, Allow: true}
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ClusterID("source"), kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", "admin-secret"),
		kfake.User("PLAIN", "agent", "agent-secret", all(kmsg.ACLResourceTypeTopic, "*"), all(kmsg.ACLResourceTypeCluster, "kafka-cluster")),
		kfake.SeedTopics(1, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// fenceACL is the control plane's source fence: DENY WRITE for User:* on
// the literal topic.
func fenceACL(topic string) *kadm.ACLBuilder {
	return kadm.NewACLs().Topics(topic).Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral).
		Deny("User:*").DenyHosts("*")
}

func alterFence(t *testing.T, adm *kadm.Client, topic string, up bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	if up {
		var res kadm.CreateACLsResults
		if res, err = adm.CreateACLs(ctx, fenceACL(topic)); err == nil {
			for _, r := range res {
				err = errors.Join(err, r.Err)
			}
		}
	} else {
		var res kadm.DeleteACLsResults
		if res, err = adm.DeleteACLs(ctx, fenceACL(topic)); err == nil {
			for _, r := range res {
				err = errors.Join(err, r.Err)
			}
		}
	}
	if err != nil {
		t.Fatalf("fence up=%v on %s: %v", up, topic, err)
	}
}

func adminEnd(t *testing.T, adm *kadm.Client, topic string) int64 {
	t.Helper()
	ends, err := adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// The source refusing a produce with TOPIC_AUTHORIZATION_FAILED for a
// topic whose route says source_fenced is the cutover's fence: the agent
// answers it retriable (NOT_LEADER_OR_FOLLOWER), so a franz-go producer
// keeps retrying (and lands its record once the fence is lifted, as after
// a rollback) instead of failing. For a topic without source_fenced, the
// refusal is the producer's own and reaches it as is.
func TestSourceFenceRefusalIsRetriable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		fenced    bool
		noLease   bool
		retriable bool
	}{
		{"source_fenced, under a lease", true, false, true},
		{"source_fenced, without a lease", true, true, true},
		{"not source_fenced", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const topic = "orders"
			src := fenceableSource(t, topic)
			dst, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ClusterID("destination"), kfake.SeedTopics(1, topic))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(dst.Close)
			cp := startTestControlPlane(t, fenceLease, fenceForward)
			cp.grant.Store(true)
			a := quietAgent(t, agent.Source(src.ListenAddrs()...), agent.Destination(dst.ListenAddrs()...),
				agent.SourceSecurity(agent.Security{SASL: plain.Auth{User: "agent", Pass: "agent-secret"}.AsMechanism()}),
				agent.ControlPlane(cpConn(t, cp), xds.NodeMeta("pod-refused", "ns", "wl")), agent.Registry(prometheus.NewRegistry()))
			cp.publishRoute(t, 1, fencedRoute(topic, tc.fenced))
			cl := newClient(t, a.Addr(), kgo.RecordDeliveryTimeout(25*time.Second), kgo.MetadataMinAge(250*time.Millisecond))
			produceUnderLease(t, cl, topic)
			if tc.noLease {
				loseLease(t, cp)
			}

			adm := kadm.NewClient(newClient(t, src.ListenAddrs()[0], kgo.SASL(plain.Auth{User: "admin", Pass: "admin-secret"}.AsMechanism())))
			var refused atomic.Int64 // produce requests the source handled while fenced
			src.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				src.KeepControl()
				refused.Add(1)
				return nil, nil, false
			})
			alterFence(t, adm, topic, true)
			refused.Store(0)

			code := produceOnRawConn(t, a.Addr(), topic, "raw")
			want := kerr.TopicAuthorizationFailed
			if tc.retriable {
				want = kerr.NotLeaderForPartition
			}
			if code != want.Code {
				t.Fatalf("the agent answered a produce the fenced source refused with %v, want %v", kerr.ErrorForCode(code), want)
			}

			start := time.Now()
			res := make(chan error, 1)
			go func() { res <- produceOne(cl, topic) }()
			if !tc.retriable {
				select {
				case err := <-res:
					if !errors.Is(err, kerr.TopicAuthorizationFailed) {
						t.Fatalf("produce refused by the source: %v, want TOPIC_AUTHORIZATION_FAILED", err)
					}
					if d := time.Since(start); d > 10*time.Second {
						t.Errorf("TOPIC_AUTHORIZATION_FAILED took %v: the client retried it", d)
					}
				case <-time.After(20 * time.Second):
					t.Fatal("a produce refused TOPIC_AUTHORIZATION_FAILED by the source got no answer")
				}
				return
			}
			// The client retries against the fence...
			wait.For(t, 15*time.Second, "the client's retries refused by the fence", func() string {
				select {
				case err := <-res:
					t.Fatalf("the produce ended while the source is fenced: %v, want it retried", err)
				default:
				}
				if n := refused.Load(); n < 3 {
					return fmt.Sprintf("%d produce requests refused by the fenced source", n)
				}
				return ""
			})
			// ... and lands once it is lifted (a rolled-back cutover).
			before := adminEnd(t, adm, topic)
			alterFence(t, adm, topic, false)
			select {
			case err := <-res:
				if err != nil {
					t.Fatalf("produce after the fence was lifted: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the produce did not land after the fence was lifted")
			}
			if got := adminEnd(t, adm, topic); got != before+1 {
				t.Errorf("the source holds %d new records, want the retried one", got-before)
			}
		})
	}
}
