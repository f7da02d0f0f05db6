package agent_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/baton-kafka/baton/agent"
	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/xds"
)

// testControlPlane serves real xDS (package xds) and a Lease service whose
// grants the test switches on and off, and records what agents report.
type testControlPlane struct {
	batonv1.UnimplementedLeaseServer
	xds     *xds.Server
	addr    string
	grant   atomic.Bool
	lease   time.Duration
	forward time.Duration

	mu   sync.Mutex
	last *batonv1.HeartbeatRequest
	// lose, when set (before an agent starts), picks heartbeats to fail
	// Unavailable without recording them: reports lost on their way.
	lose func(*batonv1.HeartbeatRequest) bool
}

func startTestControlPlane(t *testing.T, lease, forward time.Duration) *testControlPlane {
	t.Helper()
	cp := &testControlPlane{xds: xds.NewServer(), lease: lease, forward: forward}
	g := grpc.NewServer()
	cp.xds.Register(g)
	batonv1.RegisterLeaseServer(g, cp)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cp.addr = ln.Addr().String()
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	return cp
}

func (cp *testControlPlane) Heartbeat(_ context.Context, req *batonv1.HeartbeatRequest) (*batonv1.HeartbeatResponse, error) {
	cp.mu.Lock()
	if cp.lose != nil && cp.lose(req) {
		cp.mu.Unlock()
		return nil, status.Error(codes.Unavailable, "test: heartbeat lost")
	}
	cp.last = req
	cp.mu.Unlock()
	now := time.Now()
	resp := &batonv1.HeartbeatResponse{Lease: durationpb.New(cp.lease), ForwardDeadline: durationpb.New(cp.forward)}
	if !cp.grant.Load() {
		resp.Reason = "test: no lease yet"
		return resp, nil
	}
	resp.Granted = true
	resp.GrantedAt, resp.ExpiresAt = timestamppb.New(now), timestamppb.New(now.Add(cp.lease))
	return resp, nil
}

// lastHeartbeat returns the last heartbeat received, nil before the first.
func (cp *testControlPlane) lastHeartbeat() *batonv1.HeartbeatRequest {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.last
}

// reported returns the version and topic drain of the last heartbeat.
func (cp *testControlPlane) reported(topic string) (uint64, *batonv1.TopicDrain) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.last == nil {
		return 0, nil
	}
	for _, d := range cp.last.GetTopics() {
		if d.GetTopic() == topic {
			return cp.last.GetAckedVersion(), d
		}
	}
	return cp.last.GetAckedVersion(), nil
}

// publish pushes topic in state at version and waits until the agent
// reported it applied.
func (cp *testControlPlane) publish(t *testing.T, version uint64, topic string, state batonv1.State) {
	t.Helper()
	cp.publishRoute(t, version, &batonv1.TopicRoute{Topic: topic, State: state, HoldMax: durationpb.New(4 * time.Second)})
}

func (cp *testControlPlane) publishRoute(t *testing.T, version uint64, route *batonv1.TopicRoute) {
	t.Helper()
	topic, state := route.GetTopic(), route.GetState()
	cp.xds.Update(xds.Resources{Version: version, Routes: []*batonv1.TopicRoute{route}})
	wait.For(t, 10*time.Second, fmt.Sprintf("agent applied %v at version %d", state, version), func() string {
		v, _ := cp.reported(topic)
		if v >= version {
			return ""
		}
		return fmt.Sprintf("agent reports version %d", v)
	})
}

