// Package injector owns Baton's sidecar injection: a Kubernetes mutating
// admission webhook (admission/v1) that adds the agent to the pods of
// namespaces labelled baton.io/inject=enabled and points their containers
// at it. Mutate is the pure core: one AdmissionReview in, one out, with an
// RFC 6902 JSON patch; Handler serves it over HTTP and Server over HTTPS,
// as the API server calls webhooks.
//
// What an injected pod gets, the annotations a pod may carry and why, are
// in docs/kubernetes.md ("Injection").
package injector

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Errors. Every message starts with "injector: ".
var (
	// ErrBadConfig refuses a Config; the message names the field.
	ErrBadConfig = errors.New("injector: bad config")
	// ErrBadReview is a request that is no AdmissionReview of a pod: not
	// JSON, another kind, no request in it.
	ErrBadReview = errors.New("injector: bad admission review")
	// ErrRefused refuses a pod the injector cannot inject as asked: the
	// message names the annotation or field at fault.
	ErrRefused = errors.New("injector: pod refused")
)

// The names the injector reads and writes.
const (
	// LabelInject on a namespace, with the value InjectEnabled, is what
	// the webhook's namespaceSelector selects.
	LabelInject   = "baton.io/inject"
	InjectEnabled = "enabled"
	// AnnotationInject "false" on a pod opts it out ("true", the default,
	// is accepted too).
	AnnotationInject = "baton.io/inject"
	// AnnotationWorkload names the pod's workload (the agent's
	// --workload), overriding the one read from its labels and owner.
	AnnotationWorkload = "baton.io/workload"
	// AnnotationSecret names the Secret mounted for the agent, overriding
	// Config.Secret.
	AnnotationSecret = "baton.io/secret"
	// AnnotationOverrideBootstrap "true" also sets KAFKA_BOOTSTRAP_SERVERS
	// in the app's containers to the agent.
	AnnotationOverrideBootstrap = "baton.io/override-kafka-bootstrap"
	// AnnotationAgentPrefix + an agent flag (AgentFlags) sets that flag.
	AnnotationAgentPrefix = "baton.io/agent-"

	// ContainerName is the agent's container; a pod that has one is
	// already injected.
	ContainerName = "baton-agent"
	// EnvBootstrap is the env var every app container gets: the agent's
	// address, host:port on loopback.
	EnvBootstrap = "BATON_BOOTSTRAP"
	// EnvKafkaBootstrap is set with AnnotationOverrideBootstrap.
	EnvKafkaBootstrap = "KAFKA_BOOTSTRAP_SERVERS"

	// StateVolume, an emptyDir, holds the agent's --state-dir at StateDir.
	StateVolume = "baton-agent-state"
	StateDir    = "/var/lib/baton"
	// SecretVolume holds the Secret, read-only, at SecretDir.
	SecretVolume = "baton-agent-secret"
	SecretDir    = "/etc/baton/secret"
	// AdminPortName names the agent's admin port (the probe's).
	AdminPortName = "baton-admin"

	// DefaultListenPort and DefaultAdminPort are the agent's ports.
	DefaultListenPort = 9092
	DefaultAdminPort  = 9404
	// AgentUID is the user the agent runs as (the distroless nonroot
	// user).
	AgentUID = 65532
)

// NativeSidecar says how the agent's container is added.
type NativeSidecar string

const (
	// NativeAuto is a native sidecar unless Config.KubernetesVersion
	// names a version before 1.29.
	NativeAuto NativeSidecar = "auto"
	// NativeAlways is an init container with restartPolicy Always
	// (Kubernetes 1.29 and later): it starts before the app's containers
	// and stops after them.
	NativeAlways NativeSidecar = "true"
	// NativeNever is a plain container, first in the pod's containers,
	// for older clusters: it starts alongside the app's and is stopped
	// with them.
	NativeNever NativeSidecar = "false"
)

// Config is what every injected agent gets.
type Config struct {
	// AgentImage is the agent's container image. Required.
	AgentImage string
	// ImagePullPolicy of the agent's container; empty: Kubernetes'
	// default for the image.
	ImagePullPolicy corev1.PullPolicy
	// Source and Destination are the clusters' bootstrap brokers,
	// comma-separated (the agent's --source and --destination). Required.
	Source, Destination string
	// ControlPlane is the agent's --control-plane; empty: none (the agent
	// then passes every topic through to the source).
	ControlPlane string
	// ListenPort is the loopback port the agent listens on for the app;
	// 0: DefaultListenPort.
	ListenPort int
	// AdminPort is the agent's admin port, on every address of the pod
	// (the kubelet probes it); 0: DefaultAdminPort.
	AdminPort int
	// NativeSidecar; empty: NativeAuto.
	NativeSidecar NativeSidecar
	// KubernetesVersion is the cluster's version ("1.28", "v1.30.2"),
	// for NativeAuto; empty: a native sidecar.
	KubernetesVersion string
	// Namespaces, if set, are the only namespaces injected: a review of a
	// pod elsewhere is allowed unchanged. Empty: every namespace the API
	// server sends reviews for (the webhook's namespaceSelector chose
	// them; a review does not carry the namespace's labels).
	Namespaces []string
	// Secret is the Secret mounted read-only at SecretDir for the agent;
	// empty: none, unless a pod names one (AnnotationSecret).
	Secret string
	// SecretFiles gives agent flags that take a file (SecretFileFlags) a
	// key of the Secret: flag "source-sasl-password-file", key
	// "source.password" passes
	// --source-sasl-password-file=/etc/baton/secret/source.password.
	SecretFiles map[string]string
	// AgentArgs are more agent flags, passed as given after the
	// injector's own and before the pod's annotations.
	AgentArgs []string
}

