package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/replicator"
	"github.com/baton-kafka/baton/replicator/worker"
)

func newReplicatorCmd() *cobra.Command {
	fl := &replicatorFlags{}
	cmd := &cobra.Command{
		Use:   "replicator",
		Short: "Copy topics from the source to the destination cluster with offset parity",
		Long: `Copy the raw record batches of every partition of --topics from the source
to the destination cluster, keeping offsets (or an exact offset map where the
source has gaps), until interrupted, and copy the committed offsets of the
groups reading them to the destination for groups idle there. The destination
is the checkpoint: a restart resumes from what it holds. Metrics (baton_replicator_*) are served on
--admin at /metrics. A partition whose batch the destination refuses (too
large, not authorized) stops there, reports the error, and is retried with
backoff until the destination accepts it.

With --control-plane it is one worker among several: instead of --topics it
copies the partitions the control plane leases it (the control plane runs
with --replication=workers), renews those leases every lease/3, and stops
writing a partition before its lease ends, so two workers never write one
partition and a dead worker's partitions go to the others within its lease.
See docs/replicator.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return fl.run(cmd.Context()) },
	}
	fl.add(cmd)
	return cmd
}

// replicatorFlags are the flags of `baton replicator`.
type replicatorFlags struct {
	source, destination, topics, migrating, admin, mapTopic, logLevel string
	controlPlane, workerID                                            string
	cpTLS                                                             tlsFlags
	workers                                                           int
	fetchMax                                                          int32
	sample, groupSync, configSync                                     time.Duration
	srcSASL, dstSASL                                                  securityFlags
}

// add adds fl to cmd.
func (fl *replicatorFlags) add(cmd *cobra.Command) {
	fl.srcSASL.add(cmd.Flags(), "source")
	fl.dstSASL.add(cmd.Flags(), "destination")
	f := cmd.Flags()
	f.StringVar(&fl.source, "source", "", "source cluster bootstrap brokers, comma-separated (required)")
	f.StringVar(&fl.destination, "destination", "", "destination cluster bootstrap brokers, comma-separated (required)")
	f.StringVar(&fl.topics, "topics", "", "topics to replicate, comma-separated (required without --control-plane)")
	f.StringVar(&fl.controlPlane, "control-plane", "", "control plane gRPC address, or every replica's, comma-separated: run as a worker copying the partitions it leases (instead of --topics)")
	f.StringVar(&fl.workerID, "worker-id", "", "with --control-plane: this worker's name, unique among running workers (default: hostname/pid)")
	fl.cpTLS.add(f, "control-plane", "the control plane")
	f.StringVar(&fl.migrating, "migrating", "", "topics to copy first (being cut over), comma-separated")
	f.StringVar(&fl.admin, "admin", "127.0.0.1:9405", "address of /metrics (empty: off)")
	f.StringVar(&fl.mapTopic, "offset-map-topic", replicator.DefaultOffsetMapTopic, "compacted topic on the destination holding offset maps")
	f.IntVar(&fl.workers, "workers", replicator.DefaultWorkers, "partitions copied at once")
	f.Int32Var(&fl.fetchMax, "fetch-max-bytes", replicator.DefaultFetchMaxBytes, "bytes fetched from the source per copy step")
	f.DurationVar(&fl.sample, "sample-interval", replicator.DefaultSampleInterval, "how often source end offsets are sampled (the lag's resolution)")
	f.DurationVar(&fl.groupSync, "group-sync-interval", replicator.DefaultGroupSyncInterval, "how often committed consumer-group offsets are copied to the destination (0: off)")
	f.DurationVar(&fl.configSync, "config-sync-interval", replicator.DefaultConfigSyncInterval, "how often source topic config changes are mirrored to the destination (0: off)")
	f.StringVar(&fl.logLevel, "log-level", "info", "debug, info, warn or error")
	markAddrs(f, addrDial, "source", "destination", "control-plane")
	markAddrs(f, addrListen, "admin")
	_ = cmd.MarkFlagRequired("source")
	_ = cmd.MarkFlagRequired("destination")
}

// run builds the replicator the flags describe (a worker of the control
// plane's with --control-plane) and runs it until ctx ends.
func (fl *replicatorFlags) run(ctx context.Context) error {
	log, err := newLogger(fl.logLevel)
	if err != nil {
		return err
	}
	ts := splitList(fl.topics)
	var w *worker.Worker
	switch {
	case fl.controlPlane != "" && (len(ts) > 0 || fl.migrating != ""):
		return errors.New("--topics and --migrating exclude --control-plane: a worker copies what the control plane leases it")
	case fl.controlPlane != "":
		var closeConns func()
		if w, closeConns, err = fl.worker(log); err != nil {
			return err
		}
		defer closeConns()
	case len(ts) == 0:
		return errors.New("--topics: at least one topic is required (or --control-plane, to copy what it leases)")
	}
	srcOpts, err := fl.srcSASL.opts()
	if err != nil {
		return err
	}
	dstOpts, err := fl.dstSASL.opts()
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ropts := []replicator.Opt{
		replicator.Source(splitList(fl.source)...), replicator.Destination(splitList(fl.destination)...),
		replicator.Topics(ts...), replicator.Workers(fl.workers), replicator.FetchMaxBytes(fl.fetchMax),
		replicator.SampleInterval(fl.sample), replicator.OffsetMapTopic(fl.mapTopic),
		replicator.GroupSyncInterval(fl.groupSync), replicator.ConfigSyncInterval(fl.configSync),
		replicator.Logger(log), replicator.Registry(reg),
		replicator.SourceClientOpts(srcOpts...), replicator.DestinationClientOpts(dstOpts...),
	}
	if w != nil {
		ropts = append(ropts, replicator.Leases(w))
	}
	r, err := replicator.New(ropts...)
	if err != nil {
		return err
	}
	for _, t := range splitList(fl.migrating) {
		if err := r.SetMigrating(t, true); err != nil {
			return fmt.Errorf("--migrating %s: %w", t, err)
		}
	}
	if fl.admin != "" {
		stop, err := serveReplicatorMetrics(fl.admin, reg, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	if w == nil {
		return r.Run(ctx)
	}
	w.Copier = r
	log.Info("replicator worker: copying the partitions the control plane leases", "worker", fl.workerID, "control_plane", fl.controlPlane)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	werr := w.Run(ctx)
	cancel()
	return errors.Join(werr, <-errc)
}

// worker returns the worker of --control-plane and --worker-id; the
// returned function closes its connections.
func (fl *replicatorFlags) worker(log *slog.Logger) (*worker.Worker, func(), error) {
	if fl.workerID == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, nil, fmt.Errorf("--worker-id: none given and no hostname: %w", err)
		}
		fl.workerID = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	// One connection per replica: only the leader leases, and a follower
	// says so (worker.Replicas moves on).
	var (
		clients []batonv1.ReplicationClient
		conns   []*grpc.ClientConn
	)
	closeConns := func() {
		for _, c := range slices.Backward(conns) {
			_ = c.Close()
		}
	}
	for _, addr := range splitList(fl.controlPlane) {
		conn, err := dialControlPlane(addr, &fl.cpTLS)
		if err != nil {
			closeConns()
			return nil, nil, err
		}
		conns = append(conns, conn)
		clients = append(clients, batonv1.NewReplicationClient(conn))
	}
	w, err := worker.New(fl.workerID, worker.Replicas(clients...), log)
	if err != nil {
		closeConns()
		return nil, nil, err
	}
	return w, closeConns, nil
}

// serveReplicatorMetrics serves reg at /metrics on addr (--admin) until
// the returned function shuts it down.
func serveReplicatorMetrics(addr string, reg *prometheus.Registry, log *slog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--admin: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("admin endpoints", "metrics", "http://"+ln.Addr().String()+"/metrics")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