func startAgentWithControlPlane(t *testing.T, cp *testControlPlane, reg *prometheus.Registry) *fixture {
	t.Helper()
	conn, err := grpc.NewClient(cp.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return startFixture(t, nil, agent.ControlPlane(conn, xds.NodeMeta("pod-test", "ns", "wl")), agent.Registry(reg))
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func countRecords(t *testing.T, bootstrap, topic string) int64 {
	t.Helper()
	return endSum(t, bootstrap, topic)
}

// A produce that waits for the agent's lease goes where the route says
// when the lease comes, not where it said when the request arrived: the
// control plane may have cut the topic over meanwhile (invariant 4).
func TestProduceWaitingForLeaseFollowsTheRouteWhenSent(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// during runs while the produce waits for the lease; it returns
		// the versions to publish after the lease is granted.
		during []batonv1.State
		after  []batonv1.State
		want   string // "source" or "destination"
	}{
		{"stays in PROXY", nil, nil, "source"},
		{"COMPLETE while waiting", []batonv1.State{batonv1.State_STATE_COMPLETE}, nil, "destination"},
		{"MIGRATING while waiting, COMPLETE after the lease",
			[]batonv1.State{batonv1.State_STATE_MIGRATING}, []batonv1.State{batonv1.State_STATE_COMPLETE}, "destination"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cp := startTestControlPlane(t, 900*time.Millisecond, 300*time.Millisecond)
			reg := prometheus.NewRegistry()
			f := startAgentWithControlPlane(t, cp, reg)
			const topic = "leased"
			createTopic(t, f.src.Bootstrap(), topic, 1)
			createTopic(t, f.dst.Bootstrap(), topic, 1)
			version := uint64(1)
			cp.publish(t, version, topic, batonv1.State_STATE_PROXY)

			cl := newClient(t, f.addr, kgo.DisableIdempotentWrite())
			res := make(chan error, 1)
			go func() {
				res <- cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Value: []byte("v")}).FirstErr()
			}()
			wait.For(t, 10*time.Second, "the produce waits for the lease", func() string {
				g := gaugeValue(t, reg, "baton_agent_held_requests")
				if g > 0 {
					return ""
				}
				return fmt.Sprintf("held %v", g)
			})
			for _, st := range tc.during {
				version++
				cp.publish(t, version, topic, st)
			}
			cp.grant.Store(true)
			for _, st := range tc.after {
				// The request must still be held: nothing reached the source.
				if n := countRecords(t, f.src.Bootstrap(), topic); n != 0 {
					t.Fatalf("the source holds %d records while the topic is MIGRATING", n)
				}
				version++
				cp.publish(t, version, topic, st)
			}
			if err := <-res; err != nil {
				t.Fatalf("produce: %v", err)
			}
			src, dst := countRecords(t, f.src.Bootstrap(), topic), countRecords(t, f.dst.Bootstrap(), topic)
			want := map[string][2]int64{"source": {1, 0}, "destination": {0, 1}}[tc.want]
			if src != want[0] || dst != want[1] {
				t.Fatalf("source holds %d, destination %d; want the record on the %s", src, dst, tc.want)
			}
		})
	}
}

// A produce routed to the source is counted in flight from the moment its
// route was decided, not from when it is written: while the agent looks up
// the partition's leader, a heartbeat must not report the topic drained.
func TestProduceCountedInFlightBeforeItIsSent(t *testing.T) {
	t.Parallel()
	cp := startTestControlPlane(t, 900*time.Millisecond, 300*time.Millisecond)
	cp.grant.Store(true)
	reg := prometheus.NewRegistry()
	f := startAgentWithControlPlane(t, cp, reg)
	const topic = "counted"
	createTopic(t, f.src.Bootstrap(), topic, 1)
	cp.publish(t, 1, topic, batonv1.State_STATE_PROXY)

	// The agent has never looked up this topic's leader: the produce asks
	// the source for metadata, which the test holds.
	kc := f.src.Kfake()
	release := make(chan struct{})
	kc.ControlKey(3, func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.SleepControl(func() { <-release })
		return nil, nil, false
	})
	res := make(chan int16, 1)
	go func() { res <- produceOnRawConn(t, f.addr, topic, "v") }()

	wait.For(t, 10*time.Second, "a heartbeat counts the produce in flight", func() string {
		_, d := cp.reported(topic)
		if d.GetInFlight() == 1 {
			return ""
		}
		return fmt.Sprintf("reported %v", d)
	})
	cp.publish(t, 2, topic, batonv1.State_STATE_MIGRATING)
	wait.For(t, 10*time.Second, "a heartbeat at MIGRATING reports stopped, not drained", func() string {
		v, d := cp.reported(topic)
		if v == 2 && d.GetStoppedForwarding() && d.GetInFlight() == 1 && !d.GetDrained() {
			return ""
		}
		return fmt.Sprintf("version %d: %v", v, d)
	})
	close(release)
	if code := <-res; code != 0 {
		t.Fatalf("produce: %v", kerr.ErrorForCode(code))
	}
	// The drained report carries the end of what the source acked: the
	// control plane waits for the destination to hold it.
	wait.For(t, 10*time.Second, "the topic drained once the source answered, reporting the acked end", func() string {
		_, d := cp.reported(topic)
		if d.GetDrained() && d.GetAckedEnds()[0] == 1 {
			return ""
		}
		return fmt.Sprintf("reported %v", d)
	})
}

