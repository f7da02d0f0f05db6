package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/test/etcdcluster"
)

// TestPausedLeaderStepsDown: a leader stopped (SIGSTOP) for longer than
// its session's TTL and the agents' lease, as a frozen VM would, loses the
// election while it sleeps, and the other replica takes over. Woken
// (SIGCONT), the old leader finds its term over, writes nothing and exits
// with status 1 for its supervisor; the agent, whose connection to it
// stayed up, moves to the new leader then. The producer through it never
// fails; its longest gap between acks is logged (the stall from the
// lease's end to the wake: the cost design §13.1 names).
func TestPausedLeaderStepsDown(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs control plane processes, etcd and kfake clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	endpoints := strings.Join(etcdcluster.Start(t, 3).Endpoints(), ",")
	src, dst := kfakePair(t)
	grpcAddrs := []string{freeTCPAddr(t), freeTCPAddr(t)}
	var procs []*controlPlaneProc
	for i, addr := range grpcAddrs {
		procs = append(procs, startReplica(t, "--source", src.Bootstrap(), "--destination", dst.Bootstrap(),
			"--write-guard", "none", "--etcd-endpoints", endpoints, "--replica-id", fmt.Sprintf("r%d", i+1),
			"--leader-ttl", "1s", "--grpc", addr, "--http", "127.0.0.1:0"))
		if i == 0 {
			apiOf(t, "r1", procs[0].log) // r1 leads before r2 campaigns
		}
	}
	api1 := apiOf(t, "r1", procs[0].log) // found at once: r1 is up
	if _, err := runCLI("topic", "add", "orders", "--server", api1); err != nil {
		t.Fatal(err)
	}
	a, _ := startHAAgent(t, ctx, "pod-1", grpcAddrs, src.Addrs(), dst.Addrs())
	p := startHAProducer(t, ctx, a.Addr())
	waitAcked(t, "records acked through PROXY", 50, p)

	p.resetGap()
	if err := procs[0].proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped, ackedAtStop := time.Now(), p.count()
	api2 := apiOf(t, "r2", procs[1].log) // elected while r1 sleeps
	// The agent stays with the stopped r1 (below), so it acks only while
	// the lease r1 last granted holds: how many is the machine's speed,
	// not a property to check.
	t.Logf("r2 serving %v after r1 was stopped; %d records acked since the stop", time.Since(stopped).Round(time.Millisecond),
		p.count()-ackedAtStop)
	// Asleep past the agent's lease too, then woken: the agent's
	// connection to r1 stays up meanwhile (the kernel answers for the
	// stopped process), so the agent stays with it, and its lease runs out.
	time.Sleep(time.Until(stopped.Add(migration.DefaultLease + 2*time.Second)))
	if err := procs[0].proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	woken := time.Now()
	select {
	case <-procs[0].exited:
		t.Logf("r1 exited %v after it was woken", time.Since(woken).Round(time.Millisecond))
	case <-time.After(time.Minute):
		t.Fatalf("r1 woke as a deposed leader and did not exit:\n%s", procs[0].log)
	}
	if !strings.Contains(procs[0].log.String(), "lost the leader election") {
		t.Errorf("r1 exited without saying it lost the election:\n%s", procs[0].log)
	}
	waitAcked(t, "records acked after r1 exited", 50, p)
	t.Logf("the producer's longest gap between acks across the pause of %v: %v", woken.Sub(stopped).Round(time.Millisecond),
		p.gap().Round(time.Millisecond))
	out, err := runCLI("topic", "status", "orders", "--server", api2)
	if err != nil || !strings.Contains(out, "PROXY") {
		t.Errorf("orders after the pause: %v\n%s", err, out)
	}
	acked := p.stop(t)
	t.Logf("%d records acked", len(acked))
}
