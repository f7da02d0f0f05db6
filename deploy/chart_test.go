package deploy_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/baton-kafka/baton/deploy"
)

var update = flag.Bool("update", false, "rewrite manifests/baton.yaml from the chart")

// valueSets are the values the tests render the chart with: its defaults
// and the other branches of its templates.
var valueSets = map[string]map[string]any{
	"defaults": nil,
	"external etcd, cert-manager, monitoring, own tokens": {
		"etcd":           map[string]any{"enabled": false, "external": map[string]any{"endpoints": []any{"https://etcd-0.db:2379", "https://etcd-1.db:2379"}}},
		"injector":       map[string]any{"certificate": map[string]any{"source": "cert-manager"}, "namespaces": []any{"shop", "billing"}, "nativeSidecar": "false", "agent": map[string]any{"secret": "baton-agent", "secretFiles": []any{"source-sasl-password-file=password"}, "args": []any{"--log-level=debug"}}},
		"controlPlane":   map[string]any{"replicas": 5, "api": map[string]any{"generateToken": false, "tokens": []any{map[string]any{"name": "ci", "role": "read-only", "sha256": strings.Repeat("ab", 32)}}}, "extraArgs": []any{"--bypass-watch=1h"}},
		"serviceMonitor": map[string]any{"enabled": true},
	},
	"no injector": {"injector": map[string]any{"enabled": false}},
}

func TestChartLints(t *testing.T) {
	t.Parallel()
	for name, vals := range valueSets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res := lint.RunAll(deploy.ChartDir, vals, "baton")
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("lint: %v", m)
				} else {
					t.Logf("lint: %v", m)
				}
			}
		})
	}
}

// decodeStrict decodes a rendered object into out, refusing a field the
// Kubernetes type does not have.
func decodeStrict(t *testing.T, o deploy.Object, out any) {
	t.Helper()
	j, err := yaml.YAMLToJSON(o.YAML)
	if err != nil {
		t.Fatalf("%s %s: %v", o.Kind, o.Name, err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		t.Errorf("%s %s (%s) does not decode as %T: %v", o.Kind, o.Name, o.Template, out, err)
	}
}

// serviceMonitor is the part of monitoring.coreos.com/v1 ServiceMonitor
// the chart writes; a field outside it fails the strict decode.
type serviceMonitor struct {
	APIVersion string             `json:"apiVersion"`
	Kind       string             `json:"kind"`
	Metadata   map[string]any     `json:"metadata"`
	Spec       serviceMonitorSpec `json:"spec"`
}

type serviceMonitorSpec struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	Endpoints []struct {
		Port, Path, Interval string
	} `json:"endpoints"`
}

// certManager is a cert-manager Issuer or Certificate, checked by shape.
type certManager struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       map[string]any `json:"spec"`
}

// rendered is a render's objects by kind, decoded.
type rendered struct {
	services     []corev1.Service
	secrets      []corev1.Secret
	accounts     []corev1.ServiceAccount
	statefulSets []appsv1.StatefulSet
	deployments  []appsv1.Deployment
	pdbs         []policyv1.PodDisruptionBudget
	webhooks     []admissionregistrationv1.MutatingWebhookConfiguration
	netpols      []networkingv1.NetworkPolicy
	monitors     []serviceMonitor
	roles        []rbacv1.Role
	bindings     []rbacv1.RoleBinding
}

