package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/acl"
	"github.com/baton-kafka/baton/controlplane/httpapi"
	"github.com/baton-kafka/baton/controlplane/nodeauth"
	"github.com/baton-kafka/baton/controlplane/replicas"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/controlplane/rollout"
	"github.com/baton-kafka/baton/controlplane/shadow"
	"github.com/baton-kafka/baton/controlplane/txngate"
	"github.com/baton-kafka/baton/internal/keypair"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
	"github.com/baton-kafka/baton/xds"
)

// controlPlaneLong is `baton controlplane --help`.
const controlPlaneLong = `Run the control plane. It serves TopicRoute and Cluster resources over xDS
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
allowed to alter and describe ACLs.`

func newControlPlaneCmd() *cobra.Command {
	fl := &controlPlaneFlags{}
	cmd := &cobra.Command{
		Use:   "controlplane",
		Short: "Run the control plane: xDS, leases, cutovers, event log, HTTP API",
		Long:  controlPlaneLong,
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return fl.run(cmd.Context()) },
	}
	fl.add(cmd)
	cmd.AddCommand(newControlPlaneStatusCmd())
	return cmd
}

// controlPlaneFlags are the flags of `baton controlplane`.
type controlPlaneFlags struct {
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
}

// add adds fl to cmd.
func (fl *controlPlaneFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&fl.source, "source", "", "source cluster bootstrap brokers, comma-separated (required)")
	f.StringVar(&fl.destination, "destination", "", "destination cluster bootstrap brokers, comma-separated (required)")
	f.StringVar(&fl.grpcAddr, "grpc", "127.0.0.1:18000", "address of xDS (ADS) and the Lease service")
	f.StringVar(&fl.httpAddr, "http", "127.0.0.1:18080", "address of the HTTP API")
	f.StringVar(&fl.dataDir, "data-dir", "baton-etcd", "embedded etcd data directory")
	f.StringVar(&fl.replication, "replication", "in-process", "who copies topics: in-process (this process's replicator) or workers (`baton replicator --control-plane` processes, which hold partition leases from this one)")
	f.StringVar(&fl.endpoints, "etcd-endpoints", "", "external etcd endpoints, comma-separated (instead of the embedded one); replicas on one etcd elect a leader")
	f.StringVar(&fl.replicaID, "replica-id", "", "this replica's name in the leader election and `baton controlplane status` (default: hostname/--grpc)")
	f.StringVar(&fl.leaderLabelKey, "leader-label", "", "in a Kubernetes pod (POD_NAME set, its service account allowed to patch pods): label the pod KEY=true while this replica leads, KEY=false otherwise, for a Service that routes the HTTP API to the leader (with --etcd-endpoints)")
	f.StringVar(&fl.leaderLabelPeers, "leader-label-peers", "", "with --leader-label: the other replicas' pods, comma-separated, labelled KEY=false by this replica when elected, before it labels its own pod KEY=true (a stalled former leader must not stay selected)")
	f.DurationVar(&fl.leaderTTL, "leader-ttl", replicas.DefaultLeaderTTL, "etcd session of a replica: a dead leader is replaced after about this long (whole seconds)")
	f.DurationVar(&fl.lease, "lease", migration.DefaultLease, "agents' lease")
	f.DurationVar(&fl.forward, "forward-deadline", migration.DefaultForwardDeadline, "forward deadline F (below the lease)")
	f.DurationVar(&fl.timeout, "cutover-timeout", controlplane.DefaultCutoverTimeout, "bound of every cutover wait; gate: lag <= timeout/4")
	f.DurationVar(&fl.bypassWatch, "bypass-watch", shadow.DefaultBypassWatch, "how long after COMPLETE the source's end offsets are watched for writes that bypass the agents (0: off)")
	f.DurationVar(&fl.bypassGrace, "bypass-grace", 0, "how long a batch read from a PROXY topic's source waits for every agent that may have written it to report past it; past it the batch is unattributable, never a bypass (default: twice the lease)")
	f.DurationVar(&fl.forgottenWindow, "gate-forgotten-producer-window", controlplane.DefaultForgottenProducerWindow,
		"the forgotten-producer cutover gate refuses a topic written by a producer that bypassed the agents within this window (0: gate off)")
	f.DurationVar(&fl.txnWindow, "gate-transactional-producer-window", txngate.DefaultWindow,
		"the transactional-producer cutover gate refuses a topic with a transaction open on the source, or written by a transactional producer within this window (0: gate off)")
	f.StringVar(&fl.admin, "admin", "", "address of /metrics, the control plane's and its replicator's, e.g. 127.0.0.1:9406 (default: off)")
	f.StringVar(&fl.apiTokensFile, "api-tokens-file", "", "YAML list of the HTTP API's callers (name, role read-only or operator, sha256 of the token); every request then needs a bearer token")
	f.StringVar(&fl.grpcCert, "grpc-tls-cert", "", "PEM certificate the gRPC port (xDS, leases) serves TLS with (with --grpc-tls-key)")
	f.StringVar(&fl.grpcKey, "grpc-tls-key", "", "PEM key of --grpc-tls-cert")
	f.StringVar(&fl.grpcClientCA, "grpc-client-ca", "", "PEM CA bundle agents' client certificates must chain to (mTLS): an agent then may name only node ids its certificate vouches for")
	f.StringVar(&fl.agentIdentities, "agent-identities", "", "YAML list mapping certificate identities (URI SAN, DNS SAN or CN) to the node ids they may use (with --grpc-client-ca)")
	f.StringVar(&fl.httpCert, "http-tls-cert", "", "PEM certificate the HTTP API serves HTTPS with (with --http-tls-key)")
	f.StringVar(&fl.httpKey, "http-tls-key", "", "PEM key of --http-tls-cert")
	f.StringVar(&fl.httpClientCA, "http-client-ca", "", "PEM CA bundle that verifies the client certificates API callers send (mTLS; with --api-identities)")
	f.StringVar(&fl.apiIdentities, "api-identities", "", "YAML list mapping client certificate identities (URI SAN, DNS SAN or CN, exact or a pattern) to a name and a role, read-only or operator (with --http-client-ca)")
	f.BoolVar(&fl.apiInsecure, "api-insecure", false, "serve the HTTP API without credentials (no --api-tokens-file, no --api-identities) on an address other than loopback")
	f.StringVar(&fl.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&fl.writeGuard, "write-guard", "auto", "destination write guard: auto (ACLs if the destination has an authorizer), acl or none")
	f.StringVar(&fl.sourceFence, "source-fence", "auto", "source fence at each cutover: auto (an ACL if the source has an authorizer), acl or none")
	f.StringVar(&fl.replPrincipal, "replicator-principal", "", `the replicator's principal on the destination, exempt from the guard (default: User:<--destination-sasl-user>, with OAUTHBEARER User:<the token's sub claim>, User:ANONYMOUS without SASL or a client certificate, for which --write-guard=auto runs without a guard and warns; with a client certificate it must be named)`)
	fl.srcSASL.add(f, "source")
	fl.destSASL.add(f, "destination")
	markAddrs(f, addrDial, "source", "destination")
	markAddrs(f, addrListen, "grpc", "http", "admin")
	markAddrs(f, addrEtcd, "etcd-endpoints")
	_ = cmd.MarkFlagRequired("source")
	_ = cmd.MarkFlagRequired("destination")
}

