package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/baton-kafka/baton/injector"
)

// newInjectorCmd is `baton injector`: the mutating admission webhook that
// adds the agent to producer pods (docs/kubernetes.md, "Inject"). It only
// wires flags to an injector.Config and serves it.
func newInjectorCmd() *cobra.Command {
	var (
		cfg                                   injector.Config
		listen, certFile, keyFile, pullPolicy string
		native, namespaces, logLevel          string
		secretFiles                           []string
	)
	cmd := &cobra.Command{
		Use:   "injector",
		Short: "Serve the admission webhook that injects the agent into producer pods",
		Long: `Serve a Kubernetes mutating admission webhook (admission/v1, over HTTPS) at
/mutate that adds the Baton agent as a sidecar to pods of namespaces labelled
baton.io/inject=enabled, and points their containers at it (BATON_BOOTSTRAP).
A pod annotated baton.io/inject: "false" is left alone. See docs/kubernetes.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			cfg.ImagePullPolicy = corev1.PullPolicy(pullPolicy)
			switch cfg.ImagePullPolicy {
			case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
			default:
				return fmt.Errorf("--image-pull-policy %q: want Always, IfNotPresent or Never", pullPolicy)
			}
			cfg.NativeSidecar = injector.NativeSidecar(native)
			cfg.Namespaces = splitList(namespaces)
			if len(secretFiles) > 0 {
				cfg.SecretFiles = map[string]string{}
			}
			for _, sf := range secretFiles {
				flag, key, ok := strings.Cut(sf, "=")
				if !ok || flag == "" || key == "" {
					return fmt.Errorf("--secret-file %q: want agent-flag=secret-key, as source-sasl-password-file=source.password", sf)
				}
				cfg.SecretFiles[flag] = key
			}
			in, err := injector.New(cfg)
			if err != nil {
				return err
			}
			srv, err := injector.NewServer(in, listen, certFile, keyFile, log)
			if err != nil {
				return err
			}
			log.Info("injector up", "addr", srv.Addr(), "native_sidecar", in.Native(), "agent_image", cfg.AgentImage)
			return srv.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", ":9443", "HTTPS address the API server calls the webhook on")
	f.StringVar(&certFile, "tls-cert", "", "the webhook's serving certificate, PEM (required; reread when it changes)")
	f.StringVar(&keyFile, "tls-key", "", "the certificate's key, PEM (required)")
	f.StringVar(&cfg.AgentImage, "agent-image", "", "the agent's container image (required)")
	f.StringVar(&pullPolicy, "image-pull-policy", "", "the agent container's imagePullPolicy: Always, IfNotPresent or Never (default: Kubernetes')")
	f.StringVar(&cfg.Source, "source", "", "the agents' --source: source cluster bootstrap brokers, comma-separated (required)")
	f.StringVar(&cfg.Destination, "destination", "", "the agents' --destination: destination cluster bootstrap brokers, comma-separated (required)")
	f.StringVar(&cfg.ControlPlane, "control-plane", "", "the agents' --control-plane: the control plane's gRPC address(es) (empty: agents pass every topic through to the source)")
	f.IntVar(&cfg.ListenPort, "listen-port", injector.DefaultListenPort, "the loopback port the agent listens on for the app (BATON_BOOTSTRAP)")
	f.IntVar(&cfg.AdminPort, "admin-port", injector.DefaultAdminPort, "the agent's admin port: /metrics, /healthz and /readyz (the readiness probe)")
	f.StringVar(&native, "native-sidecar", string(injector.NativeAuto), "auto (native unless --kubernetes-version is before 1.29), true (an init container with restartPolicy Always) or false (a plain container)")
	f.StringVar(&cfg.KubernetesVersion, "kubernetes-version", "", "the cluster's version, as 1.28, for --native-sidecar auto (empty: native)")
	f.StringVar(&namespaces, "namespaces", "", "if set, only these namespaces, comma-separated, are injected (the webhook's namespaceSelector selects the rest)")
	f.StringVar(&cfg.Secret, "secret", "", "a Secret mounted read-only at "+injector.SecretDir+" in the agent (a pod may name another with baton.io/secret)")
	f.StringArrayVar(&secretFiles, "secret-file", nil, "agent-flag=key: pass the agent that flag with the path of the Secret's key, as source-sasl-password-file=source.password (repeatable)")
	f.StringArrayVar(&cfg.AgentArgs, "agent-arg", nil, "one more agent flag, as --log-level=debug, for every injected agent (repeatable)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	markAddrs(f, addrListen, "listen")
	markAddrs(f, addrDial, "source", "destination", "control-plane")
	return cmd
}
