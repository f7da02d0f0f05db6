package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/replicator"
	"github.com/baton-kafka/baton/replicator/worker"
)

func newReplicatorCmd() *cobra.Command {
	var (
		source, destination, topics, migrating, admin, mapTopic, logLevel string
		controlPlane, workerID                                            string
		cpTLS                                                             tlsFlags
		workers                                                           int
		fetchMax                                                          int32
		sample, groupSync, configSync                                     time.Duration
		srcSASL, dstSASL                                                  securityFlags
	)
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
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			ts := splitList(topics)
			var w *worker.Worker
			switch {
			case controlPlane != "" && (len(ts) > 0 || migrating != ""):
				return errors.New("--topics and --migrating exclude --control-plane: a worker copies what the control plane leases it")
			case controlPlane != "":
				if workerID == "" {
					host, err := os.Hostname()
					if err != nil {
						return fmt.Errorf("--worker-id: none given and no hostname: %w", err)
					}
					workerID = fmt.Sprintf("%s/%d", host, os.Getpid())
				}
				// One connection per replica: only the leader leases, and
				// a follower says so (worker.Replicas moves on).
				var clients []batonv1.ReplicationClient
				for _, addr := range splitList(controlPlane) {
					conn, err := dialControlPlane(addr, &cpTLS)
					if err != nil {
						return err
					}
					defer conn.Close()
					clients = append(clients, batonv1.NewReplicationClient(conn))
				}
				if w, err = worker.New(workerID, worker.Replicas(clients...), log); err != nil {
					return err
				}
			case len(ts) == 0:
				return errors.New("--topics: at least one topic is required (or --control-plane, to copy what it leases)")
			}
			srcOpts, err := srcSASL.opts()
			if err != nil {
				return err
			}
			dstOpts, err := dstSASL.opts()
			if err != nil {
				return err
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			ropts := []replicator.Opt{
				replicator.Source(splitList(source)...), replicator.Destination(splitList(destination)...),
				replicator.Topics(ts...), replicator.Workers(workers), replicator.FetchMaxBytes(fetchMax),
				replicator.SampleInterval(sample), replicator.OffsetMapTopic(mapTopic),
				replicator.GroupSyncInterval(groupSync), replicator.ConfigSyncInterval(configSync),
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
			for _, t := range splitList(migrating) {
				if err := r.SetMigrating(t, true); err != nil {
					return fmt.Errorf("--migrating %s: %w", t, err)
				}
			}
			if admin != "" {
				ln, err := net.Listen("tcp", admin)
				if err != nil {
					return fmt.Errorf("--admin: %w", err)
				}
				mux := http.NewServeMux()
				mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
				srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
				go func() { _ = srv.Serve(ln) }()
				defer func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					defer cancel()
					_ = srv.Shutdown(ctx)
				}()
				log.Info("admin endpoints", "metrics", "http://"+ln.Addr().String()+"/metrics")
			}
			if w == nil {
				return r.Run(cmd.Context())
			}
			w.Copier = r
			log.Info("replicator worker: copying the partitions the control plane leases", "worker", workerID, "control_plane", controlPlane)
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- r.Run(ctx) }()
			werr := w.Run(ctx)
			cancel()
			return errors.Join(werr, <-errc)
		},
	}
	srcSASL.add(cmd.Flags(), "source")
	dstSASL.add(cmd.Flags(), "destination")
	f := cmd.Flags()
	f.StringVar(&source, "source", "", "source cluster bootstrap brokers, comma-separated (required)")
	f.StringVar(&destination, "destination", "", "destination cluster bootstrap brokers, comma-separated (required)")
	f.StringVar(&topics, "topics", "", "topics to replicate, comma-separated (required without --control-plane)")
	f.StringVar(&controlPlane, "control-plane", "", "control plane gRPC address, or every replica's, comma-separated: run as a worker copying the partitions it leases (instead of --topics)")
	f.StringVar(&workerID, "worker-id", "", "with --control-plane: this worker's name, unique among running workers (default: hostname/pid)")
	cpTLS.add(f, "control-plane", "the control plane")
	f.StringVar(&migrating, "migrating", "", "topics to copy first (being cut over), comma-separated")
	f.StringVar(&admin, "admin", "127.0.0.1:9405", "address of /metrics (empty: off)")
	f.StringVar(&mapTopic, "offset-map-topic", replicator.DefaultOffsetMapTopic, "compacted topic on the destination holding offset maps")
	f.IntVar(&workers, "workers", replicator.DefaultWorkers, "partitions copied at once")
	f.Int32Var(&fetchMax, "fetch-max-bytes", replicator.DefaultFetchMaxBytes, "bytes fetched from the source per copy step")
	f.DurationVar(&sample, "sample-interval", replicator.DefaultSampleInterval, "how often source end offsets are sampled (the lag's resolution)")
	f.DurationVar(&groupSync, "group-sync-interval", replicator.DefaultGroupSyncInterval, "how often committed consumer-group offsets are copied to the destination (0: off)")
	f.DurationVar(&configSync, "config-sync-interval", replicator.DefaultConfigSyncInterval, "how often source topic config changes are mirrored to the destination (0: off)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	markAddrs(f, addrDial, "source", "destination", "control-plane")
	markAddrs(f, addrListen, "admin")
	_ = cmd.MarkFlagRequired("source")
	_ = cmd.MarkFlagRequired("destination")
	return cmd
}