// run wires a replicas.Lifecycle from the flags and runs it.
func (fl *controlPlaneFlags) run(ctx context.Context) error {
	log, err := newLogger(fl.logLevel)
	if err != nil {
		return err
	}
	if err := fl.check(); err != nil {
		return err
	}
	sec, err := fl.security(log)
	if err != nil {
		return err
	}
	ll, err := newLeaderLabel(ctx, fl.leaderLabelKey, fl.leaderLabelPeers, fl.endpoints, log)
	if err != nil {
		return err
	}
	store, err := fl.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	if fl.endpoints != "" && fl.replicaID == "" {
		host, _ := os.Hostname()
		fl.replicaID = host + "/" + fl.grpcAddr
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	w := &leaderWiring{fl: fl, sec: sec, log: log, store: store, reg: reg, xs: xds.NewServer(xds.WithLogger(log)),
		clusters: controlplane.Clusters(&batonv1.Cluster{Name: "source", Bootstrap: splitList(fl.source)},
			&batonv1.Cluster{Name: "destination", Bootstrap: splitList(fl.destination)})}
	defer w.close()
	lc := &replicas.Lifecycle{Store: store, Elect: fl.endpoints != "", ReplicaID: fl.replicaID, LeaderTTL: fl.leaderTTL,
		Follow: w.followerOpts(), FollowerReplication: fl.replication == "workers",
		GRPC: fl.grpcAddr, GRPCCreds: sec.grpcCreds, HTTP: fl.httpAddr, HTTPTLS: sec.httpTLS,
		Admin: fl.admin, Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), Lead: w.lead, API: w.api, Log: log}
	if ll != nil {
		lc.Marker = ll
	}
	err = lc.Run(ctx)
	if le := (*replicas.ListenError)(nil); errors.As(err, &le) {
		return fmt.Errorf("--%s: %w", le.Port, le.Err)
	}
	return err
}

