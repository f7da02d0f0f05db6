package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/controlplane/replicas"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/testlog"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/test/etcdcluster"
	"github.com/baton-kafka/baton/xds"
)

// TestReplicasElectOneLeader: three control-plane processes on a
// three-member etcd: one is elected and leads, the others follow, serving
// xDS and leases from etcd. Two agents given every replica's address
// produce through PROXY, one attached to a follower, one to the leader.
// The leader is killed (SIGKILL) in PROXY: another replica takes over, the
// leader's agent moves to a live replica, the follower's stays. A cutover is started on the new leader and held
// (a third agent was killed: the cutover waits out its lease); that leader
// is killed too: the last replica rolls the cutover back, and a cutover on
// it completes with every acked record on the destination. `baton
// controlplane status` shows each step.
func TestReplicasElectOneLeader(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs control plane processes, etcd and kfake clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	endpoints := strings.Join(etcdcluster.Start(t, 3).Endpoints(), ",")
	src, dst := kfakePair(t)

	grpcAddrs := []string{freeTCPAddr(t), freeTCPAddr(t), freeTCPAddr(t)}
	type replica struct {
		kill func()
		log  *testlog.Buffer
	}
	procs := map[string]replica{}
	for i := range grpcAddrs {
		id := fmt.Sprintf("r%d", i+1)
		p := startReplica(t, "--source", src.Bootstrap(), "--destination", dst.Bootstrap(), "--write-guard", "none",
			"--etcd-endpoints", endpoints, "--replica-id", id, "--leader-ttl", "1s",
			"--grpc", grpcAddrs[i], "--http", "127.0.0.1:0", "--cutover-timeout", "40s")
		procs[id] = replica{p.kill, p.log}
		if i == 0 {
			apiOf(t, id, p.log) // r1 leads
		}
	}
	status := func() replicas.ClusterStatus {
		out, err := runCLI("controlplane", "status", "--etcd-endpoints", endpoints, "--json")
		if err != nil {
			t.Fatalf("controlplane status: %v", err)
		}
		var st replicas.ClusterStatus
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	leader := func(not ...string) (string, string) {
		var id string
		wait.For(t, time.Minute, "a new leader", func() string {
			st := status()
			if st.Leader == "" || slices.Contains(not, st.Leader) {
				return fmt.Sprintf("%+v", st)
			}
			id = st.Leader
			return ""
		})
		return id, apiOf(t, id, procs[id].log)
	}
	wait.For(t, time.Minute, "three replicas registered, r1 leading", func() string {
		if st := status(); len(st.Replicas) != 3 || st.Leader != "r1" {
			return fmt.Sprintf("%+v", st)
		}
		return ""
	})
	printStatus := func(when string) {
		out, _ := runCLI("controlplane", "status", "--etcd-endpoints", endpoints)
		t.Logf("status %s:\n%s", when, out)
	}
	printStatus("with three replicas")
	for _, id := range []string{"r2", "r3"} {
		if upLine.MatchString(procs[id].log.String()) {
			t.Fatalf("%s serves while r1 leads:\n%s", id, procs[id].log)
		}
	}

	agents := map[string]*agent.Agent{}
	stops := map[string]func(){}
	// pod-1 is attached to a follower (r2 first), the others to the leader.
	for _, node := range []string{"pod-1", "pod-2", "pod-3"} {
		addrs := grpcAddrs
		if node == "pod-1" {
			addrs = []string{grpcAddrs[1], grpcAddrs[2], grpcAddrs[0]}
		}
		agents[node], stops[node] = startHAAgent(t, ctx, node, addrs, src.Addrs(), dst.Addrs())
	}
	_, api1 := leader()
	if _, err := runCLI("topic", "add", "orders", "--server", api1); err != nil {
		t.Fatal(err)
	}
	producers := []*haProducer{startHAProducer(t, ctx, agents["pod-1"].Addr()), startHAProducer(t, ctx, agents["pod-2"].Addr())}
	waitAcked(t, "records acked through PROXY", 50, producers...)

	// The leader killed while the topic is in PROXY.
	for _, p := range producers {
		p.resetGap()
	}
	procs["r1"].kill()
	second, api2 := leader("r1")
	waitAcked(t, "records acked after the takeover", 50, producers...)
	for i, p := range producers {
		t.Logf("producer %d: longest gap between acks across the leader's kill in PROXY: %v", i+1, p.gap().Round(time.Millisecond))
	}
	wait.For(t, 30*time.Second, "status: every agent's lease granted by a live replica", func() string {
		if st := status(); st.Agents["r2"]+st.Agents["r3"] < 3 || len(st.Replicas) != 2 {
			return fmt.Sprintf("%+v", st)
		}
		return ""
	})
	printStatus("after r1 was killed")

	// A cutover on the second leader, held: pod-3 is killed, and the
	// cutover waits out its lease. The second leader is killed meanwhile.
	stops["pod-3"]()
	wait.For(t, time.Minute, second+" starts the cutover", func() string {
		if _, err := runCLI("topic", "migrate", "orders", "--server", api2); err != nil {
			return err.Error() // a gate: the time lag right after the takeover
		}
		return ""
	})
	procs[second].kill()
	third, api3 := leader("r1", second)
	wait.For(t, time.Minute, third+" rolls the cutover back", func() string {
		out, err := runCLI("topic", "status", "orders", "--server", api3)
		if err != nil || !strings.Contains(out, "PROXY") {
			return fmt.Sprint(out, err)
		}
		return ""
	})
	events, err := runCLI("events", "--topic", "orders", "--server", api3)
	if err != nil || !strings.Contains(events, "recovered") {
		t.Errorf("no recovered event after the leader died mid-cutover: %v\n%s", err, events)
	}
	wait.For(t, time.Minute, third+" starts the cutover again", func() string {
		if _, err := runCLI("topic", "migrate", "orders", "--server", api3); err != nil {
			return err.Error()
		}
		return ""
	})
	wait.For(t, 2*time.Minute, "orders COMPLETE", func() string {
		out, err := runCLI("topic", "status", "orders", "--server", api3)
		if err != nil || !strings.Contains(out, "COMPLETE") {
			return fmt.Sprint(out, err)
		}
		return ""
	})
	waitAcked(t, "records acked after COMPLETE", 50, producers...)
	printStatus("after the cutover on " + third)

	for i, p := range producers {
		acked := p.stop(t)
		t.Logf("producer %d: %d records acked", i+1, len(acked))
		checkOnDestination(t, ctx, dst.Addrs(), acked)
	}
}

// startHAAgent runs an agent given every replica's address; stop ends it
// as a kill would (no last heartbeat).
func startHAAgent(t *testing.T, ctx context.Context, node string, replicas, src, dst []string, opts ...agent.Opt) (*agent.Agent, func()) {
	t.Helper()
	return startAgentIn(t, ctx, node, "team", replicas, src, dst, opts...)
}

// startAgentIn is startHAAgent with the node metadata's namespace.
func startAgentIn(t *testing.T, ctx context.Context, node, namespace string, replicas, src, dst []string, opts ...agent.Opt) (*agent.Agent, func()) {
	t.Helper()
	log := &testlog.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log:\n%s", node, log)
		}
	})
	target, ropts := xds.ReplicasTarget(replicas)
	conn, err := grpc.NewClient(target, append(ropts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	a, err := agent.New(append([]agent.Opt{agent.Listen("127.0.0.1:0"), agent.Source(src...), agent.Destination(dst...),
		agent.Logger(slog.New(slog.NewTextHandler(log, nil))), agent.ControlPlane(conn, xds.NodeMeta(node, namespace, "app"))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(actx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	<-a.Ready()
	return a, stop
}

// haProducer produces numbered records every 10 ms until stopped, keeping
// what was acked and the longest gap between two acks.
type haProducer struct {
	cl      *kgo.Client
	mu      sync.Mutex
	acked   []string
	lastAck time.Time
	maxGap  time.Duration
	err     error
	quit    chan struct{}
	done    chan struct{}
}

func startHAProducer(t *testing.T, ctx context.Context, addr string) *haProducer {
	t.Helper()
	return startTopicProducer(t, ctx, addr, "orders")
}

// startTopicProducer is startHAProducer writing topic.
func startTopicProducer(t *testing.T, ctx context.Context, addr, topic string) *haProducer {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	p := &haProducer{cl: cl, quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for i := 0; ; i++ {
			select {
			case <-p.quit:
				return
			case <-time.After(10 * time.Millisecond):
			}
			v := fmt.Sprintf("%s-%05d", addr, i)
			err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr()
			p.mu.Lock()
			if err != nil {
				p.err = err
				p.mu.Unlock()
				return
			}
			now := time.Now()
			if !p.lastAck.IsZero() && now.Sub(p.lastAck) > p.maxGap {
				p.maxGap = now.Sub(p.lastAck)
			}
			p.acked, p.lastAck = append(p.acked, v), now
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *haProducer) count() int { p.mu.Lock(); defer p.mu.Unlock(); return len(p.acked) }

func (p *haProducer) resetGap() { p.mu.Lock(); defer p.mu.Unlock(); p.maxGap = 0 }

func (p *haProducer) gap() time.Duration { p.mu.Lock(); defer p.mu.Unlock(); return p.maxGap }

func (p *haProducer) lastAckAt() time.Time { p.mu.Lock(); defer p.mu.Unlock(); return p.lastAck }

// failed is the error a produce ended the producer with, if one did.
func (p *haProducer) failed() error { p.mu.Lock(); defer p.mu.Unlock(); return p.err }

// stop ends the producer and returns what it got acked; a failed produce
// fails the test.
func (p *haProducer) stop(t *testing.T) []string {
	t.Helper()
	close(p.quit)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		t.Fatalf("a producer failed: %v", p.err)
	}
	return p.acked
}

// waitAcked waits until each producer got n more records acked, failing t
// at once if one failed.
func waitAcked(t *testing.T, what string, n int, producers ...*haProducer) {
	t.Helper()
	var base []int
	for _, p := range producers {
		base = append(base, p.count())
	}
	wait.For(t, 2*time.Minute, what, func() string {
		for i, p := range producers {
			if err := p.failed(); err != nil {
				t.Fatalf("producer %d failed: %v", i+1, err)
			}
			if p.count() < base[i]+n {
				return fmt.Sprintf("producer %d: %d acked since", i+1, p.count()-base[i])
			}
		}
		return ""
	})
}

// kfakePair starts a one-broker kfake source and destination, three
// partitions each, closed when t ends.
func kfakePair(t *testing.T) (src, dst *embedded.Cluster) {
	t.Helper()
	for _, c := range []**embedded.Cluster{&src, &dst} {
		var err error
		if *c, err = embedded.Start(embedded.Brokers(1), embedded.Partitions(3)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup((*c).Close)
	}
	return src, dst
}

// checkOnDestination waits until every acked value is on dst's orders.
func checkOnDestination(t *testing.T, ctx context.Context, dst []string, acked []string) {
	t.Helper()
	checkTopicOn(t, ctx, dst, "orders", acked)
}

// checkTopicOn is checkOnDestination for topic on cluster.
func checkTopicOn(t *testing.T, ctx context.Context, cluster []string, topic string, acked []string) {
	t.Helper()
	cons, err := kgo.NewClient(kgo.SeedBrokers(cluster...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	seen := map[string]bool{}
	wait.For(t, time.Minute, "every acked record of "+topic+" there", func() string {
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		cons.PollFetches(fctx).EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
		missing := 0
		for _, v := range acked {
			if !seen[v] {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Sprintf("%d of %d acked records missing", missing, len(acked))
		}
		return ""
	})
}

// startReplica runs `baton controlplane args...` in a process of its own
// until the test ends, without waiting for it to serve: it may wait in the
// leader election. kill ends it with SIGKILL.
func startReplica(t *testing.T, args ...string) *controlPlaneProc {
	t.Helper()
	p := runControlPlane(t, args...)
	log, exited := p.log, p.exited
	wait.For(t, 2*time.Minute, "the replica to campaign", func() string {
		select {
		case <-exited:
			t.Fatalf("the replica exited:\n%s", log)
		default:
		}
		if !strings.Contains(log.String(), "campaigning for leader") {
			return "not campaigning yet; log:\n" + log.String()
		}
		return ""
	})
	return p
}

// apiOf waits for a replica's "control plane up" line and returns its
// API's URL.
func apiOf(t *testing.T, name string, log *testlog.Buffer) string {
	t.Helper()
	var api string
	wait.For(t, time.Minute, name+" elected and serving", func() string {
		m := upLine.FindStringSubmatch(log.String())
		if m == nil {
			return name + " not up:\n" + log.String()
		}
		api = m[1]
		return ""
	})
	return api
}

// freeTCPAddr returns a loopback address free a moment ago.
func freeTCPAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
