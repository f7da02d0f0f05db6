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

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
)

func newControlPlaneCmd() *cobra.Command {
	var (
		source, destination, grpcAddr, httpAddr, dataDir, endpoints, logLevel string
		writeGuard, replPrincipal, apiTokensFile                              string
		grpcCert, grpcKey, grpcClientCA, agentIdentities                      string
		apiInsecure                                                           bool
		lease, forward, timeout                                               time.Duration
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

The destination write guard keeps everyone but the replicator off a topic on
the destination until its cutover completes. --write-guard=auto (the default)
uses Kafka ACLs when the destination has an authorizer and nothing when it
answers SECURITY_DISABLED; the replicator and the guard's admin client both
use the --destination-sasl-* credentials, whose principal must be allowed to
alter ACLs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			var tokens []controlplane.APIToken
			if apiTokensFile != "" {
				if tokens, err = controlplane.LoadAPITokens(apiTokensFile); err != nil {
					return fmt.Errorf("--api-tokens-file: %w", err)
				}
			} else if !loopback(httpAddr) && !apiInsecure {
				return fmt.Errorf("--http %s is reachable from the network and the API has no tokens: anyone who reaches it could migrate or abort any topic; set --api-tokens-file (docs/controlplane.md, API tokens), or --api-insecure to accept that", httpAddr)
			}
			grpcCreds, nodeOpts, err := grpcSecurity(grpcCert, grpcKey, grpcClientCA, agentIdentities)
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
			sopts, err := srcSASL.opts()
			if err != nil {
				return err
			}
			dopts, err := destSASL.opts()
			if err != nil {
				return err
			}
			r, err := replicator.New(replicator.Source(splitList(source)...),
				replicator.Destination(splitList(destination)...), replicator.Logger(log),
				replicator.SourceClientOpts(sopts...), replicator.DestinationClientOpts(dopts...))
			if err != nil {
				return err
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
			cp, err := controlplane.New(ctx, append([]controlplane.Opt{controlplane.WithStore(store), controlplane.Logger(log),
				controlplane.WithGuard(guard),
				controlplane.WithReplication(&controlplane.ReplicatorAdapter{R: r, Source: kadm.NewClient(scl)}),
				controlplane.APITokens(tokens),
				controlplane.LeaseDuration(lease), controlplane.ForwardDeadline(forward), controlplane.CutoverTimeout(timeout),
				controlplane.Clusters(&batonv1.Cluster{Name: "source", Bootstrap: splitList(source)},
					&batonv1.Cluster{Name: "destination", Bootstrap: splitList(destination)})}, nodeOpts...)...)
			if err != nil {
				return err
			}
			gln, err := net.Listen("tcp", grpcAddr)
			if err != nil {
				return fmt.Errorf("--grpc: %w", err)
			}
			hln, err := net.Listen("tcp", httpAddr)
			if err != nil {
				return fmt.Errorf("--http: %w", err)
			}
			g := grpc.NewServer(append(cp.ServerOptions(), grpc.Creds(grpcCreds))...)
			cp.Register(g)
			hs := &http.Server{Handler: cp.Handler(), ReadHeaderTimeout: 5 * time.Second}
			go func() { _ = g.Serve(gln) }()
			go func() { _ = hs.Serve(hln) }()
			go func() { _ = r.Run(ctx) }()
			log.Info("control plane up", "grpc", gln.Addr().String(), "http", "http://"+hln.Addr().String())
			err = cp.Run(ctx)
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
	f.StringVar(&endpoints, "etcd-endpoints", "", "external etcd endpoints, comma-separated (instead of the embedded one)")
	f.DurationVar(&lease, "lease", migration.DefaultLease, "agents' lease")
	f.DurationVar(&forward, "forward-deadline", migration.DefaultForwardDeadline, "forward deadline F (below the lease)")
	f.DurationVar(&timeout, "cutover-timeout", controlplane.DefaultCutoverTimeout, "bound of every cutover wait; gate: lag <= timeout/4")
	f.StringVar(&apiTokensFile, "api-tokens-file", "", "YAML list of the HTTP API's callers (name, role read-only or operator, sha256 of the token); every request then needs a bearer token")
	f.StringVar(&grpcCert, "grpc-tls-cert", "", "PEM certificate the gRPC port (xDS, leases) serves TLS with (with --grpc-tls-key)")
	f.StringVar(&grpcKey, "grpc-tls-key", "", "PEM key of --grpc-tls-cert")
	f.StringVar(&grpcClientCA, "grpc-client-ca", "", "PEM CA bundle agents' client certificates must chain to (mTLS): an agent then may name only node ids its certificate vouches for")
	f.StringVar(&agentIdentities, "agent-identities", "", "YAML list mapping certificate identities (URI SAN, DNS SAN or CN) to the node ids they may use (with --grpc-client-ca)")
	f.BoolVar(&apiInsecure, "api-insecure", false, "serve the HTTP API without tokens on an address other than loopback")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&writeGuard, "write-guard", "auto", "destination write guard: auto (ACLs if the destination has an authorizer), acl or none")
	f.StringVar(&replPrincipal, "replicator-principal", "", `the replicator's principal on the destination, exempt from the guard (default: User:<--destination-sasl-user>, with OAUTHBEARER User:<the token's sub claim>, or User:ANONYMOUS without SASL)`)
	srcSASL.add(f, "source")
	destSASL.add(f, "destination")
	markAddrs(f, addrDial, "source", "destination")
	markAddrs(f, addrListen, "grpc", "http")
	markAddrs(f, addrEtcd, "etcd-endpoints")
	_ = cmd.MarkFlagRequired("source")
	_ = cmd.MarkFlagRequired("destination")
	return cmd
}

// replicatorPrincipal is the replicator's principal on the destination:
// --replicator-principal (flag) if given, else the one the --destination-sasl
// flags authenticate as, else User:ANONYMOUS. An OAUTHBEARER token that
// names none (not a JWT, no sub claim) or cannot be had fails the start
// unless the guard, the principal's one user, is off.
func replicatorPrincipal(ctx context.Context, flag, writeGuard string, dest *securityFlags) (string, error) {
	if flag != "" {
		return flag, nil
	}
	p, err := dest.principal(ctx)
	if err != nil && writeGuard != "none" {
		return "", fmt.Errorf("--replicator-principal: none given, and %w; name the principal the destination gives the replicator, or run with --write-guard=none", err)
	}
	if p == "" {
		p = "User:ANONYMOUS" // what Kafka calls a client without SASL or TLS client auth
	}
	return p, nil
}

// pickGuard returns the write guard --write-guard names.
func pickGuard(ctx context.Context, mode string, adm *kadm.Client, principal string) (controlplane.WriteGuard, error) {
	switch mode {
	case "none":
		return controlplane.NoGuard{}, nil
	case "acl":
		g := &controlplane.ACLGuard{Admin: adm, Replicator: principal}
		if err := g.Validate(); err != nil {
			return nil, fmt.Errorf("--write-guard=acl: --replicator-principal: %w (set --destination-sasl-* for the replicator)", err)
		}
		return g, nil
	case "auto":
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		g, err := controlplane.DetectGuard(dctx, adm, principal)
		if errors.Is(err, controlplane.ErrGuardPrincipal) {
			return nil, fmt.Errorf("--replicator-principal: %w (set --destination-sasl-* for the replicator, or --write-guard=none to run without a guard)", err)
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

// apiFlags adds --server, --token-file and -o to an operator command, and
// returns the API client they describe.
func apiFlags(cmd *cobra.Command, output *string) func() (*controlplane.APIClient, error) {
	var server, tokenFile string
	cmd.PersistentFlags().StringVar(&server, "server", "http://127.0.0.1:18080", "control plane HTTP API")
	cmd.PersistentFlags().StringVar(&tokenFile, "token-file", "", "file holding the HTTP API bearer token (default: $"+apiTokenEnv+", if set)")
	cmd.PersistentFlags().StringVarP(output, "output", "o", "text", "text or json")
	markAddrs(cmd.PersistentFlags(), addrURL, "server")
	return func() (*controlplane.APIClient, error) {
		token := os.Getenv(apiTokenEnv)
		if tokenFile != "" {
			b, err := os.ReadFile(tokenFile)
			if err != nil {
				return nil, fmt.Errorf("--token-file: %w", err)
			}
			token = strings.TrimSpace(string(b))
		}
		return &controlplane.APIClient{Base: server, Token: token}, nil
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

// grpcSecurity returns the gRPC port's transport credentials (plaintext
// without --grpc-tls-cert) and, with --grpc-client-ca, the node identity
// check.
func grpcSecurity(certFile, keyFile, clientCA, identities string) (credentials.TransportCredentials, []controlplane.Opt, error) {
	if certFile == "" && keyFile == "" {
		if clientCA != "" || identities != "" {
			return nil, nil, errors.New("--grpc-client-ca and --agent-identities need --grpc-tls-cert and --grpc-tls-key")
		}
		return insecure.NewCredentials(), nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, nil, errors.New("--grpc-tls-cert and --grpc-tls-key go together")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("--grpc-tls-cert/--grpc-tls-key: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if clientCA == "" {
		if identities != "" {
			return nil, nil, errors.New("--agent-identities needs --grpc-client-ca: identities come from verified client certificates")
		}
		return credentials.NewTLS(cfg), nil, nil
	}
	if cfg.ClientCAs, err = readCAFile("--grpc-client-ca", clientCA); err != nil {
		return nil, nil, err
	}
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	var rules []controlplane.NodeRule
	if identities != "" {
		if rules, err = controlplane.LoadNodeRules(identities); err != nil {
			return nil, nil, fmt.Errorf("--agent-identities: %w", err)
		}
	}
	return credentials.NewTLS(cfg), []controlplane.Opt{controlplane.NodeIdentity(rules)}, nil
}