// check refuses a flag out of range, naming it.
func (fl *controlPlaneFlags) check() error {
	switch {
	case fl.replication != "in-process" && fl.replication != "workers":
		return fmt.Errorf("--replication: %q is neither in-process nor workers", fl.replication)
	case fl.bypassWatch < 0:
		return fmt.Errorf("--bypass-watch: %v is negative (0 turns the watch off)", fl.bypassWatch)
	case fl.bypassGrace < 0:
		return fmt.Errorf("--bypass-grace: %v is negative (0: twice the lease)", fl.bypassGrace)
	case fl.forgottenWindow < 0:
		return fmt.Errorf("--gate-forgotten-producer-window: %v is negative (0 turns the gate off)", fl.forgottenWindow)
	case fl.txnWindow < 0:
		return fmt.Errorf("--gate-transactional-producer-window: %v is negative (0 turns the gate off)", fl.txnWindow)
	}
	return nil
}

// controlPlaneSecurity is who may call the HTTP API and the gRPC port, and
// how they are served.
type controlPlaneSecurity struct {
	tokens    []httpapi.Token
	httpTLS   *tls.Config
	ids       []httpapi.Identity
	grpcCreds credentials.TransportCredentials
	nodeOpts  []controlplane.Opt // the node identity check, with --grpc-client-ca
}

// security reads the API tokens, the API identities and the TLS material
// the flags name, and refuses an HTTP API open to anyone off loopback
// (httpGuard).
func (fl *controlPlaneFlags) security(log *slog.Logger) (controlPlaneSecurity, error) {
	var (
		sec controlPlaneSecurity
		err error
	)
	if fl.apiTokensFile != "" {
		if sec.tokens, err = httpapi.LoadTokens(fl.apiTokensFile); err != nil {
			return sec, fmt.Errorf("--api-tokens-file: %w", err)
		}
	}
	if sec.httpTLS, sec.ids, err = httpSecurity(fl.httpCert, fl.httpKey, fl.httpClientCA, fl.apiIdentities); err != nil {
		return sec, err
	}
	if err := httpGuard(log, fl.httpAddr, len(sec.tokens) > 0, len(sec.ids) > 0, sec.httpTLS != nil, fl.apiInsecure); err != nil {
		return sec, err
	}
	sec.grpcCreds, sec.nodeOpts, err = grpcSecurity(fl.grpcCert, fl.grpcKey, fl.grpcClientCA, fl.agentIdentities)
	return sec, err
}