func decodeAll(t *testing.T, objs []deploy.Object) *rendered {
	t.Helper()
	r := &rendered{}
	seen := map[string]bool{}
	for _, o := range objs {
		key := o.Kind + "/" + o.Name
		if seen[key] {
			t.Errorf("%s rendered twice", key)
		}
		seen[key] = true
		for _, msg := range validation.IsDNS1123Subdomain(o.Name) {
			t.Errorf("%s: name: %s", key, msg)
		}
		switch gvk := o.APIVersion + " " + o.Kind; gvk {
		case "v1 Service":
			r.services = append(r.services, decode[corev1.Service](t, o))
		case "v1 Secret":
			r.secrets = append(r.secrets, decode[corev1.Secret](t, o))
		case "v1 ServiceAccount":
			r.accounts = append(r.accounts, decode[corev1.ServiceAccount](t, o))
		case "apps/v1 StatefulSet":
			r.statefulSets = append(r.statefulSets, decode[appsv1.StatefulSet](t, o))
		case "apps/v1 Deployment":
			r.deployments = append(r.deployments, decode[appsv1.Deployment](t, o))
		case "policy/v1 PodDisruptionBudget":
			r.pdbs = append(r.pdbs, decode[policyv1.PodDisruptionBudget](t, o))
		case "admissionregistration.k8s.io/v1 MutatingWebhookConfiguration":
			r.webhooks = append(r.webhooks, decode[admissionregistrationv1.MutatingWebhookConfiguration](t, o))
		case "networking.k8s.io/v1 NetworkPolicy":
			r.netpols = append(r.netpols, decode[networkingv1.NetworkPolicy](t, o))
		case "rbac.authorization.k8s.io/v1 Role":
			r.roles = append(r.roles, decode[rbacv1.Role](t, o))
		case "rbac.authorization.k8s.io/v1 RoleBinding":
			r.bindings = append(r.bindings, decode[rbacv1.RoleBinding](t, o))
		case "monitoring.coreos.com/v1 ServiceMonitor":
			r.monitors = append(r.monitors, decode[serviceMonitor](t, o))
		case "cert-manager.io/v1 Issuer", "cert-manager.io/v1 Certificate":
			decode[certManager](t, o)
		default:
			t.Errorf("%s (%s): a kind this test does not validate: %s", key, o.Template, gvk)
		}
	}
	return r
}

func decode[T any](t *testing.T, o deploy.Object) T {
	t.Helper()
	var v T
	decodeStrict(t, o, &v)
	return v
}

// pods are the pod templates of every workload, by workload name.
func (r *rendered) pods() map[string]corev1.PodTemplateSpec {
	out := map[string]corev1.PodTemplateSpec{}
	for _, s := range r.statefulSets {
		out[s.Name] = s.Spec.Template
	}
	for _, d := range r.deployments {
		out[d.Name] = d.Spec.Template
	}
	return out
}

func (r *rendered) service(name string) *corev1.Service {
	for i := range r.services {
		if r.services[i].Name == name {
			return &r.services[i]
		}
	}
	return nil
}

// leaderLabel is the label the leading control plane replica sets on its
// own pod (values.yaml controlPlane.leaderLabel).
const leaderLabel = "baton.io/leader"

// templateSelector is sel as it selects pod templates: without the leader
// label, which no template carries (the leading replica labels its own pod
// at run time).
func templateSelector(sel map[string]string) labels.Selector {
	sel = maps.Clone(sel)
	delete(sel, leaderLabel)
	return labels.SelectorFromSet(sel)
}