// Injector mutates pods' admission reviews by its Config.
type Injector struct {
	cfg    Config
	native bool
	ns     map[string]bool
}

// New checks cfg.
func New(cfg Config) (*Injector, error) {
	if cfg.ListenPort == 0 {
		cfg.ListenPort = DefaultListenPort
	}
	if cfg.AdminPort == 0 {
		cfg.AdminPort = DefaultAdminPort
	}
	if cfg.NativeSidecar == "" {
		cfg.NativeSidecar = NativeAuto
	}
	switch {
	case cfg.AgentImage == "":
		return nil, fmt.Errorf("%w: agent image: required", ErrBadConfig)
	case cfg.Source == "":
		return nil, fmt.Errorf("%w: source: bootstrap brokers required", ErrBadConfig)
	case cfg.Destination == "":
		return nil, fmt.Errorf("%w: destination: bootstrap brokers required", ErrBadConfig)
	case cfg.ListenPort < 1 || cfg.ListenPort > 65535:
		return nil, fmt.Errorf("%w: listen port: %d is not a port", ErrBadConfig, cfg.ListenPort)
	case cfg.AdminPort < 1 || cfg.AdminPort > 65535:
		return nil, fmt.Errorf("%w: admin port: %d is not a port", ErrBadConfig, cfg.AdminPort)
	case cfg.AdminPort == cfg.ListenPort:
		return nil, fmt.Errorf("%w: admin port: %d is the listen port too", ErrBadConfig, cfg.AdminPort)
	case len(cfg.SecretFiles) > 0 && cfg.Secret == "":
		return nil, fmt.Errorf("%w: secret files: name the Secret they are keys of", ErrBadConfig)
	}
	if cfg.Secret != "" && !isDNSSubdomain(cfg.Secret) {
		return nil, fmt.Errorf("%w: secret %q: not a Secret name", ErrBadConfig, cfg.Secret)
	}
	for flag, key := range cfg.SecretFiles {
		if !slices.Contains(secretFileFlags, flag) {
			return nil, fmt.Errorf("%w: secret files: %q is not an agent flag taking a secret file (%s)",
				ErrBadConfig, flag, strings.Join(secretFileFlags, ", "))
		}
		if !secretKey.MatchString(key) {
			return nil, fmt.Errorf("%w: secret files: %s: %q is not a Secret key", ErrBadConfig, flag, key)
		}
	}
	for _, a := range cfg.AgentArgs {
		if !strings.HasPrefix(a, "--") {
			return nil, fmt.Errorf("%w: agent args: %q is not a --flag", ErrBadConfig, a)
		}
	}
	in := &Injector{cfg: cfg}
	switch cfg.NativeSidecar {
	case NativeAlways:
		in.native = true
	case NativeNever:
	case NativeAuto:
		in.native = true
		if cfg.KubernetesVersion != "" {
			major, minor, err := parseVersion(cfg.KubernetesVersion)
			if err != nil {
				return nil, fmt.Errorf("%w: kubernetes version: %w", ErrBadConfig, err)
			}
			in.native = major > 1 || (major == 1 && minor >= 29)
		}
	default:
		return nil, fmt.Errorf(`%w: native sidecar: want "auto", "true" or "false", got %q`, ErrBadConfig, cfg.NativeSidecar)
	}
	if len(cfg.Namespaces) > 0 {
		in.ns = map[string]bool{}
		for _, n := range cfg.Namespaces {
			in.ns[n] = true
		}
	}
	return in, nil
}

// Native says whether the agent is added as a native sidecar.
func (in *Injector) Native() bool { return in.native }

// secretFileFlags are the agent's flags that name a file holding a secret
// or a certificate (docs/security.md).
var secretFileFlags = []string{
	"source-sasl-password-file", "destination-sasl-password-file",
	"source-sasl-oauth-token-file", "destination-sasl-oauth-token-file",
	"source-sasl-oauth-client-secret-file", "destination-sasl-oauth-client-secret-file",
	"source-tls-ca", "source-tls-cert", "source-tls-key",
	"destination-tls-ca", "destination-tls-cert", "destination-tls-key",
	"control-plane-tls-ca", "control-plane-tls-cert", "control-plane-tls-key",
	"listen-tls-cert", "listen-tls-key", "listen-client-ca",
	"client-sasl-scram-credentials",
}

// SecretFileFlags are the agent flags Config.SecretFiles may name.
func SecretFileFlags() []string { return slices.Clone(secretFileFlags) }

var (
	secretKey    = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	version      = regexp.MustCompile(`^v?(\d+)\.(\d+)`)
)

func isDNSSubdomain(s string) bool { return len(s) <= 253 && dnsSubdomain.MatchString(s) }

// parseVersion reads major.minor from a Kubernetes version ("1.28",
// "v1.30.2", "v1.29.4-gke.100").
func parseVersion(s string) (major, minor int, err error) {
	m := version.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, fmt.Errorf("%q: want major.minor, as 1.29", s)
	}
	major, _ = strconv.Atoi(m[1])
	minor, _ = strconv.Atoi(m[2])
	return major, minor, nil
}