// openStore opens the external etcd of --etcd-endpoints, else the embedded
// one in --data-dir.
func (fl *controlPlaneFlags) openStore(ctx context.Context) (*controlplane.EtcdStore, error) {
	if fl.endpoints != "" {
		return controlplane.OpenEtcd(ctx, splitList(fl.endpoints))
	}
	if err := os.MkdirAll(fl.dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	return controlplane.OpenEmbedded(ctx, fl.dataDir)
}

// leaderWiring builds a replica's term as leader (lead) from the flags:
// the Kafka clients, the guard, the fence, replication and the control
// plane; the follower's options (followerOpts) match the leader's.
type leaderWiring struct {
	fl       *controlPlaneFlags
	sec      controlPlaneSecurity
	log      *slog.Logger
	store    *controlplane.EtcdStore
	reg      *prometheus.Registry
	xs       *xds.Server // the follower's and then the leader's, on the same gRPC connections
	clusters controlplane.Opt
	closers  []func() // the term's Kafka clients, closed when the process stops

	// mu guards rollout: lead builds a term's rollout, and api serves
	// it with the term's control plane (controlplane.Lifecycle).
	mu      sync.Mutex
	rollout termRollout
}

// close closes the Kafka clients lead opened.
func (w *leaderWiring) close() {
	for _, c := range slices.Backward(w.closers) {
		c()
	}
}

// followerOpts are NewFollower's options, the ones of New's that matter to
// a follower with the same values.
func (w *leaderWiring) followerOpts() []controlplane.Opt {
	return append([]controlplane.Opt{controlplane.Logger(w.log), controlplane.ReplicaID(w.fl.replicaID),
		controlplane.WithXDS(w.xs), w.clusters, controlplane.LeaseDuration(w.fl.lease),
		controlplane.ForwardDeadline(w.fl.forward)}, w.sec.nodeOpts...)
}

// lead builds the term's control plane (replicas.Lifecycle's Lead).
func (w *leaderWiring) lead(ctx context.Context, margin time.Duration) (*replicas.Term, error) {
	fl := w.fl
	sopts, err := fl.srcSASL.opts()
	if err != nil {
		return nil, err
	}
	dopts, err := fl.destSASL.opts()
	if err != nil {
		return nil, err
	}
	var r *replicator.Replicator
	switch fl.replication {
	case "in-process":
		if r, err = replicator.New(replicator.Source(splitList(fl.source)...), replicator.Registry(w.reg),
			replicator.Destination(splitList(fl.destination)...), replicator.Logger(w.log),
			replicator.SourceClientOpts(sopts...), replicator.DestinationClientOpts(dopts...)); err != nil {
			return nil, err
		}
	}
	dcl, err := w.client(fl.destination, dopts)
	if err != nil {
		return nil, err
	}
	guard, err := w.destinationGuard(ctx, dcl)
	if err != nil {
		return nil, err
	}
	scl, err := w.client(fl.source, sopts)
	if err != nil {
		return nil, err
	}
	fence, err := w.sourceFence(ctx, scl)
	if err != nil {
		return nil, err
	}
	repl, replicate, err := w.replication(r, scl, margin)
	if err != nil {
		return nil, err
	}
	writers := &rollout.Writers{}
	cp, err := controlplane.New(ctx, append([]controlplane.Opt{controlplane.WithStore(w.store), controlplane.Logger(w.log),
		controlplane.WithGuard(guard), controlplane.WithSourceFence(fence), controlplane.ObserveReports(writers),
		controlplane.WithReplication(repl),
		controlplane.LeaseDuration(fl.lease), controlplane.ForwardDeadline(fl.forward), controlplane.CutoverTimeout(fl.timeout),
		controlplane.BypassWatch(fl.bypassWatch), controlplane.BypassGrace(fl.bypassGrace),
		controlplane.ForgottenProducerWindow(fl.forgottenWindow), controlplane.Registry(w.reg),
		controlplane.WithTransactions(&txngate.Source{Admin: kadm.NewClient(scl)}),
		controlplane.TransactionalProducerWindow(fl.txnWindow),
		controlplane.ReplicaID(fl.replicaID), controlplane.TakeoverMargin(margin),
		controlplane.WithRecords(replicas.NewRecords(w.store, w.log)),
		controlplane.WithXDS(w.xs), w.clusters}, w.sec.nodeOpts...)...)
	if err != nil {
		return nil, err
	}
	ro, err := rollout.New(rollout.PlaneOf(cp), writers, rollout.ForgottenProducerWindow(fl.forgottenWindow))
	if err != nil {
		cp.Close()
		return nil, err
	}
	w.mu.Lock()
	w.rollout = termRollout{cp: cp, job: ro}
	w.mu.Unlock()
	term := &replicas.Term{CP: cp, Replicate: replicate}
	if ws, ok := repl.(batonv1.ReplicationServer); ok {
		term.Workers = ws
	}
	return term, nil
}

// termRollout is the rollout of a term's control plane.
type termRollout struct {
	cp  *controlplane.ControlPlane
	job *rollout.Job
}

// api is the HTTP API of a term's control plane, with the callers the
// flags name, and its rollout: the one lead built with it.
func (w *leaderWiring) api(cp *controlplane.ControlPlane) http.Handler {
	opts := []httpapi.Opt{httpapi.Tokens(w.sec.tokens), httpapi.Identities(w.sec.ids), httpapi.Logger(w.log)}
	w.mu.Lock()
	if w.rollout.cp == cp {
		opts = append(opts, httpapi.WithRollout(w.rollout.job))
	}
	w.mu.Unlock()
	return httpapi.New(cp, opts...)
}

// client returns a Kafka client of brokers (comma-separated), closed when
// the process stops.
func (w *leaderWiring) client(brokers string, opts []kgo.Opt) (*kgo.Client, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(splitList(brokers)...)}, opts...)...)
	if err != nil {
		return nil, err
	}
	w.closers = append(w.closers, cl.Close)
	return cl, nil
}

