package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/internal/keypair"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
	"github.com/baton-kafka/baton/xds"
)

func newControlPlaneCmd() *cobra.Command {
	var (
		source, destination, grpcAddr, httpAddr, dataDir, endpoints, logLevel string
		writeGuard, replPrincipal, apiTokensFile                              string
		sourceFence, replication                                              string
		grpcCert, grpcKey, grpcClientCA, agentIdentities                      string
		httpCert, httpKey, httpClientCA, apiIdentities                        string
		apiInsecure                                                           bool
		lease, forward, timeout, bypassWatch, bypassGrace, forgottenWindow    time.Duration
		txnWindow                                                             time.Duration
		admin, replicaID, leaderLabelKey, leaderLabelPeers                    string
		leaderTTL                                                             time.Duration
		srcSASL, destSASL                                                     securityFlags
	)
	cmd := &cobra.Command{
		Use:   "controlplane",
		Short: "Run the control plane: xDS, leases, cutovers, event log, HTTP API",
		Long: `Run the control plane. It serves TopicRoute and Cluster resources over xDS
(ADS) and the Lease service on --grpc, the HTTP API the CLI speaks on --http,
keeps its state in etcd (embedded in --data-dir unless --etcd-endpoints names
an external cluster), and replicates managed topics from --source to
--destination in process.

On an external etcd, replicas of the control plane elect a leader: each one
started with the same --etcd-endpoints serves xDS and leases on --grpc from
the state it watches in etcd and campaigns; the one elected also runs
cutovers, the HTTP API and replication, and one of the others takes over
within --leader-ttl of it dying. Give agents and replicator workers every
replica's --grpc address. A leader that loses its etcd session writes
nothing more and exits (status 1) for its supervisor to restart it.

The destination write guard keeps everyone but the replicator off a topic on
the destination until its cutover completes. --write-guard=auto (the default)
uses Kafka ACLs when the destination has an authorizer, and nothing when it
answers SECURITY_DISABLED or when the replicator connects without SASL or a
client certificate (User:ANONYMOUS, like every client of a destination
without SASL or mTLS: no ACL tells it from the others), which it warns of;
--write-guard=acl refuses an anonymous replicator. The replicator and the
guard's admin client both use the --destination-sasl-* credentials, whose
principal must be allowed to alter ACLs.

The source fence denies every producer (but superusers) writes to a topic on
the source from its cutover on, with a DENY WRITE ACL for User:* that every
source broker enforces before the cutover reads the source's end offsets; a
rollback lifts it, a completed cutover keeps it (a forgotten producer is
refused instead of writing where nobody reads). With it, agents may keep
forwarding REJECT and PROXY topics to the source while no control plane is
reachable. --source-fence=auto (the default) fences when the source has an
authorizer, with the --source-sasl-* credentials, whose principal must be
allowed to alter and describe ACLs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			if replication != "in-process" && replication != "workers" {
				return fmt.Errorf("--replication: %q is neither in-process nor workers", replication)
			}
			if bypassWatch < 0 {
				return fmt.Errorf("--bypass-watch: %v is negative (0 turns the watch off)", bypassWatch)
			}
			if bypassGrace < 0 {
				return fmt.Errorf("--bypass-grace: %v is negative (0: twice the lease)", bypassGrace)
			}
			if forgottenWindow < 0 {
				return fmt.Errorf("--gate-forgotten-producer-window: %v is negative (0 turns the gate off)", forgottenWindow)
			}
			if txnWindow < 0 {
				return fmt.Errorf("--gate-transactional-producer-window: %v is negative (0 turns the gate off)", txnWindow)
			}
			var tokens []controlplane.APIToken
			if apiTokensFile != "" {
				if tokens, err = controlplane.LoadAPITokens(apiTokensFile); err != nil {
					return fmt.Errorf("--api-tokens-file: %w", err)
				}
			}
			httpTLS, ids, err := httpSecurity(httpCert, httpKey, httpClientCA, apiIdentities)
			if err != nil {
				return err
			}
			if err := httpGuard(log, httpAddr, len(tokens) > 0, len(ids) > 0, httpTLS != nil, apiInsecure); err != nil {
				return err
			}
			grpcCreds, nodeOpts, err := grpcSecurity(grpcCert, grpcKey, grpcClientCA, agentIdentities)
			if err != nil {
				return err
			}
			ll, err := newLeaderLabel(ctx, leaderLabelKey, leaderLabelPeers, endpoints, log)
			if err != nil {
				return err
			}
			var store *controlplane.EtcdStore
			if endpoints != "" {
				store, err = controlplane.OpenEtcd(ctx, splitList(endpoints))
			} else {
				if err := os.MkdirAll(dataDir, 0o700); err != nil {
					return fmt.Errorf("--data-dir: %w", err)
				}
				store, err = controlplane.OpenEmbedded(ctx, dataDir)
			}
			if err != nil {
				return err
			}
			defer store.Close()
			clusters := controlplane.Clusters(&batonv1.Cluster{Name: "source", Bootstrap: splitList(source)},
				&batonv1.Cluster{Name: "destination", Bootstrap: splitList(destination)})
			xs := xds.NewServer(xds.WithLogger(log))
			// With replicas, every one serves xDS and leases from the
			// start: as a follower until elected (its gRPC services switch
			// to the leader's then, on the same connections).
			var (
				lead    *controlplane.Leadership
				g       *grpc.Server
				gln     net.Listener
				leaseSw controlplane.LeaseSwitch
				replSw  controlplane.ReplicationSwitch
			)
			if endpoints != "" {
				if replicaID == "" {
					host, _ := os.Hostname()
					replicaID = host + "/" + grpcAddr
				}
				fol, err := controlplane.NewFollower(ctx, store, append([]controlplane.Opt{controlplane.Logger(log),
					controlplane.ReplicaID(replicaID), controlplane.WithXDS(xs), clusters,
					controlplane.LeaseDuration(lease), controlplane.ForwardDeadline(forward)}, nodeOpts...)...)
				if err != nil {
					return err
				}
				if gln, err = net.Listen("tcp", grpcAddr); err != nil {
					return fmt.Errorf("--grpc: %w", err)
				}
				g = grpc.NewServer(append(fol.ServerOptions(), grpc.Creds(grpcCreds))...)
				xs.Register(g)
				batonv1.RegisterLeaseServer(g, &leaseSw)
				if replication == "workers" {
					batonv1.RegisterReplicationServer(g, &replSw)
				}
				leaseSw.Set(fol)
				go func() { _ = g.Serve(gln) }()
				defer g.Stop()
				fctx, stopFollowing := context.WithCancel(ctx)
				followed := make(chan struct{})
				go func() { defer close(followed); _ = fol.Run(fctx) }()
				log.Info("following: serving xDS and leases from the state in etcd, campaigning for leader",
					"replica", replicaID, "grpc", gln.Addr().String(), "etcd", endpoints)
				lead, err = controlplane.Campaign(ctx, store, controlplane.Replica{ID: replicaID, GRPC: gln.Addr().String(),
					Started: time.Now()}, leaderTTL) // the HTTP API is served once elected
				// No grant of the follower's after this: the leader's
				// start reads them all.
				leaseSw.Set(nil)
				stopFollowing()
				<-followed
				if err != nil && ctx.Err() != nil {
					return nil // stopped while following
				}
				if err != nil {
					return err
				}
				log.Info("elected leader", "replica", replicaID)
				if ll != nil {
					defer ll.stepDown() // also on a start that fails from here on
				}
				defer func() {
					rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
					defer cancel()
					_ = lead.Resign(rctx)
				}()
			}
			sopts, err := srcSASL.opts()
			if err != nil {
				return err
			}
			dopts, err := destSASL.opts()
			if err != nil {
				return err
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			var r *replicator.Replicator
			switch replication {
			case "in-process":
				if r, err = replicator.New(replicator.Source(splitList(source)...), replicator.Registry(reg),
					replicator.Destination(splitList(destination)...), replicator.Logger(log),
					replicator.SourceClientOpts(sopts...), replicator.DestinationClientOpts(dopts...)); err != nil {
					return err
				}
			}
			dcl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(splitList(destination)...)}, dopts...)...)
			if err != nil {
				return err
			}
			defer dcl.Close()
			if replPrincipal, err = replicatorPrincipal(ctx, replPrincipal, writeGuard, &destSASL); err != nil {
				return err
			}
			guard, err := pickGuard(ctx, writeGuard, kadm.NewClient(dcl), replPrincipal)
			if err != nil {
				return err
			}
			if g, ok := guard.(*controlplane.ACLGuard); ok {
				g.Owned = store // what the guard created, so that lifting it removes that and nothing else
			}
			log.Info("destination write guard", "guard", fmt.Sprintf("%T", guard), "replicator_principal", replPrincipal)
			scl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(splitList(source)...)}, sopts...)...)
			if err != nil {
				return err
			}
			defer scl.Close()
			fence, err := pickFence(ctx, sourceFence, scl)
			if err != nil {
				return err
			}
			if f, ok := fence.(*controlplane.ACLFence); ok {
				f.Owned = store.FenceLedger() // what the fence created, so that a rollback removes that and nothing else
				f.Term = leaderTTL            // an ACL change after a longer pause may be a deposed leader's
				log.Info("source fence: a cutover denies writes to its topic on the source (DENY WRITE User:*), and agents " +
					"may forward REJECT and PROXY topics without a lease")
			} else {
				log.Info("source fence: none (the source has no authorizer, or --source-fence=none): agents forward to the " +
					"source only under a lease, and a control plane out of reach stalls producers after one lease")
			}
			var repl controlplane.Replication
			var runRepl func(context.Context)
			if r != nil {
				repl = &controlplane.ReplicatorAdapter{R: r, Source: kadm.NewClient(scl)}
				runRepl = func(ctx context.Context) { _ = r.Run(ctx) }
			} else {
				pool, err := controlplane.NewWorkerPool(kadm.NewClient(scl), lease, forward, takeoverMargin(lead, leaderTTL), log)
				if err != nil {
					return err
				}
				repl, runRepl = pool, pool.Run
				log.Warn("replication by workers (baton replicator --control-plane): bypass detection and the forgotten-producer " +
					"gate read every batch the in-process replicator copies and are off; run --replication=in-process where they matter")
			}
			cp, err := controlplane.New(ctx, append([]controlplane.Opt{controlplane.WithStore(store), controlplane.Logger(log),
				controlplane.WithGuard(guard), controlplane.WithSourceFence(fence),
				controlplane.WithReplication(repl),
				controlplane.APITokens(tokens), controlplane.APIIdentities(ids),
				controlplane.LeaseDuration(lease), controlplane.ForwardDeadline(forward), controlplane.CutoverTimeout(timeout),
				controlplane.BypassWatch(bypassWatch), controlplane.BypassGrace(bypassGrace),
				controlplane.ForgottenProducerWindow(forgottenWindow), controlplane.Registry(reg),
				controlplane.WithTransactions(&controlplane.SourceTransactions{Admin: kadm.NewClient(scl)}),
				controlplane.TransactionalProducerWindow(txnWindow),
				controlplane.ReplicaID(replicaID), controlplane.TakeoverMargin(takeoverMargin(lead, leaderTTL)),
				controlplane.WithXDS(xs), clusters}, nodeOpts...)...)
			if err != nil {
				return err
			}
			if g == nil {
				if gln, err = net.Listen("tcp", grpcAddr); err != nil {
					return fmt.Errorf("--grpc: %w", err)
				}
				g = grpc.NewServer(append(cp.ServerOptions(), grpc.Creds(grpcCreds))...)
				cp.Register(g)
				go func() { _ = g.Serve(gln) }()
			} else {
				leaseSw.Set(cp)
				if w, ok := repl.(batonv1.ReplicationServer); ok {
					replSw.Set(w)
				}
			}
			hln, err := net.Listen("tcp", httpAddr)
			if err != nil {
				return fmt.Errorf("--http: %w", err)
			}
			hs := &http.Server{Handler: cp.Handler(), ReadHeaderTimeout: 5 * time.Second, TLSConfig: httpTLS}
			api := "http://" + hln.Addr().String()
			serve := func() error { return hs.Serve(hln) }
			if httpTLS != nil {
				api = "https://" + hln.Addr().String()
				serve = func() error { return hs.ServeTLS(hln, "", "") } // the certificate is in TLSConfig
			}
			if admin != "" {
				aln, err := net.Listen("tcp", admin)
				if err != nil {
					return fmt.Errorf("--admin: %w", err)
				}
				mux := http.NewServeMux()
				mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
				as := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
				defer as.Close()
				go func() { _ = as.Serve(aln) }()
				log.Info("admin endpoints", "metrics", "http://"+aln.Addr().String()+"/metrics")
			}
			go func() { _ = serve() }()
			// The replicator stops with the term: a replica that lost the
			// election copies nothing more once it knows.
			runCtx, stop := context.WithCancel(ctx)
			defer stop()
			go runRepl(runCtx)
			if lead != nil {
				if err := lead.Serving(ctx, gln.Addr().String(), api); err != nil {
					log.Warn("recording this replica's addresses for `baton controlplane status`", "err", err)
				}
			}
			log.Info("control plane up", "grpc", gln.Addr().String(), "http", api)
			if ll != nil && lead != nil {
				ll.serving(ctx) // only now: the API Service must not route to a replica not serving yet
			}
			lost := make(chan struct{})
			if lead != nil {
				go func() {
					select {
					case <-lead.Lost():
						close(lost)
						stop()
					case <-runCtx.Done():
					}
				}()
			}
			err = cp.Run(runCtx)
			select {
			case <-lost:
				err = errors.New("lost the leader election (the etcd session expired: etcd out of reach, or this process stalled): " +
					"another replica leads now; this one wrote nothing since and exits for its supervisor to restart it as a follower")
			default:
			}
			if ll != nil {
				ll.stepDown() // before the API stops answering
			}
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = hs.Shutdown(sctx)
			g.Stop()
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&source, "source", "", "source cluster bootstrap brokers, comma-separated (required)")
	f.StringVar(&destination, "destination", "", "destination cluster bootstrap brokers, comma-separated (required)")
	f.StringVar(&grpcAddr, "grpc", "127.0.0.1:18000", "address of xDS (ADS) and the Lease service")
	f.StringVar(&httpAddr, "http", "127.0.0.1:18080", "address of the HTTP API")
	f.StringVar(&dataDir, "data-dir", "baton-etcd", "embedded etcd data directory")
	f.StringVar(&replication, "replication", "in-process", "who copies topics: in-process (this process's replicator) or workers (`baton replicator --control-plane` processes, which hold partition leases from this one)")
	f.StringVar(&endpoints, "etcd-endpoints", "", "external etcd endpoints, comma-separated (instead of the embedded one); replicas on one etcd elect a leader")
	f.StringVar(&replicaID, "replica-id", "", "this replica's name in the leader election and `baton controlplane status` (default: hostname/--grpc)")
	f.StringVar(&leaderLabelKey, "leader-label", "", "in a Kubernetes pod (POD_NAME set, its service account allowed to patch pods): label the pod KEY=true while this replica leads, KEY=false otherwise, for a Service that routes the HTTP API to the leader (with --etcd-endpoints)")
	f.StringVar(&leaderLabelPeers, "leader-label-peers", "", "with --leader-label: the other replicas' pods, comma-separated, labelled KEY=false by this replica when elected, before it labels its own pod KEY=true (a stalled former leader must not stay selected)")
	f.DurationVar(&leaderTTL, "leader-ttl", controlplane.DefaultLeaderTTL, "etcd session of a replica: a dead leader is replaced after about this long (whole seconds)")
	f.DurationVar(&lease, "lease", migration.DefaultLease, "agents' lease")
	f.DurationVar(&forward, "forward-deadline", migration.DefaultForwardDeadline, "forward deadline F (below the lease)")
	f.DurationVar(&timeout, "cutover-timeout", controlplane.DefaultCutoverTimeout, "bound of every cutover wait; gate: lag <= timeout/4")
	f.DurationVar(&bypassWatch, "bypass-watch", controlplane.DefaultBypassWatch, "how long after COMPLETE the source's end offsets are watched for writes that bypass the agents (0: off)")
	f.DurationVar(&bypassGrace, "bypass-grace", 0, "how long a batch read from a PROXY topic's source waits for every agent that may have written it to report past it; past it the batch is unattributable, never a bypass (default: twice the lease)")
	f.DurationVar(&forgottenWindow, "gate-forgotten-producer-window", controlplane.DefaultForgottenProducerWindow,
		"the forgotten-producer cutover gate refuses a topic written by a producer that bypassed the agents within this window (0: gate off)")
	f.DurationVar(&txnWindow, "gate-transactional-producer-window", controlplane.DefaultTransactionalProducerWindow,
		"the transactional-producer cutover gate refuses a topic with a transaction open on the source, or written by a transactional producer within this window (0: gate off)")
	f.StringVar(&admin, "admin", "", "address of /metrics, the control plane's and its replicator's, e.g. 127.0.0.1:9406 (default: off)")
	f.StringVar(&apiTokensFile, "api-tokens-file", "", "YAML list of the HTTP API's callers (name, role read-only or operator, sha256 of the token); every request then needs a bearer token")
	f.StringVar(&grpcCert, "grpc-tls-cert", "", "PEM certificate the gRPC port (xDS, leases) serves TLS with (with --grpc-tls-key)")
	f.StringVar(&grpcKey, "grpc-tls-key", "", "PEM key of --grpc-tls-cert")
	f.StringVar(&grpcClientCA, "grpc-client-ca", "", "PEM CA bundle agents' client certificates must chain to (mTLS): an agent then may name only node ids its certificate vouches for")
	f.StringVar(&agentIdentities, "agent-identities", "", "YAML list mapping certificate identities (URI SAN, DNS SAN or CN) to the node ids they may use (with --grpc-client-ca)")
	f.StringVar(&httpCert, "http-tls-cert", "", "PEM certificate the HTTP API serves HTTPS with (with --http-tls-key)")
	f.StringVar(&httpKey, "http-tls-key", "", "PEM key of --http-tls-cert")
	f.StringVar(&httpClientCA, "http-client-ca", "", "PEM CA bundle that verifies the client certificates API callers send (mTLS; with --api-identities)")
	f.StringVar(&apiIdentities, "api-identities", "", "YAML list mapping client certificate identities (URI SAN, DNS SAN or CN, exact or a pattern) to a name and a role, read-only or operator (with --http-client-ca)")
	f.BoolVar(&apiInsecure, "api-insecure", false, "serve the HTTP API without credentials (no --api-tokens-file, no --api-identities) on an address other than loopback")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&writeGuard, "write-guard", "auto", "destination write guard: auto (ACLs if the destination has an authorizer), acl or none")
	f.StringVar(&sourceFence, "source-fence", "auto", "source fence at each cutover: auto (an ACL if the source has an authorizer), acl or none")
	f.StringVar(&replPrincipal, "replicator-principal", "", `the replicator's principal on the destination, exempt from the guard (default: User:<--destination-sasl-user>, with OAUTHBEARER User:<the token's sub claim>, User:ANONYMOUS without SASL or a client certificate, for which --write-guard=auto runs without a guard and warns; with a client certificate it must be named)`)
	srcSASL.add(f, "source")
	destSASL.add(f, "destination")
	markAddrs(f, addrDial, "source", "destination")
	markAddrs(f, addrListen, "grpc", "http", "admin")
	markAddrs(f, addrEtcd, "etcd-endpoints")
	_ = cmd.MarkFlagRequired("source")
	_ = cmd.MarkFlagRequired("destination")
	cmd.AddCommand(newControlPlaneStatusCmd())
	return cmd
}

// pickFence returns the source fence --source-fence names.
func pickFence(ctx context.Context, mode string, cl *kgo.Client) (controlplane.SourceFence, error) {
	switch mode {
	case "none":
		return controlplane.NoFence{}, nil
	case "acl":
		return &controlplane.ACLFence{Client: cl}, nil
	case "auto":
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		f, err := controlplane.DetectFence(dctx, cl)
		if err != nil {
			return nil, fmt.Errorf("--source-fence=auto: %w (use --source-fence=none to run without one)", err)
		}
		return f, nil
	}
	return nil, fmt.Errorf(`--source-fence: want "auto", "acl" or "none", got %q`, mode)
}

// replicatorPrincipal is the replicator's principal on the destination:
// --replicator-principal (flag) if given, else the one the --destination-sasl
// flags authenticate as, else none ("") with a TLS client certificate (the
// broker maps it to a principal, by rules of its own), else User:ANONYMOUS.
// An OAUTHBEARER token that names none (not a JWT, no sub claim) or cannot
// be had fails the start unless the guard, the principal's one user, is
// off.
func replicatorPrincipal(ctx context.Context, flag, writeGuard string, dest *securityFlags) (string, error) {
	if flag != "" {
		return flag, nil
	}
	p, err := dest.principal(ctx)
	if err != nil && writeGuard != "none" {
		return "", fmt.Errorf("--replicator-principal: none given, and %w; name the principal the destination gives the replicator, or run with --write-guard=none", err)
	}
	if p == "" && dest.certFile == "" {
		p = "User:ANONYMOUS" // what Kafka calls a client without SASL or TLS client auth
	}
	return p, nil
}

// pickGuard returns the write guard --write-guard names. Without an
// authorizer on the destination, or with an anonymous replicator (every
// client of a destination without SASL or mTLS is), auto runs without a
// guard, which the control plane warns of; an explicit acl refuses a
// principal it cannot work with.
func pickGuard(ctx context.Context, mode string, adm *kadm.Client, principal string) (controlplane.WriteGuard, error) {
	switch mode {
	case "none":
		return controlplane.NoGuard{Why: "the guard is off (--write-guard=none)",
			Remedy: "Run with --write-guard=auto to have Baton deny such writes where the destination can"}, nil
	case "acl":
		g := &controlplane.ACLGuard{Admin: adm, Replicator: principal}
		if err := g.Validate(); err != nil {
			return nil, fmt.Errorf("--write-guard=acl: --replicator-principal: %w (connect the replicator with --destination-sasl-* "+
				"or a client certificate and name its principal, or use --write-guard=auto, which runs without a guard where "+
				"every client is anonymous and warns)", err)
		}
		return g, nil
	case "auto":
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		g, err := controlplane.DetectGuard(dctx, adm, principal)
		if errors.Is(err, controlplane.ErrGuardPrincipal) {
			return nil, fmt.Errorf("--replicator-principal: %w (or --write-guard=none to run without a guard)", err)
		}
		if err != nil {
			return nil, fmt.Errorf("--write-guard=auto: %w (use --write-guard=none to run without a guard)", err)
		}
		return g, nil
	}
	return nil, fmt.Errorf(`--write-guard: want "auto", "acl" or "none", got %q`, mode)
}

// apiTokenEnv holds the HTTP API token when --token-file is not given.
const apiTokenEnv = "BATON_API_TOKEN"

// apiFlags adds --server, --token-file, --ca-file, --cert-file,
// --key-file and -o to an operator command, and returns the API client
// they describe.
func apiFlags(cmd *cobra.Command, output *string) func() (*controlplane.APIClient, error) {
	var server, tokenFile, caFile, certFile, keyFile string
	f := cmd.PersistentFlags()
	f.StringVar(&server, "server", "http://127.0.0.1:18080", "control plane HTTP API (https:// when it serves --http-tls-cert)")
	f.StringVar(&tokenFile, "token-file", "", "file holding the HTTP API bearer token (default: $"+apiTokenEnv+", if set)")
	f.StringVar(&caFile, "ca-file", "", "PEM CA bundle verifying an https:// --server (default: $"+apiCAEnv+", else the system's roots)")
	f.StringVar(&certFile, "cert-file", "", "PEM client certificate for an https:// --server that maps certificates to callers (default: $"+apiCertEnv+"; with --key-file)")
	f.StringVar(&keyFile, "key-file", "", "PEM key of --cert-file (default: $"+apiKeyEnv+")")
	f.StringVarP(output, "output", "o", "text", "text or json")
	markAddrs(f, addrURL, "server")
	return func() (*controlplane.APIClient, error) {
		token := os.Getenv(apiTokenEnv)
		if tokenFile != "" {
			b, err := os.ReadFile(tokenFile)
			if err != nil {
				return nil, fmt.Errorf("--token-file: %w", err)
			}
			token = strings.TrimSpace(string(b))
		}
		ca, caFlag := fromFlagOrEnv("ca-file", caFile, apiCAEnv)
		cert, certFlag := fromFlagOrEnv("cert-file", certFile, apiCertEnv)
		key, keyFlag := fromFlagOrEnv("key-file", keyFile, apiKeyEnv)
		hc, err := apiHTTPClient(server, ca, cert, key, caFlag || certFlag || keyFlag)
		if err != nil {
			return nil, err
		}
		return &controlplane.APIClient{Base: server, Token: token, HTTP: hc}, nil
	}
}

func checkOutput(o string) error {
	if o != "text" && o != "json" {
		return errors.New(`-o: want "text" or "json"`)
	}
	return nil
}

// loopback reports whether a listen address takes connections from this
// machine only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serverTLS returns the TLS config (TLS 1.2+) of a port served with
// --<port>-tls-cert and --<port>-tls-key, nil without them; with
// --<port>-client-ca it verifies client certificates as auth says. idFlag
// names the flag of the port's identity rules (agent-identities), which
// need the client CA: identities come from verified client certificates.
func serverTLS(port, idFlag, certFile, keyFile, clientCA, identities string, auth tls.ClientAuthType) (*tls.Config, error) {
	p := "--" + port
	if certFile == "" && keyFile == "" {
		switch {
		case idFlag != "" && (clientCA != "" || identities != ""):
			return nil, fmt.Errorf("%s-client-ca and --%s need %s-tls-cert and %s-tls-key", p, idFlag, p, p)
		case clientCA != "":
			return nil, fmt.Errorf("%s-client-ca needs %s-tls-cert and %s-tls-key: client certificates are checked in a TLS handshake", p, p, p)
		}
		return nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("%s-tls-cert and %s-tls-key go together", p, p)
	}
	// Read again at each handshake: a rotated certificate is served
	// without a restart.
	pair, err := keypair.New(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%s-tls-cert/%s-tls-key: %w", p, p, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	pair.ServerConfig(cfg)
	if clientCA == "" {
		if identities != "" {
			return nil, fmt.Errorf("--%s needs %s-client-ca: identities come from verified client certificates", idFlag, p)
		}
		return cfg, nil
	}
	if cfg.ClientCAs, err = readCAFile(p+"-client-ca", clientCA); err != nil {
		return nil, err
	}
	cfg.ClientAuth = auth
	return cfg, nil
}

// grpcSecurity returns the gRPC port's transport credentials (plaintext
// without --grpc-tls-cert) and, with --grpc-client-ca, the node identity
// check. Agents must send a client certificate: it is what a node id is
// checked against.
func grpcSecurity(certFile, keyFile, clientCA, identities string) (credentials.TransportCredentials, []controlplane.Opt, error) {
	cfg, err := serverTLS("grpc", "agent-identities", certFile, keyFile, clientCA, identities, tls.RequireAndVerifyClientCert)
	switch {
	case err != nil:
		return nil, nil, err
	case cfg == nil:
		return insecure.NewCredentials(), nil, nil
	case clientCA == "":
		return credentials.NewTLS(cfg), nil, nil
	}
	var rules []controlplane.NodeRule
	if identities != "" {
		if rules, err = controlplane.LoadNodeRules(identities); err != nil {
			return nil, nil, fmt.Errorf("--agent-identities: %w", err)
		}
	}
	return credentials.NewTLS(cfg), []controlplane.Opt{controlplane.NodeIdentity(rules)}, nil
}

// takeoverMargin is how long a replica that led before this one may still
// have granted leases after this one started: its session's TTL, with an
// election; none for a single control plane.
func takeoverMargin(lead *controlplane.Leadership, ttl time.Duration) time.Duration {
	if lead == nil {
		return 0
	}
	return ttl
}