// TestChartObjectsValidate renders every value set, decodes every object
// into its k8s.io/api type, and checks what refers to what.
func TestChartObjectsValidate(t *testing.T) {
	t.Parallel()
	for name, vals := range valueSets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			objs, err := deploy.Render("baton", "baton", vals, "1.31.0")
			if err != nil {
				t.Fatal(err)
			}
			r := decodeAll(t, objs)
			pods := r.pods()
			matchesPod := func(what string, sel map[string]string) {
				if len(sel) == 0 {
					t.Errorf("%s: an empty selector", what)
					return
				}
				for _, p := range pods {
					if templateSelector(sel).Matches(labels.Set(p.Labels)) {
						return
					}
				}
				t.Errorf("%s: selector %v matches no pod of the chart", what, sel)
			}
			for _, s := range r.services {
				matchesPod("Service "+s.Name, s.Spec.Selector)
				for _, p := range s.Spec.Ports {
					if p.TargetPort.StrVal == "" {
						continue
					}
					found := false
					for _, pod := range pods {
						if templateSelector(s.Spec.Selector).Matches(labels.Set(pod.Labels)) {
							for _, c := range pod.Spec.Containers {
								found = found || slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == p.TargetPort.StrVal })
							}
						}
					}
					if !found {
						t.Errorf("Service %s: port %s targets %q, a port no selected container names", s.Name, p.Name, p.TargetPort.StrVal)
					}
				}
			}
			for _, p := range r.pdbs {
				matchesPod("PodDisruptionBudget "+p.Name, p.Spec.Selector.MatchLabels)
			}
			for _, s := range r.statefulSets {
				h := r.service(s.Spec.ServiceName)
				if h == nil || h.Spec.ClusterIP != corev1.ClusterIPNone {
					t.Errorf("StatefulSet %s: serviceName %q is not a headless Service of the chart", s.Name, s.Spec.ServiceName)
				}
			}
			for wl, p := range pods {
				spec := p.Spec
				if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
					t.Errorf("%s: pods do not run as non-root", wl)
				}
				if sa := spec.ServiceAccountName; !slices.ContainsFunc(r.accounts, func(a corev1.ServiceAccount) bool { return a.Name == sa }) {
					t.Errorf("%s: service account %q is not the chart's", wl, sa)
				}
				for _, v := range spec.Volumes {
					if v.Secret == nil {
						continue
					}
					own := slices.ContainsFunc(r.secrets, func(s corev1.Secret) bool { return s.Name == v.Secret.SecretName })
					byCertManager := strings.HasSuffix(v.Secret.SecretName, "-injector-tls")
					byUser := v.Secret.SecretName == "baton-api-tokens" && vals != nil
					if !own && !byCertManager && !byUser {
						t.Errorf("%s: volume %s: Secret %q is made by nothing", wl, v.Name, v.Secret.SecretName)
					}
				}
				for _, c := range spec.Containers {
					if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
						t.Errorf("%s/%s: the root file system is writable", wl, c.Name)
					}
					if c.ReadinessProbe == nil {
						t.Errorf("%s/%s: no readiness probe", wl, c.Name)
					}
				}
			}
			for _, w := range r.webhooks {
				for _, h := range w.Webhooks {
					svc := h.ClientConfig.Service
					if svc == nil || r.service(svc.Name) == nil {
						t.Errorf("webhook %s: calls %+v, not a Service of the chart", h.Name, svc)
						continue
					}
					if !slices.ContainsFunc(r.service(svc.Name).Spec.Ports, func(p corev1.ServicePort) bool { return svc.Port != nil && p.Port == *svc.Port }) {
						t.Errorf("webhook %s: port %v is not the Service's", h.Name, svc.Port)
					}
					if h.SideEffects == nil || *h.SideEffects != admissionregistrationv1.SideEffectClassNone || !slices.Equal(h.AdmissionReviewVersions, []string{"v1"}) {
						t.Errorf("webhook %s: want sideEffects None and admissionReviewVersions [v1]", h.Name)
					}
					if h.NamespaceSelector == nil || h.NamespaceSelector.MatchLabels["baton.io/inject"] != "enabled" {
						t.Errorf("webhook %s: namespaceSelector %+v, want baton.io/inject=enabled", h.Name, h.NamespaceSelector)
					}
				}
			}
			// Every binding binds a Role of the chart to a service account
			// of the chart; the control plane's Role patches exactly its
			// StatefulSet's pods, and its pods mount the token to do it.
			for _, b := range r.bindings {
				if !slices.ContainsFunc(r.roles, func(ro rbacv1.Role) bool { return b.RoleRef.Kind == "Role" && ro.Name == b.RoleRef.Name }) {
					t.Errorf("RoleBinding %s: binds %+v, not a Role of the chart", b.Name, b.RoleRef)
				}
				for _, sub := range b.Subjects {
					if sub.Kind != "ServiceAccount" || sub.Namespace != "baton" ||
						!slices.ContainsFunc(r.accounts, func(a corev1.ServiceAccount) bool { return a.Name == sub.Name }) {
						t.Errorf("RoleBinding %s: subject %+v is not a service account of the chart", b.Name, sub)
					}
				}
			}
			for _, s := range r.statefulSets {
				if !strings.HasSuffix(s.Name, "-controlplane") {
					continue
				}
				var want []string
				for i := range int(*s.Spec.Replicas) {
					want = append(want, fmt.Sprintf("%s-%d", s.Name, i))
				}
				patches := slices.ContainsFunc(r.roles, func(ro rbacv1.Role) bool {
					return slices.ContainsFunc(ro.Rules, func(ru rbacv1.PolicyRule) bool {
						return slices.Equal(ru.Resources, []string{"pods"}) && slices.Equal(ru.Verbs, []string{"patch"}) && slices.Equal(ru.ResourceNames, want)
					})
				})
				if !patches {
					t.Errorf("StatefulSet %s: no Role of the chart lets it patch exactly its pods %v (the leader label)", s.Name, want)
				}
				if m := s.Spec.Template.Spec.AutomountServiceAccountToken; m == nil || !*m {
					t.Errorf("StatefulSet %s: its pods do not mount their service account token, which the leader label needs", s.Name)
				}
			}
		})
	}
}