// destinationGuard returns the write guard of --write-guard on the
// destination dcl, exempting the replicator's principal.
func (w *leaderWiring) destinationGuard(ctx context.Context, dcl *kgo.Client) (controlplane.WriteGuard, error) {
	principal, err := replicatorPrincipal(ctx, w.fl.replPrincipal, w.fl.writeGuard, &w.fl.destSASL)
	if err != nil {
		return nil, err
	}
	guard, err := pickGuard(ctx, w.fl.writeGuard, kadm.NewClient(dcl), principal)
	if err != nil {
		return nil, err
	}
	if g, ok := guard.(*acl.Guard); ok {
		g.Owned = w.store // what the guard created, so that lifting it removes that and nothing else
	}
	w.log.Info("destination write guard", "guard", fmt.Sprintf("%T", guard), "replicator_principal", principal)
	return guard, nil
}

// sourceFence returns the fence of --source-fence on the source scl.
func (w *leaderWiring) sourceFence(ctx context.Context, scl *kgo.Client) (controlplane.SourceFence, error) {
	fence, err := pickFence(ctx, w.fl.sourceFence, scl)
	if err != nil {
		return nil, err
	}
	if f, ok := fence.(*acl.Fence); ok {
		f.Owned = w.store.FenceLedger() // what the fence created, so that a rollback removes that and nothing else
		f.Term = w.fl.leaderTTL         // an ACL change after a longer pause may be a deposed leader's
		w.log.Info("source fence: a cutover denies writes to its topic on the source (DENY WRITE User:*), and agents " +
			"may forward REJECT and PROXY topics without a lease")
	} else {
		w.log.Info("source fence: none (the source has no authorizer, or --source-fence=none): agents forward to the " +
			"source only under a lease, and a control plane out of reach stalls producers after one lease")
	}
	return fence, nil
}