// produceOnRawConn writes one Produce v7 of values to topic/0 on a
// connection of its own (no metadata asked first) and returns the
// partition's error code.
func produceOnRawConn(t *testing.T, addr, topic string, values ...string) int16 {
	code, _ := agent.DialRaw(t, addr).Produce(topic, rawBatch(values...))
	return code
}

// Writes other than produce (offset commits, admin requests) reach the
// source only under a lease too: without one the agent holds them, then
// closes the connection (clients retry), and the source never sees them.
func TestNonProduceWritesNeedTheLease(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		write func(ctx context.Context, adm *kadm.Client) error
		// landed says whether the write reached the source; src is a new
		// client each time (kadm answers from its metadata cache).
		landed func(t *testing.T, src *kadm.Client) bool
	}{
		{
			name: "OffsetCommit",
			write: func(ctx context.Context, adm *kadm.Client) error {
				var o kadm.Offsets
				o.Add(kadm.Offset{Topic: "committed", Partition: 0, At: 1, LeaderEpoch: -1})
				r, err := adm.CommitOffsets(ctx, "g", o)
				if err == nil {
					err = r.Error() // the agent answers per partition
				}
				return err
			},
			landed: func(t *testing.T, src *kadm.Client) bool {
				got, err := src.FetchOffsets(context.Background(), "g")
				if errors.Is(err, kerr.GroupIDNotFound) {
					return false
				}
				if err != nil {
					t.Fatal(err)
				}
				_, ok := got.Lookup("committed", 0)
				return ok
			},
		},
		{
			name: "CreateTopics",
			write: func(ctx context.Context, adm *kadm.Client) error {
				r, err := adm.CreateTopic(ctx, 1, 1, nil, "created-by-admin")
				if err == nil {
					err = r.Err
				}
				return err
			},
			landed: func(t *testing.T, src *kadm.Client) bool {
				td, err := src.ListTopics(context.Background(), "created-by-admin")
				if err != nil {
					t.Fatal(err)
				}
				return td.Has("created-by-admin")
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cp := startTestControlPlane(t, 900*time.Millisecond, 300*time.Millisecond)
			f := startAgentWithControlPlane(t, cp, prometheus.NewRegistry())
			createTopic(t, f.src.Bootstrap(), "committed", 1)
			src := func() *kadm.Client { return kadm.NewClient(newClient(t, f.src.Bootstrap())) }
			adm := kadm.NewClient(newClient(t, f.addr, kgo.RequestRetries(0)))

			ctx, cancel := context.WithTimeout(context.Background(), migration.DefaultHoldMax+5*time.Second)
			err := tc.write(ctx, adm)
			cancel()
			if err == nil {
				t.Fatal("a write without a lease succeeded")
			}
			if tc.landed(t, src()) {
				t.Fatalf("the write reached the source without a lease (client saw %v)", err)
			}
			cp.grant.Store(true)
			wait.For(t, 10*time.Second, "the write succeeds under a lease", func() string {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := tc.write(ctx, adm); err != nil {
					return err.Error()
				}
				return ""
			})
			if !tc.landed(t, src()) {
				t.Fatal("the write did not reach the source under a lease")
			}
		})
	}
}

