package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/internal/testlog"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/test/embedded"
	"github.com/baton-kafka/baton/xds"
)

// TestReplicasElectOneLeader: two control-plane processes on one etcd:
// one is elected and serves, the other waits without serving. An agent
// given both addresses produces through PROXY; the leader is killed
// (SIGKILL): the other replica takes over, the agent moves to it, and a
// cutover on the new leader completes with every acked record on the
// destination. `baton controlplane status` shows each step.
func TestReplicasElectOneLeader(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs control plane processes, etcd and kfake clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	etcd, err := controlplane.OpenEmbedded(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = etcd.Close() })
	endpoints := strings.Join(etcd.Endpoints(), ",")
	src, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	dst, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dst.Close)

	grpcAddrs := []string{freeTCPAddr(t), freeTCPAddr(t)}
	replica := func(i int) []string {
		return []string{"--source", src.Bootstrap(), "--destination", dst.Bootstrap(), "--write-guard", "none",
			"--etcd-endpoints", endpoints, "--replica-id", fmt.Sprintf("r%d", i+1), "--leader-ttl", "1s",
			"--grpc", grpcAddrs[i], "--http", "127.0.0.1:0", "--cutover-timeout", "40s"}
	}
	kill1, log1 := startReplica(t, replica(0)...)
	api1 := apiOf(t, "r1", log1)
	_, log2 := startReplica(t, replica(1)...)
	status := func() string {
		out, err := runCLI("controlplane", "status", "--etcd-endpoints", endpoints)
		if err != nil {
			t.Fatalf("controlplane status: %v", err)
		}
		return out
	}
	wait.For(t, time.Minute, "r2 registered, waiting behind r1", func() string {
		if out := status(); !strings.Contains(out, "leader: r1") || !strings.Contains(out, "r2") {
			return out
		}
		return ""
	})
	t.Logf("status with two replicas:\n%s", status())
	if upLine.MatchString(log2.String()) {
		t.Fatalf("r2 serves while r1 leads:\n%s", log2)
	}

	// An agent given both replicas' addresses.
	agentLog := &testlog.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", agentLog)
		}
	})
	target, ropts := controlPlaneTarget(strings.Join(grpcAddrs, ","))
	conn, err := grpc.NewClient(target, append(ropts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	a, err := agent.New(agent.Listen("127.0.0.1:0"), agent.Source(src.Addrs()...), agent.Destination(dst.Addrs()...),
		agent.Logger(slog.New(slog.NewTextHandler(agentLog, nil))), agent.ControlPlane(conn, xds.NodeMeta("pod-1", "team", "app")))
	if err != nil {
		t.Fatal(err)
	}
	actx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan struct{})
	go func() { defer close(agentDone); _ = a.Run(actx) }()
	t.Cleanup(func() { stopAgent(); <-agentDone })
	<-a.Ready()
	if _, err := runCLI("topic", "add", "orders", "--server", api1); err != nil {
		t.Fatal(err)
	}

	prod, err := kgo.NewClient(kgo.SeedBrokers(a.Addr()), kgo.DefaultProduceTopic("orders"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var (
		mu      sync.Mutex
		acked   []string
		lastAck time.Time
		maxGap  time.Duration
		prodErr error
	)
	stopProducing := make(chan struct{})
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; ; i++ {
			select {
			case <-stopProducing:
				return
			case <-time.After(10 * time.Millisecond):
			}
			v := fmt.Sprintf("r%05d", i)
			err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr()
			mu.Lock()
			if err != nil {
				prodErr = err
				mu.Unlock()
				return
			}
			now := time.Now()
			if !lastAck.IsZero() && now.Sub(lastAck) > maxGap {
				maxGap = now.Sub(lastAck)
			}
			acked, lastAck = append(acked, v), now
			mu.Unlock()
		}
	}()
	ackedCount := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	wait.For(t, time.Minute, "records acked through PROXY", func() string {
		if n := ackedCount(); n < 50 {
			return fmt.Sprintf("%d acked", n)
		}
		return ""
	})

	kill1()
	api2 := apiOf(t, "r2", log2)
	before := ackedCount()
	wait.For(t, time.Minute, "records acked after the takeover", func() string {
		if n := ackedCount(); n < before+50 {
			return fmt.Sprintf("%d acked since", n-before)
		}
		return ""
	})
	wait.For(t, 30*time.Second, "status: r2 leads, the agent's lease granted by r2", func() string {
		out, err := runCLI("controlplane", "status", "--etcd-endpoints", endpoints, "--json")
		if err != nil {
			t.Fatal(err)
		}
		var st controlplane.ClusterStatus
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatal(err)
		}
		if st.Leader != "r2" || len(st.Replicas) != 1 || st.Agents["r2"] != 1 {
			return out
		}
		return ""
	})
	t.Logf("status after the leader was killed:\n%s", status())
	wait.For(t, time.Minute, "the new leader starts the cutover", func() string {
		if _, err := runCLI("topic", "migrate", "orders", "--server", api2); err != nil {
			return err.Error() // a gate (the time lag, right after the takeover)
		}
		return ""
	})
	wait.For(t, 2*time.Minute, "orders COMPLETE", func() string {
		out, err := runCLI("topic", "status", "orders", "--server", api2)
		if err != nil || !strings.Contains(out, "COMPLETE") {
			return fmt.Sprint(out, err)
		}
		return ""
	})
	after := ackedCount()
	wait.For(t, time.Minute, "records acked after COMPLETE", func() string {
		if n := ackedCount(); n < after+50 {
			return fmt.Sprintf("%d acked since", n-after)
		}
		return ""
	})
	close(stopProducing)
	<-produced
	mu.Lock()
	defer mu.Unlock()
	if prodErr != nil {
		t.Fatalf("the producer failed: %v", prodErr)
	}
	t.Logf("%d records acked; longest gap between acks %v (leader killed, takeover, cutover)", len(acked), maxGap.Round(time.Millisecond))

	// Every acked record is on the destination.
	cons, err := kgo.NewClient(kgo.SeedBrokers(dst.Addrs()...), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	seen := map[string]bool{}
	wait.For(t, time.Minute, "every acked record on the destination", func() string {
		fctx, fcancel := context.WithTimeout(ctx, 2*time.Second)
		defer fcancel()
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
func startReplica(t *testing.T, args ...string) (kill func(), log *testlog.Buffer) {
	t.Helper()
	log = &testlog.Buffer{}
	cmd := exec.Command(os.Args[0], append([]string{"controlplane"}, args...)...)
	cmd.Env = append(os.Environ(), batonChildEnv+"=1")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	kill = func() { _ = cmd.Process.Kill(); <-exited }
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			kill()
		}
	})
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
	return kill, log
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
