package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/bpf"
	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/metrics"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/xds"
)

func newAgentCmd() *cobra.Command {
	var (
		listen, advertise, admin, source, destination, routesFile, logLevel string
		controlPlane, nodeID, namespace, workload, writeRanges              string
		forwardWithoutLease                                                 string
		byteCounters                                                        string
		maxFrame                                                            int32
		connBuffered, buffered                                              int64
		forwardDeadline, producerIDIdle, frameTimeout, idleTimeout          time.Duration
		upstreamConns, producerIDs                                          int
		srcSec, dstSec                                                      securityFlags
		cpTLS                                                               tlsFlags
		clients                                                             listenFlags
		dstPrincipal, dstSuperUsers, stateDir                               string
	)
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the sidecar agent that producers connect to instead of the cluster",
		Long: `Run the sidecar agent. Producers bootstrap from --listen; the agent presents
itself as a one-broker cluster and routes each topic by its migration state:
to the source (unmanaged, REJECT, PROXY), held or refused with a retriable
error (MIGRATING), or to the destination (COMPLETE).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			var routes []agent.Route
			if routesFile != "" {
				if routes, err = agent.LoadRoutes(routesFile); err != nil {
					return fmt.Errorf("--routes %s: %w", routesFile, err)
				}
			}
			var cpOpts []agent.Opt
			if controlPlane != "" {
				if routesFile != "" {
					return errors.New("--routes and --control-plane exclude each other: routes come from one place")
				}
				if nodeID == "" {
					if nodeID, err = os.Hostname(); err != nil {
						return fmt.Errorf("--node-id: none given and no hostname: %w", err)
					}
				}
				conn, err := dialControlPlane(controlPlane, &cpTLS)
				if err != nil {
					return err
				}
				defer conn.Close()
				cpOpts = append(cpOpts, agent.ControlPlane(conn, xds.NodeMeta(nodeID, namespace, workload)))
			}
			counters, err := bpf.ParseMode(byteCounters)
			if err != nil {
				return fmt.Errorf("--byte-counters: %w", err)
			}
			srcSecurity, err := srcSec.agentSecurity()
			if err != nil {
				return err
			}
			dstSecurity, err := dstSec.agentSecurity()
			if err != nil {
				return err
			}
			clientSecurity, err := clients.clientSecurity(listen)
			if err != nil {
				return err
			}
			wr, err := parseWriteRanges(writeRanges)
			if err != nil {
				return err
			}
			var noLease bool
			switch forwardWithoutLease {
			case "auto":
				noLease = true
				if controlPlane != "" {
					log.Info("without a lease, produce for topics whose source is fenced at the cutover keeps flowing to the source " +
						"(--forward-without-lease=auto: the control plane says which, by whether the source has an authorizer)")
				}
			case "never":
				log.Info("without a lease, every write to the source waits for one (--forward-without-lease=never)")
			default:
				return fmt.Errorf(`--forward-without-lease: want "auto" or "never", got %q`, forwardWithoutLease)
			}
			if dstPrincipal == "" {
				// Known from SASL flags (a user, or an OAuth token's
				// subject); else User:ANONYMOUS without SASL or a client
				// certificate (the agent's default), else unknown.
				pctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
				dstPrincipal, err = dstSec.principal(pctx)
				cancel()
				if err != nil {
					log.Warn("auth check: the destination principal is unknown; name it (--destination-principal)", "err", err)
				}
			}
			if stateDir == "" {
				log.Warn("no --state-dir: after a restart of this agent, a producer's retry of a batch it wrote to the destination " +
					"before the restart may be written there twice; give the agent a directory of its own that outlives the process " +
					"(an emptyDir volume in Kubernetes)")
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			mf, err := metrics.New(reg)
			if err != nil {
				return err
			}
			a, err := agent.New(append([]agent.Opt{
				agent.Listen(listen), agent.Advertise(advertise), agent.Admin(admin),
				agent.Source(splitList(source)...), agent.Destination(splitList(destination)...),
				agent.SourceSecurity(srcSecurity), agent.DestinationSecurity(dstSecurity),
				agent.ListenSecurity(clientSecurity),
				agent.Routes(agent.NewRouteTable(routes)),
				agent.MaxFrameBytes(maxFrame), agent.ForwardDeadline(forwardDeadline),
				agent.ConnBufferedBytes(connBuffered), agent.BufferedBytes(buffered),
				agent.FrameTimeout(frameTimeout), agent.IdleTimeout(idleTimeout),
				agent.UpstreamConns(upstreamConns),
				agent.ProducerIDs(producerIDs), agent.ProducerIDIdle(producerIDIdle), agent.StateDir(stateDir), agent.WriteRanges(wr),
				agent.ForwardWithoutLease(noLease),
				agent.ByteCounters(counters),
				agent.Filters([]filter.Factory{mf}...),
				agent.Logger(log), agent.Registry(reg),
				agent.AuthCheck(agent.AuthCheckConfig{Principal: dstPrincipal, SuperUsers: splitList(dstSuperUsers)}),
			}, cpOpts...)...)
			if err != nil {
				return err
			}
			if a.AdminAddr() != "" {
				log.Info("admin endpoints", "metrics", "http://"+a.AdminAddr()+"/metrics", "healthz", "http://"+a.AdminAddr()+"/healthz",
					"readyz", "http://"+a.AdminAddr()+"/readyz")
			}
			return a.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", agent.DefaultListen, "address producers connect to")
	f.StringVar(&advertise, "advertise", "", "host:port named in Metadata (default: the listen address)")
	f.StringVar(&admin, "admin", "127.0.0.1:9404", "address of /metrics, /healthz, /readyz and /routes (empty: off)")
	f.StringVar(&source, "source", "", "source cluster bootstrap brokers, comma-separated (required)")
	f.StringVar(&destination, "destination", "", "destination cluster bootstrap brokers, comma-separated (required)")
	f.StringVar(&routesFile, "routes", "", "static route file (YAML); topics not listed pass through to the source")
	f.Int32Var(&maxFrame, "max-frame-bytes", agent.DefaultMaxFrameBytes, "largest request frame accepted; larger closes the connection")
	f.Int64Var(&connBuffered, "conn-buffered-bytes", 0, "request bytes one connection may have read and not yet answered; reading pauses at the bound, a larger frame closes the connection (default 100 MiB, or --buffered-bytes if lower)")
	f.Int64Var(&buffered, "buffered-bytes", agent.DefaultBuffered, "request bytes all connections together may have read and not yet answered; reading pauses at the bound")
	f.DurationVar(&frameTimeout, "frame-timeout", agent.DefaultFrameTimeout, "a request frame not finished this long after its first byte closes its connection")
	f.DurationVar(&idleTimeout, "idle-timeout", agent.DefaultIdleTimeout, "a connection that sends no request this long is closed")
	f.DurationVar(&forwardDeadline, "forward-deadline", migration.DefaultForwardDeadline, "with --routes: a produce unanswered upstream this long is answered with a retriable error (with --control-plane, the control plane's F is used)")
	f.IntVar(&upstreamConns, "upstream-conns", agent.DefaultUpstreamConns, "connections per upstream broker")
	f.IntVar(&producerIDs, "producer-ids", agent.DefaultProducerIDs, "idempotent producer sessions mapped to destination producer ids at once")
	f.StringVar(&stateDir, "state-dir", "", "a directory of this agent's own that outlives its process (an emptyDir in Kubernetes), where it keeps the destination producer ids it mapped, so that a restart never writes a producer's retry twice (default: none, in memory)")
	f.DurationVar(&producerIDIdle, "producer-id-idle", agent.DefaultProducerIDIdle, "how long a producer id mapping outlives its producer's last batch to the destination")
	cpTLS.add(f, "control-plane", "the control plane")
	f.StringVar(&controlPlane, "control-plane", "", "control plane gRPC address, or every replica's, comma-separated (or one DNS name resolving to each): routes over xDS and a lease (instead of --routes)")
	f.StringVar(&writeRanges, "write-ranges", "auto", "keep the source offset ranges of acked produce for the control plane's bypass detection: auto (with --control-plane), on (also with --routes, to measure the cost) or off")
	f.StringVar(&forwardWithoutLease, "forward-without-lease", "auto", "with --control-plane: auto keeps forwarding produce for REJECT and PROXY topics the control plane fences on the source at their cutover while the agent holds no lease (a control plane out of reach stalls none of their producers); never makes every write to the source wait for the lease")
	f.StringVar(&nodeID, "node-id", "", "this agent's node id at the control plane (default: the hostname)")
	f.StringVar(&namespace, "namespace", "", "node metadata: the workload's namespace, for staged rollout")
	f.StringVar(&workload, "workload", "", "node metadata: the workload's name")
	f.StringVar(&byteCounters, "byte-counters", string(bpf.Auto), "how client connections' bytes are counted: auto (ebpf when it loads, else userspace), userspace, or ebpf (fail if it cannot load)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&dstPrincipal, "destination-principal", "", "the principal the destination gives the agent, which the auth check checks for clients without forwarded credentials (default: User:<--destination-sasl-user>, an OAuth token's subject, or User:ANONYMOUS without SASL or a client certificate)")
	f.StringVar(&dstSuperUsers, "destination-super-users", "", "the destination's super.users, comma-separated: the auth check allows them everything (ACLs do not show them)")
	srcSec.add(f, "source")
	dstSec.add(f, "destination")
	clients.add(f, f)
	cmd.AddCommand(newSCRAMCredentialCmd())
	markAddrs(f, addrDial, "source", "destination", "advertise", "control-plane")
	markAddrs(f, addrListen, "listen", "admin")
	_ = cmd.MarkFlagRequired("source")
	_ = cmd.MarkFlagRequired("destination")
	return cmd
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// parseWriteRanges reads --write-ranges.
func parseWriteRanges(s string) (agent.WriteRangesMode, error) {
	switch s {
	case "auto":
		return agent.WriteRangesAuto, nil
	case "on":
		return agent.WriteRangesOn, nil
	case "off":
		return agent.WriteRangesOff, nil
	}
	return 0, fmt.Errorf(`--write-ranges: want "auto", "on" or "off", got %q`, s)
}

// dialControlPlane connects to the control plane at addrs (one address,
// every replica's comma-separated, or a DNS name resolving to each) with
// the --control-plane-tls-* flags: an agent's and a replicator worker's
// connection.
func dialControlPlane(addrs string, tlsFlags *tlsFlags) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	cfg, err := tlsFlags.tlsConfig()
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		creds = credentials.NewTLS(cfg)
	}
	target, ropts := xds.ReplicasTarget(splitList(addrs))
	conn, err := grpc.NewClient(target, append(ropts, grpc.WithTransportCredentials(creds))...)
	if err != nil {
		return nil, fmt.Errorf("--control-plane %s: %w", addrs, err)
	}
	return conn, nil
}