// The agent answers a produce the source has not answered within F, the
// control plane's F (per topic, else from the lease), whatever the agent's
// own option says: the control plane's silent-agent wait counts with it.
func TestForwardDeadlineComesFromTheControlPlane(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		routeF time.Duration // 0: none in the TopicRoute, the lease's F
	}{
		{"F in the TopicRoute", 250 * time.Millisecond},
		{"F from the lease", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cp := startTestControlPlane(t, 900*time.Millisecond, 300*time.Millisecond)
			cp.grant.Store(true)
			conn, err := grpc.NewClient(cp.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			// The agent's own F is an hour: only the control plane's can
			// answer the stalled produce below.
			f := startFixture(t, nil, agent.ControlPlane(conn, xds.NodeMeta("pod-f", "ns", "wl")), agent.ForwardDeadline(time.Hour))
			const topic = "deadline"
			createTopic(t, f.src.Bootstrap(), topic, 1)
			route := &batonv1.TopicRoute{Topic: topic, State: batonv1.State_STATE_PROXY, HoldMax: durationpb.New(4 * time.Second)}
			if tc.routeF > 0 {
				route.ForwardDeadline = durationpb.New(tc.routeF)
			}
			cp.publishRoute(t, 1, route)
			if code := produceOnRawConn(t, f.addr, topic, "warm-up"); code != 0 {
				t.Fatalf("warm-up produce: %v", kerr.ErrorForCode(code))
			}
			kc := f.src.Kfake()
			release := make(chan struct{})
			defer close(release)
			kc.ControlKey(0, func(kmsg.Request) (kmsg.Response, error, bool) {
				kc.SleepControl(func() { <-release })
				return nil, nil, false
			})
			res := make(chan int16, 1)
			go func() { res <- produceOnRawConn(t, f.addr, topic, "stalled") }()
			select {
			case code := <-res:
				if code != kerr.NotLeaderForPartition.Code {
					t.Fatalf("a produce the source never answered got %v, want NOT_LEADER_OR_FOLLOWER", kerr.ErrorForCode(code))
				}
			case <-time.After(30 * time.Second):
				t.Fatal("a produce the source never answered was not answered in 30 s: the agent ignored the control plane's F")
			}
		})
	}
}

// A write held for the lease holds the request pipelined behind it on the
// connection: both are answered in order once the lease's renewal (not the
// hold's end) lets the write on.
func TestHeldWriteKeepsTheConnectionsOrder(t *testing.T) {
	t.Parallel()
	cp := startTestControlPlane(t, 900*time.Millisecond, 300*time.Millisecond)
	reg := prometheus.NewRegistry()
	f := startAgentWithControlPlane(t, cp, reg)
	createTopic(t, f.src.Bootstrap(), "committed", 1)
	c := agent.DialRaw(t, f.addr)

	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version, commit.Group, commit.Generation, commit.RetentionTimeMillis = 2, "g", -1, -1
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "committed",
		Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1}}}}
	meta := kmsg.NewPtrMetadataRequest()
	meta.Version = 9
	meta.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("committed")}}
	for _, req := range []kmsg.Request{commit, meta} {
		if err := c.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(t, 10*time.Second, "the commit held for the lease", func() string {
		if n := gaugeValue(t, reg, "baton_agent_held_requests"); n != 1 {
			return fmt.Sprintf("%v held", n)
		}
		return ""
	})
	cp.grant.Store(true)

	corr, resp, err := c.Receive(commit)
	if err != nil {
		t.Fatal(err)
	}
	if corr != 1 {
		t.Fatalf("first response has correlation id %d, want the commit's (1)", corr)
	}
	if code := resp.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("the commit was answered %v, want it let on under the lease", kerr.ErrorForCode(code))
	}
	if corr, _, err = c.Receive(meta); err != nil {
		t.Fatal(err)
	}
	if corr != 2 {
		t.Fatalf("second response has correlation id %d, want the metadata's (2)", corr)
	}
}