// TestChartImageIsTheDockerfiles checks every Baton container runs the
// image the repository's Dockerfile builds: its binary at the path the
// Dockerfile puts it, as the distroless nonroot user.
func TestChartImageIsTheDockerfiles(t *testing.T) {
	t.Parallel()
	df, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var final []string
	for _, l := range strings.Split(string(df), "\n") {
		if strings.HasPrefix(l, "FROM ") {
			final = nil
		}
		final = append(final, l)
	}
	stage := strings.Join(final, "\n")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^FROM gcr\.io/distroless/static-debian12:nonroot\b`),
		regexp.MustCompile(`(?m)^USER 65532:65532$`),
		regexp.MustCompile(`(?m)^ENTRYPOINT \["/baton"\]$`),
		regexp.MustCompile(`(?m)^COPY --from=build /out/baton /baton$`),
	} {
		if !want.MatchString(stage) {
			t.Errorf("the Dockerfile's final stage lacks %s:\n%s", want, stage)
		}
	}
	objs, err := deploy.Render("baton", "baton", nil, "1.31.0")
	if err != nil {
		t.Fatal(err)
	}
	r := decodeAll(t, objs)
	chart, err := os.ReadFile(filepath.Join(deploy.ChartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(chart, &meta); err != nil {
		t.Fatal(err)
	}
	image := "baton-kafka/baton:" + meta.AppVersion
	if !strings.Contains(string(df), "# image: "+image) {
		t.Errorf("the Dockerfile does not name the image the chart runs, %s", image)
	}
	for wl, p := range r.pods() {
		for _, c := range p.Spec.Containers {
			if strings.HasSuffix(wl, "-etcd") {
				continue
			}
			if c.Image != image || len(c.Command) != 0 || len(c.Args) == 0 {
				t.Errorf("%s/%s: image %q command %q: want %s and its entrypoint", wl, c.Name, c.Image, c.Command, image)
			}
			if u := p.Spec.SecurityContext.RunAsUser; u == nil || *u != 65532 {
				t.Errorf("%s: runs as %v, want 65532 (distroless nonroot)", wl, u)
			}
		}
	}
}

// manifestValues are what the plain manifests are rendered with: nothing
// secret in a committed file, so the injector's certificate comes from
// cert-manager and the API tokens from a Secret the operator makes.
var manifestValues = map[string]any{
	"injector":     map[string]any{"certificate": map[string]any{"source": "cert-manager"}},
	"controlPlane": map[string]any{"api": map[string]any{"existingSecret": "baton-api-tokens"}},
}

// TestManifestsAreTheChart fails when manifests/baton.yaml is not what the
// chart renders (run `make manifests` to rewrite it).
func TestManifestsAreTheChart(t *testing.T) {
	t.Parallel()
	objs, err := deploy.Render("baton", "baton", manifestValues, "1.31.0")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.Kind == "Secret" {
			t.Errorf("the plain manifests would commit Secret %s", o.Name)
		}
	}
	decodeAll(t, objs)
	got := deploy.Manifests(objs)
	const file = "manifests/baton.yaml"
	if *update {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not the chart's render: run `make manifests`", file)
	}
}

// TestRenderRefusesBadValues checks a value the chart cannot use is
// refused naming it.
func TestRenderRefusesBadValues(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		vals map[string]any
		want string
	}{
		{map[string]any{"etcd": map[string]any{"enabled": false}}, "etcd.external.endpoints"},
		{map[string]any{"injector": map[string]any{"certificate": map[string]any{"source": "vault"}}}, "injector.certificate.source"},
		{map[string]any{"controlPlane": map[string]any{"api": map[string]any{"generateToken": false}}}, "controlPlane.api"},
	} {
		_, err := deploy.Render("baton", "baton", c.vals, "")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("values %v: got %v, want an error naming %s", c.vals, err, c.want)
		}
	}
}
