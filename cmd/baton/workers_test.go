package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
)

// leasedLine is the control plane's log line for partitions it leased to
// a worker.
var leasedLine = regexp.MustCompile(`msg="partitions leased" .*?worker=(\S+) partitions=(\S+)`)

// TestReplicatorWorkers is the workers' acceptance: two replicator
// workers copy a topic a producer keeps writing; one is killed mid-copy and
// its partitions go to the other within its lease; a third joins and takes
// its share; a cutover stops the copy on the workers; the copy has offset
// parity (`baton verify parity`) and holds every acked record.
func TestReplicatorWorkers(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs control plane and replicator processes and kfake clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var src, dst *embedded.Cluster
	for _, c := range []**embedded.Cluster{&src, &dst} {
		var err error
		if *c, err = embedded.Start(embedded.Brokers(1), embedded.Partitions(6)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup((*c).Close)
	}
	pcl, err := kgo.NewClient(kgo.SeedBrokers(src.Addrs()...), kgo.DefaultProduceTopic("orders"),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	if _, err := kadm.NewClient(pcl).CreateTopic(ctx, 6, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}

	grpcAddr := freeTCPAddr(t)
	api, cpLog := startControlPlane(t, "--source", src.Bootstrap(), "--destination", dst.Bootstrap(), "--write-guard", "none",
		"--replication", "workers", "--grpc", grpcAddr, "--http", "127.0.0.1:0", "--data-dir", t.TempDir())
	if _, err := runCLI("topic", "add", "orders", "--server", api); err != nil {
		t.Fatal(err)
	}

	// A producer writes the source throughout: the copy is always under
	// way, so a worker killed is killed mid-copy.
	var (
		mu    sync.Mutex
		acked []string
	)
	pctx, stopProducing := context.WithCancel(ctx)
	produced := make(chan error, 1)
	go func() {
		for i := 0; pctx.Err() == nil; i++ {
			v := fmt.Sprintf("order-%d", i)
			if err := pcl.ProduceSync(pctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
				if pctx.Err() == nil {
					produced <- err
				}
				break
			}
			mu.Lock()
			acked = append(acked, v)
			mu.Unlock()
		}
		close(produced)
	}()
	nAcked := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }

	startWorker := func(id string) *controlPlaneProc {
		return runBaton(t, "replicator", "--source", src.Bootstrap(), "--destination", dst.Bootstrap(),
			"--control-plane", grpcAddr, "--worker-id", id, "--admin", "", "--log-level", "debug")
	}
	// leased is every partition each worker was leased, from the
	// control plane's log, in order.
	leased := func() map[string][]string {
		out := map[string][]string{}
		for _, m := range leasedLine.FindAllStringSubmatch(cpLog.String(), -1) {
			out[m[1]] = append(out[m[1]], strings.Split(m[2], ",")...)
		}
		return out
	}
	w1 := startWorker("w1")
	startWorker("w2")
	wait.For(t, time.Minute, "both workers leased partitions", func() string {
		if l := leased(); len(l["w1"]) == 0 || len(l["w2"]) == 0 {
			return fmt.Sprintf("leased: %v; control plane log:\n%s", l, cpLog)
		}
		return ""
	})
	dcl, err := kgo.NewClient(kgo.SeedBrokers(dst.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer dcl.Close()
	dadm, sadm := kadm.NewClient(dcl), kadm.NewClient(pcl)
	wait.For(t, time.Minute, "every partition copied in part", func() string {
		ends, err := dadm.ListEndOffsets(ctx, "orders")
		if err != nil {
			return err.Error()
		}
		n := 0
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset > 0 {
				n++
			}
		})
		if n < 6 {
			return fmt.Sprintf("%d of 6 partitions hold records on the destination", n)
		}
		return ""
	})

	before := len(leased()["w2"])
	w1.kill()
	killed := time.Now()
	var moved time.Duration
	wait.For(t, time.Minute, "w1's partitions leased to w2", func() string {
		if l := leased()["w2"]; len(l) == before {
			return "w2 got nothing new yet; control plane log:\n" + cpLog.String()
		}
		moved = time.Since(killed)
		return ""
	})
	out, err := runCLI("workers", "--server", api)
	if err != nil || !strings.Contains(out, "w2") || strings.Contains(out, "w1") {
		t.Errorf("baton workers after w1's kill: %v\n%s", err, out)
	}
	t.Logf("baton workers:\n%s", out)
	t.Logf("w1 killed mid-copy (%d records acked by then): its partitions were leased to w2 %v later (lease %v, flight %v)",
		nAcked(), moved.Round(time.Millisecond), migration.DefaultLease, migration.DefaultForwardDeadline)
	// The protocol's bound is lease + flight + one renewal (lease/3) after
	// w1's last renewal; three times lease + flight leaves a loaded
	// machine's scheduling out of it and still catches a pool that waits
	// for something else.
	if bound := 3 * (migration.DefaultLease + migration.DefaultForwardDeadline); moved > bound {
		t.Errorf("w1's partitions moved %v after its kill, over three times lease + flight (%v)", moved, bound)
	}

	startWorker("w3")
	wait.For(t, time.Minute, "w3 takes its share", func() string {
		if l := leased(); len(l["w3"]) == 0 {
			return fmt.Sprintf("leased: %v; control plane log:\n%s", l, cpLog)
		}
		return ""
	})
	n := nAcked()
	wait.For(t, time.Minute, "more records acked", func() string {
		if nAcked() < n+500 {
			return fmt.Sprintf("%d acked", nAcked())
		}
		return ""
	})
	stopProducing()
	if err := <-produced; err != nil {
		t.Fatalf("producer: %v", err)
	}
	wait.For(t, 2*time.Minute, "the destination caught up", func() string {
		s, err := sadm.ListEndOffsets(ctx, "orders")
		if err != nil {
			return err.Error()
		}
		d, err := dadm.ListEndOffsets(ctx, "orders")
		if err != nil {
			return err.Error()
		}
		behind := ""
		s.Each(func(o kadm.ListedOffset) {
			if e, ok := d.Lookup("orders", o.Partition); !ok || e.Offset != o.Offset {
				behind += fmt.Sprintf(" %d: source %d, destination %d;", o.Partition, o.Offset, e.Offset)
			}
		})
		return behind
	})
	out, err = runCLI("verify", "parity", "--source", src.Bootstrap(), "--destination", dst.Bootstrap(), "--topic", "orders")
	t.Logf("baton verify parity:\n%s", out)
	if err != nil {
		t.Fatalf("verify parity: %v", err)
	}

	// The cutover stops the copy on the workers holding the partitions.
	wait.For(t, time.Minute, "the cutover starts", func() string {
		if _, err := runCLI("topic", "migrate", "orders", "--server", api); err != nil {
			return err.Error()
		}
		return ""
	})
	wait.For(t, 2*time.Minute, "orders COMPLETE", func() string {
		out, err := runCLI("topic", "status", "orders", "--server", api)
		if err != nil || !strings.Contains(out, "COMPLETE") {
			return fmt.Sprint(out, err)
		}
		return ""
	})
	mu.Lock()
	all := append([]string(nil), acked...)
	mu.Unlock()
	t.Logf("%d records acked by the source, leases: %v", len(all), leased())
	checkOnDestination(t, ctx, dst.Addrs(), all)
}

// TestReplicationFlags: the replicator worker's and the control plane's
// replication flags refuse what does not fit, naming the flag.
func TestReplicationFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"replicator", "--source", "127.0.0.1:1", "--destination", "127.0.0.1:2", "--control-plane", "127.0.0.1:3", "--topics", "t"}, "--topics and --migrating exclude --control-plane"},
		{[]string{"replicator", "--source", "127.0.0.1:1", "--destination", "127.0.0.1:2", "--control-plane", "127.0.0.1:3", "--migrating", "t"}, "--topics and --migrating exclude --control-plane"},
		{[]string{"replicator", "--source", "127.0.0.1:1", "--destination", "127.0.0.1:2"}, "--topics: at least one topic is required (or --control-plane"},
		{[]string{"replicator", "--source", "127.0.0.1:1", "--destination", "127.0.0.1:2", "--control-plane", "127.0.0.1"}, "--control-plane"},
		{[]string{"controlplane", "--source", "127.0.0.1:1", "--destination", "127.0.0.1:2", "--replication", "remote", "--data-dir", t.TempDir(), "--write-guard", "none", "--source-fence", "none"}, `--replication: "remote" is neither in-process nor workers`},
	} {
		_, err := runCLI(tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("baton %s: %v, want an error with %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