// An agent reports a topic drained as soon as the last produce it
// forwarded to the source settles after MIGRATING, not at its next lease
// renewal: the cutover waits on that report. The lease here is an hour, so
// the next renewal is twenty minutes off and only the report at the settle
// can say drained.
func TestDrainReportedWhenTheLastProduceSettles(t *testing.T) {
	t.Parallel()
	cp := startTestControlPlane(t, time.Hour, 300*time.Millisecond)
	cp.grant.Store(true)
	reg := prometheus.NewRegistry()
	f := startAgentWithControlPlane(t, cp, reg)
	const topic = "settles"
	createTopic(t, f.src.Bootstrap(), topic, 1)
	cp.publish(t, 1, topic, batonv1.State_STATE_PROXY)

	kc := f.src.Kfake()
	release := make(chan struct{})
	kc.ControlKey(0, func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.SleepControl(func() { <-release })
		return nil, nil, false
	})
	res := make(chan int16, 1)
	go func() { res <- produceOnRawConn(t, f.addr, topic, "v") }()
	wait.For(t, 10*time.Second, "the produce in flight at the source", func() string {
		if n := f.agent.InflightForTest(topic); n != 1 {
			return fmt.Sprintf("%d in flight", n)
		}
		return ""
	})
	cp.publish(t, 2, topic, batonv1.State_STATE_MIGRATING)
	if _, d := cp.reported(topic); d.GetDrained() || d.GetInFlight() != 1 {
		t.Fatalf("reported at MIGRATING: %v, want stopped with one in flight", d)
	}
	close(release)
	if code := <-res; !heldProduceAnswer(code) {
		t.Fatalf("produce: %v", kerr.ErrorForCode(code))
	}
	wait.For(t, 10*time.Second, "a report of the topic drained, before any renewal", func() string {
		if _, d := cp.reported(topic); !d.GetDrained() {
			return fmt.Sprintf("reported %v", d)
		}
		return ""
	})
}

// heldProduceAnswer says whether code answers a produce the test held at
// the source past the route's change to MIGRATING: success once released,
// or NOT_LEADER_OR_FOLLOWER if the forward deadline (300 ms in these
// tests) passed first, which the machine's speed decides. Either way the
// request counts in flight until the source answers it: the drain the
// tests wait for comes at that answer.
func heldProduceAnswer(code int16) bool {
	return code == 0 || code == kerr.NotLeaderForPartition.Code
}

// A report the cutover waits on (a route version applied, a topic drained)
// is sent again when the heartbeat carrying it is lost, at the lease
// keeper's backoff, not at the next renewal: the lease here is an hour, so
// that renewal is twenty minutes off. The first heartbeat carrying the
// report fails.
func TestReportResentWhenItsHeartbeatIsLost(t *testing.T) {
	t.Parallel()
	const topic = "resent"
	cases := []struct {
		name    string
		carries func(*batonv1.HeartbeatRequest) bool
	}{
		{"version applied", func(req *batonv1.HeartbeatRequest) bool { return req.GetAckedVersion() == 1 }},
		{"topic drained", func(req *batonv1.HeartbeatRequest) bool {
			for _, d := range req.GetTopics() {
				if d.GetTopic() == topic && d.GetDrained() {
					return true
				}
			}
			return false
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cp := startTestControlPlane(t, time.Hour, 300*time.Millisecond)
			cp.grant.Store(true)
			lost := false // under cp.mu, as lose is called
			cp.mu.Lock()
			cp.lose = func(req *batonv1.HeartbeatRequest) bool {
				if !lost && tc.carries(req) {
					lost = true
					return true
				}
				return false
			}
			cp.mu.Unlock()
			f := startAgentWithControlPlane(t, cp, prometheus.NewRegistry())
			createTopic(t, f.src.Bootstrap(), topic, 1)
			cp.publish(t, 1, topic, batonv1.State_STATE_PROXY)

			kc := f.src.Kfake()
			release := make(chan struct{})
			kc.ControlKey(0, func(kmsg.Request) (kmsg.Response, error, bool) {
				kc.SleepControl(func() { <-release })
				return nil, nil, false
			})
			res := make(chan int16, 1)
			go func() { res <- produceOnRawConn(t, f.addr, topic, "v") }()
			wait.For(t, 10*time.Second, "the produce in flight at the source", func() string {
				if n := f.agent.InflightForTest(topic); n != 1 {
					return fmt.Sprintf("%d in flight", n)
				}
				return ""
			})
			cp.publish(t, 2, topic, batonv1.State_STATE_MIGRATING)
			close(release)
			if code := <-res; !heldProduceAnswer(code) {
				t.Fatalf("produce: %v", kerr.ErrorForCode(code))
			}
			wait.For(t, 10*time.Second, "a report of the topic drained, before any renewal", func() string {
				if _, d := cp.reported(topic); !d.GetDrained() {
					return fmt.Sprintf("reported %v", d)
				}
				return ""
			})
			cp.mu.Lock()
			defer cp.mu.Unlock()
			if !lost {
				t.Fatal("no heartbeat carried the report: the test lost nothing")
			}
		})
	}
}
