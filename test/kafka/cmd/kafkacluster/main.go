// Command kafkacluster starts, stops and inspects a real Apache Kafka KRaft
// cluster on loopback for hand testing; test/kafka/cluster.sh runs it. It is
// a thin front end over package github.com/baton-kafka/baton/test/kafka, so
// the shell and the Go tests share one implementation.
//
//	kafkacluster up     [--brokers 1|3] [--port FIRST] [--dir DIR] [--partitions N] [--version V] [--heap 512m] [--config key=value]...
//	kafkacluster down   [--dir DIR]
//	kafkacluster status [--dir DIR]
//
// up prints the bootstrap list on stdout once every broker answers Metadata
// and leaves the nodes running (logs in DIR/node-<id>/server.log); down
// stops them (SIGTERM, SIGKILL after a grace) and leaves no java process of
// DIR behind; status lists the nodes and exits 0 only if the cluster is
// ready. DIR defaults to $TMPDIR/baton-kafka.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/baton-kafka/baton/test/kafka"
)

const usage = `usage: cluster.sh up|down|status [flags]

  up      format and start a KRaft cluster, print its bootstrap list
  down    stop the cluster in --dir (no java process of it is left)
  status  describe the cluster in --dir; exit 0 only if every broker answers

flags:
`

type kvFlags [][2]string

func (k *kvFlags) String() string { return fmt.Sprint(*k) }
func (k *kvFlags) Set(s string) error {
	key, val, ok := strings.Cut(s, "=")
	if !ok || key == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	*k = append(*k, [2]string{key, val})
	return nil
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("cluster.sh", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	brokers := fs.Int("brokers", kafka.DefaultBrokers, "number of nodes (combined broker and controller): 1 or 3")
	port := fs.Int("port", 0, "client port of node 1; node i serves clients on port+i-1 and its controller on port+brokers+i-1 (0: free ports)")
	dir := fs.String("dir", filepath.Join(os.TempDir(), "baton-kafka"), "folder for the cluster's state and logs")
	partitions := fs.Int("partitions", kafka.DefaultPartitions, "num.partitions for auto-created topics")
	version := fs.String("version", kafka.DefaultVersion, "Kafka version (jars fetched from Maven Central)")
	heap := fs.String("heap", kafka.DefaultHeap, "JVM -Xmx per node")
	timeout := fs.Duration("timeout", kafka.DefaultStartTimeout, "how long up waits for the cluster")
	var extra kvFlags
	fs.Var(&extra, "config", "extra server.properties key=value for every node (repeatable)")

	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fs.Usage()
		return 2
	}
	cmd := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cluster.sh: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	switch cmd {
	case "up":
		opts := []kafka.Opt{
			kafka.Detached(), kafka.Dir(*dir), kafka.Brokers(*brokers), kafka.FirstPort(*port),
			kafka.Partitions(*partitions), kafka.Version(*version), kafka.Heap(*heap),
		}
		for _, kv := range extra {
			opts = append(opts, kafka.BrokerConfig(kv[0], kv[1]))
		}
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		start := time.Now()
		c, err := kafka.Start(ctx, opts...)
		if err != nil {
			fmt.Fprintf(os.Stderr, "cluster.sh up: %v\n", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "cluster.sh: %d-node Kafka %s cluster %s up in %v; logs in %s/node-*/server.log; stop with: cluster.sh down --dir %s\n",
			len(c.Nodes()), c.Version(), c.ClusterID(), time.Since(start).Round(time.Millisecond), c.Dir(), c.Dir())
		fmt.Println(c.Bootstrap())
		return 0

	case "down":
		c, err := kafka.Open(*dir)
		if errors.Is(err, kafka.ErrNoCluster) {
			pids, perr := kafka.Processes(*dir)
			if perr == nil && len(pids) == 0 {
				fmt.Fprintf(os.Stderr, "cluster.sh down: no cluster in %s\n", *dir)
				return 0
			}
			fmt.Fprintf(os.Stderr, "cluster.sh down: no cluster.json in %s but java processes %v name it; killing them\n", *dir, pids)
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			return 1
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "cluster.sh down: %v\n", err)
			return 1
		}
		start := time.Now()
		if err := c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "cluster.sh down: %v\n", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "cluster.sh: stopped the cluster in %s (%v)\n", c.Dir(), time.Since(start).Round(time.Millisecond))
		return 0

	case "status":
		c, err := kafka.Open(*dir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "cluster.sh status: %v\n", err)
			return 3
		}
		alive := c.Alive()
		fmt.Printf("dir:        %s\nversion:    %s\ncluster id: %s\nbootstrap:  %s\n", c.Dir(), c.Version(), c.ClusterID(), c.Bootstrap())
		for _, nd := range c.Nodes() {
			st := "dead"
			if slices.Contains(alive, nd.ID) {
				st = "running"
			}
			fmt.Printf("node %d:     %s controller 127.0.0.1:%d pid %d %s, log %s\n", nd.ID, nd.Addr(), nd.ControllerPort, nd.PID, st, nd.Log())
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := c.Ready(rctx); err != nil {
			fmt.Printf("ready:      no (%v)\n", err)
			return 1
		}
		fmt.Printf("ready:      yes, Metadata lists all %d brokers\n", len(c.Nodes()))
		return 0

	default:
		fmt.Fprintf(os.Stderr, "cluster.sh: unknown command %q\n", cmd)
		fs.Usage()
		return 2
	}
}
