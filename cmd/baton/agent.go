package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
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
	fl := &agentFlags{}
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the sidecar agent that producers connect to instead of the cluster",
		Long: `Run the sidecar agent. Producers bootstrap from --listen; the agent presents
itself as a one-broker cluster and routes each topic by its migration state:
to the source (unmanaged, REJECT, PROXY), held or refused with a retriable
error (MIGRATING), or to the destination (COMPLETE).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return fl.run(cmd.Context()) },
	}
	fl.add(cmd)
	cmd.AddCommand(newSCRAMCredentialCmd())
	return cmd
}

// agentFlags are the flags of `baton agent`.
type agentFlags struct {
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
}

// add adds fl to cmd.
func (fl *agentFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&fl.listen, "listen", agent.DefaultListen, "address producers connect to")
	f.StringVar(&fl.advertise, "advertise", "", "host:port named in Metadata (default: the listen address)")
	f.StringVar(&fl.admin, "admin", "127.0.0.1:9404", "address of /metrics, /healthz, /readyz and /routes (empty: off)")
	f.StringVar(&fl.source, "source", "", "source cluster bootstrap brokers, comma-separated (required)")
	f.StringVar(&fl.destination, "destination", "", "destination cluster bootstrap brokers, comma-separated (required)")
	f.StringVar(&fl.routesFile, "routes", "", "static route file (YAML); topics not listed pass through to the source")
	f.Int32Var(&fl.maxFrame, "max-frame-bytes", agent.DefaultMaxFrameBytes, "largest request frame accepted; larger closes the connection")
	f.Int64Var(&fl.connBuffered, "conn-buffered-bytes", 0, "request bytes one connection may have read and not yet answered; reading pauses at the bound, a larger frame closes the connection (default 100 MiB, or --buffered-bytes if lower)")
	f.Int64Var(&fl.buffered, "buffered-bytes", agent.DefaultBuffered, "request bytes all connections together may have read and not yet answered; reading pauses at the bound")
	f.DurationVar(&fl.frameTimeout, "frame-timeout", agent.DefaultFrameTimeout, "a request frame not finished this long after its first byte closes its connection")
	f.DurationVar(&fl.idleTimeout, "idle-timeout", agent.DefaultIdleTimeout, "a connection that sends no request this long is closed")
	f.DurationVar(&fl.forwardDeadline, "forward-deadline", migration.DefaultForwardDeadline, "with --routes: a produce unanswered upstream this long is answered with a retriable error (with --control-plane, the control plane's F is used)")
	f.IntVar(&fl.upstreamConns, "upstream-conns", agent.DefaultUpstreamConns, "connections per upstream broker")
	f.IntVar(&fl.producerIDs, "producer-ids", agent.DefaultProducerIDs, "idempotent producer sessions mapped to destination producer ids at once")
	f.StringVar(&fl.stateDir, "state-dir", "", "a directory of this agent's own that outlives its process (an emptyDir in Kubernetes), where it keeps the destination producer ids it mapped, so that a restart never writes a producer's retry twice (default: none, in memory)")
	f.DurationVar(&fl.producerIDIdle, "producer-id-idle", agent.DefaultProducerIDIdle, "how long a producer id mapping outlives its producer's last batch to the destination")
	fl.cpTLS.add(f, "control-plane", "the control plane")
	f.StringVar(&fl.controlPlane, "control-plane", "", "control plane gRPC address, or every replica's, comma-separated (or one DNS name resolving to each): routes over xDS and a lease (instead of --routes)")
	f.StringVar(&fl.writeRanges, "write-ranges", "auto", "keep the source offset ranges of acked produce for the control plane's bypass detection: auto (with --control-plane), on (also with --routes, to measure the cost) or off")
	f.StringVar(&fl.forwardWithoutLease, "forward-without-lease", "auto", "with --control-plane: auto keeps forwarding produce for REJECT and PROXY topics the control plane fences on the source at their cutover while the agent holds no lease (a control plane out of reach stalls none of their producers); never makes every write to the source wait for the lease")
	f.StringVar(&fl.nodeID, "node-id", "", "this agent's node id at the control plane (default: the hostname)")
	f.StringVar(&fl.namespace, "namespace", "", "node metadata: the workload's namespace, for staged rollout")
	f.StringVar(&fl.workload, "workload", "", "node metadata: the workload's name")
	f.StringVar(&fl.byteCounters, "byte-counters", string(bpf.Auto), "how client connections' bytes are counted: auto (ebpf when it loads, else userspace), userspace, or ebpf (fail if it cannot load)")
	f.StringVar(&fl.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&fl.dstPrincipal, "destination-principal", "", "the principal the destination gives the agent, which the auth check checks for clients without forwarded credentials (default: User:<--destination-sasl-user>, an OAuth token's subject, or User:ANONYMOUS without SASL or a client certificate)")
	f.StringVar(&fl.dstSuperUsers, "destination-super-users", "", "the destination's super.users, comma-separated: the auth check allows them everything (ACLs do not show them)")
	fl.srcSec.add(f, "source")
	fl.dstSec.add(f, "destination")
	fl.clients.add(f, f)
	markAddrs(f, addrDial, "source", "destination", "advertise", "control-plane")
	markAddrs(f, addrListen, "listen", "admin")
	_ = cmd.MarkFlagRequired("source")
	_ = cmd.MarkFlagRequired("destination")
}

// run builds the agent the flags describe and runs it until ctx ends.
func (fl *agentFlags) run(ctx context.Context) error {
	log, err := newLogger(fl.logLevel)
	if err != nil {
		return err
	}
	routeOpts, closeConn, err := fl.routing()
	if err != nil {
		return err
	}
	defer closeConn()
	opts, err := fl.parse(log)
	if err != nil {
		return err
	}
	if fl.dstPrincipal == "" {
		// Known from SASL flags (a user, or an OAuth token's
		// subject); else User:ANONYMOUS without SASL or a client
		// certificate (the agent's default), else unknown.
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fl.dstPrincipal, err = fl.dstSec.principal(pctx)
		cancel()
		if err != nil {
			log.Warn("auth check: the destination principal is unknown; name it (--destination-principal)", "err", err)
		}
	}
	if fl.stateDir == "" {
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
	a, err := agent.New(slices.Concat([]agent.Opt{
		agent.Listen(fl.listen), agent.Advertise(fl.advertise), agent.Admin(fl.admin),
		agent.Source(splitList(fl.source)...), agent.Destination(splitList(fl.destination)...),
		agent.MaxFrameBytes(fl.maxFrame), agent.ForwardDeadline(fl.forwardDeadline),
		agent.ConnBufferedBytes(fl.connBuffered), agent.BufferedBytes(fl.buffered),
		agent.FrameTimeout(fl.frameTimeout), agent.IdleTimeout(fl.idleTimeout),
		agent.UpstreamConns(fl.upstreamConns),
		agent.ProducerIDs(fl.producerIDs), agent.ProducerIDIdle(fl.producerIDIdle), agent.StateDir(fl.stateDir),
		agent.Filters([]filter.Factory{mf}...),
		agent.Logger(log), agent.Registry(reg),
		agent.AuthCheck(agent.AuthCheckConfig{Principal: fl.dstPrincipal, SuperUsers: splitList(fl.dstSuperUsers)}),
	}, opts, routeOpts)...)
	if err != nil {
		return err
	}
	if a.AdminAddr() != "" {
		log.Info("admin endpoints", "metrics", "http://"+a.AdminAddr()+"/metrics", "healthz", "http://"+a.AdminAddr()+"/healthz",
			"readyz", "http://"+a.AdminAddr()+"/readyz")
	}
	return a.Run(ctx)
}

// routing returns where the agent's routes come from: --routes, or the
// control plane of --control-plane over xDS, whose connection the returned
// function closes.
func (fl *agentFlags) routing() ([]agent.Opt, func(), error) {
	var routes []agent.Route
	if fl.routesFile != "" {
		var err error
		if routes, err = agent.LoadRoutes(fl.routesFile); err != nil {
			return nil, nil, fmt.Errorf("--routes %s: %w", fl.routesFile, err)
		}
	}
	opts := []agent.Opt{agent.Routes(agent.NewRouteTable(routes))}
	if fl.controlPlane == "" {
		return opts, func() {}, nil
	}
	if fl.routesFile != "" {
		return nil, nil, errors.New("--routes and --control-plane exclude each other: routes come from one place")
	}
	if fl.nodeID == "" {
		var err error
		if fl.nodeID, err = os.Hostname(); err != nil {
			return nil, nil, fmt.Errorf("--node-id: none given and no hostname: %w", err)
		}
	}
	conn, err := dialControlPlane(fl.controlPlane, &fl.cpTLS)
	if err != nil {
		return nil, nil, err
	}
	opts = append(opts, agent.ControlPlane(conn, xds.NodeMeta(fl.nodeID, fl.namespace, fl.workload)))
	return opts, func() { _ = conn.Close() }, nil
}

// parse reads the flags that take values of their own (byte counters,
// TLS and SASL, write ranges, forwarding without a lease) into the
// agent's options, naming a flag it refuses.
func (fl *agentFlags) parse(log *slog.Logger) ([]agent.Opt, error) {
	counters, err := bpf.ParseMode(fl.byteCounters)
	if err != nil {
		return nil, fmt.Errorf("--byte-counters: %w", err)
	}
	srcSecurity, err := fl.srcSec.agentSecurity()
	if err != nil {
		return nil, err
	}
	dstSecurity, err := fl.dstSec.agentSecurity()
	if err != nil {
		return nil, err
	}
	clientSecurity, err := fl.clients.clientSecurity(fl.listen)
	if err != nil {
		return nil, err
	}
	wr, err := parseWriteRanges(fl.writeRanges)
	if err != nil {
		return nil, err
	}
	var noLease bool
	switch fl.forwardWithoutLease {
	case "auto":
		noLease = true
		if fl.controlPlane != "" {
			log.Info("without a lease, produce for topics whose source is fenced at the cutover keeps flowing to the source " +
				"(--forward-without-lease=auto: the control plane says which, by whether the source has an authorizer)")
		}
	case "never":
		log.Info("without a lease, every write to the source waits for one (--forward-without-lease=never)")
	default:
		return nil, fmt.Errorf(`--forward-without-lease: want "auto" or "never", got %q`, fl.forwardWithoutLease)
	}
	return []agent.Opt{agent.SourceSecurity(srcSecurity), agent.DestinationSecurity(dstSecurity),
		agent.ListenSecurity(clientSecurity), agent.WriteRanges(wr), agent.ForwardWithoutLease(noLease),
		agent.ByteCounters(counters)}, nil
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