// replication returns the term's replication and what runs it: r in
// process, or without r (--replication=workers) a pool of workers.
func (w *leaderWiring) replication(r *replicator.Replicator, scl *kgo.Client, margin time.Duration) (controlplane.Replication, func(context.Context), error) {
	if r != nil {
		return &replication.ReplicatorAdapter{R: r, Source: kadm.NewClient(scl)}, func(ctx context.Context) { _ = r.Run(ctx) }, nil
	}
	pool, err := replication.NewWorkerPool(kadm.NewClient(scl), w.fl.lease, w.fl.forward, margin, w.log)
	if err != nil {
		return nil, nil, err
	}
	w.log.Warn("replication by workers (baton replicator --control-plane): bypass detection and the forgotten-producer " +
		"gate read every batch the in-process replicator copies and are off; run --replication=in-process where they matter")
	return pool, pool.Run, nil
}

// pickFence returns the source fence --source-fence names.
func pickFence(ctx context.Context, mode string, cl *kgo.Client) (controlplane.SourceFence, error) {
	switch mode {
	case "none":
		return controlplane.NoFence{}, nil
	case "acl":
		return &acl.Fence{Client: cl}, nil
	case "auto":
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		f, err := acl.DetectFence(dctx, cl)
		if err != nil {
			return nil, fmt.Errorf("--source-fence=auto: %w (use --source-fence=none to run without one)", err)
		}
		if f == nil { // no authorizer
			return controlplane.NoFence{}, nil
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
		g := &acl.Guard{Admin: adm, Replicator: principal}
		if err := g.Validate(); err != nil {
			return nil, fmt.Errorf("--write-guard=acl: --replicator-principal: %w (connect the replicator with --destination-sasl-* "+
				"or a client certificate and name its principal, or use --write-guard=auto, which runs without a guard where "+
				"every client is anonymous and warns)", err)
		}
		return g, nil
	case "auto":
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		g, none, err := acl.DetectGuard(dctx, adm, principal)
		if errors.Is(err, acl.ErrGuardPrincipal) {
			return nil, fmt.Errorf("--replicator-principal: %w (or --write-guard=none to run without a guard)", err)
		}
		if err != nil {
			return nil, fmt.Errorf("--write-guard=auto: %w (use --write-guard=none to run without a guard)", err)
		}
		if none != nil {
			return controlplane.NoGuard{Why: none.Why, Remedy: none.Remedy}, nil
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
func apiFlags(cmd *cobra.Command, output *string) func() (*httpapi.Client, error) {
	var server, tokenFile, caFile, certFile, keyFile string
	f := cmd.PersistentFlags()
	f.StringVar(&server, "server", "http://127.0.0.1:18080", "control plane HTTP API (https:// when it serves --http-tls-cert)")
	f.StringVar(&tokenFile, "token-file", "", "file holding the HTTP API bearer token (default: $"+apiTokenEnv+", if set)")
	f.StringVar(&caFile, "ca-file", "", "PEM CA bundle verifying an https:// --server (default: $"+apiCAEnv+", else the system's roots)")
	f.StringVar(&certFile, "cert-file", "", "PEM client certificate for an https:// --server that maps certificates to callers (default: $"+apiCertEnv+"; with --key-file)")
	f.StringVar(&keyFile, "key-file", "", "PEM key of --cert-file (default: $"+apiKeyEnv+")")
	f.StringVarP(output, "output", "o", "text", "text or json")
	markAddrs(f, addrURL, "server")
	return func() (*httpapi.Client, error) {
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
		return &httpapi.Client{Base: server, Token: token, HTTP: hc}, nil
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
	var rules []nodeauth.Rule
	if identities != "" {
		if rules, err = nodeauth.Load(identities); err != nil {
			return nil, nil, fmt.Errorf("--agent-identities: %w", err)
		}
	}
	return credentials.NewTLS(cfg), []controlplane.Opt{controlplane.NodeIdentity(rules)}, nil
}
