package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/baton-kafka/baton/deploy"
	"github.com/baton-kafka/baton/internal/podlabel"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/test/etcdcluster"
	"github.com/baton-kafka/baton/test/kubeapi"
)

// renderedObject decodes the one rendered object of kind named name into
// out.
func renderedObject(t *testing.T, objs []deploy.Object, kind, name string, out any) {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && o.Name == name {
			if err := yaml.UnmarshalStrict(o.YAML, out); err != nil {
				t.Fatalf("%s %s: %v", kind, name, err)
			}
			return
		}
	}
	t.Fatalf("the chart rendered no %s %s", kind, name)
}

// containerArgs are a pod template's one container's arguments, with
// every flag whose name is in set replaced by its value there and
// $(POD_NAME) expanded as Kubernetes does for a pod named pod.
func containerArgs(t *testing.T, spec corev1.PodSpec, pod string, set map[string]string) []string {
	t.Helper()
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	var args []string
	seen := map[string]bool{}
	for _, a := range spec.Containers[0].Args {
		name, _, _ := strings.Cut(a, "=")
		if v, ok := set[name]; ok {
			a, seen[name] = name+"="+v, true
		}
		args = append(args, strings.ReplaceAll(a, "$(POD_NAME)", pod))
	}
	for name := range set {
		if !seen[name] {
			t.Fatalf("the rendered arguments %q have no %s", spec.Containers[0].Args, name)
		}
	}
	return args
}

// leaderLabelKey is the chart's default controlPlane.leaderLabel.
const leaderLabelKey = "baton.io/leader"

// TestChartStarts renders the Helm chart (external etcd, the clusters
// given) and runs its control plane replicas and its injector from the
// rendered arguments, rewriting only the listen addresses (to loopback
// ports of the test's) and the mounted files' paths (to the rendered
// Secrets' contents written out). The replicas elect a leader whose API
// takes the chart's generated operator token and refuses a caller
// without one; the injector's webhook, reached as the
// MutatingWebhookConfiguration says (its path, its service's DNS name,
// its caBundle), injects the agent the chart configured.
func TestChartStarts(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs control plane and injector processes, etcd and kfake clusters")
	}
	endpoints := etcdcluster.Start(t, 1).Endpoints()
	src, dst := kfakePair(t)
	const release, ns = "baton", "baton"
	objs, err := deploy.Render(release, ns, map[string]any{
		"source":      map[string]any{"bootstrap": src.Bootstrap()},
		"destination": map[string]any{"bootstrap": dst.Bootstrap()},
		"etcd":        map[string]any{"enabled": false, "external": map[string]any{"endpoints": toAny(endpoints)}},
		// kfake answers DescribeACLs but enforces none: a fence there
		// would be a promise nobody keeps.
		"controlPlane": map[string]any{"sourceFence": "none"},
	}, "1.30.0")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()

	// The control plane: every replica the StatefulSet runs.
	var sts appsv1.StatefulSet
	renderedObject(t, objs, "StatefulSet", release+"-controlplane", &sts)
	var tokens corev1.Secret
	renderedObject(t, objs, "Secret", release+"-api-tokens", &tokens)
	tokensFile := secretFile(t, dir, tokens.StringData, "tokens.yaml")
	tokenFile := secretFile(t, dir, tokens.StringData, "token")
	// Each replica in a pod of its own: POD_NAME and POD_NAMESPACE as the
	// downward API sets them, and a service account that reaches a
	// stand-in for the Kubernetes API, which keeps the pods' labels.
	kube := kubeapi.Start(t, "controlplane-sa-token")
	saDir := kube.ServiceAccountDir(t, t.TempDir(), ns)
	type replica struct {
		pod  string
		args []string
		env  []string
		proc *controlPlaneProc
	}
	start := func(r *replica) {
		r.proc = runBatonEnv(t, r.env, r.args...)
		wait.For(t, 2*time.Minute, r.pod+" campaigning", func() string {
			select {
			case <-r.proc.exited:
				t.Fatalf("%s exited:\n%s", r.pod, r.proc.log)
			default:
			}
			if !strings.Contains(r.proc.log.String(), "campaigning for leader") {
				return "not yet:\n" + r.proc.log.String()
			}
			return ""
		})
	}
	var replicas []*replica
	for i := range int(*sts.Spec.Replicas) {
		r := &replica{pod: fmt.Sprintf("%s-%d", sts.Name, i)}
		r.args = containerArgs(t, sts.Spec.Template.Spec, r.pod, map[string]string{
			"--grpc": freeTCPAddr(t), "--http": "127.0.0.1:0", "--admin": "127.0.0.1:0", "--api-tokens-file": tokensFile})
		if r.args[0] != "controlplane" {
			t.Fatalf("the control plane container runs baton %s, not baton controlplane", r.args[0])
		}
		r.env = []string{"KUBERNETES_SERVICE_HOST=" + kube.Host(), "KUBERNETES_SERVICE_PORT=" + kube.Port(),
			podlabel.ServiceAccountDirEnv + "=" + saDir}
		for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
			switch {
			case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
				r.env = append(r.env, e.Name+"="+r.pod)
			case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
				r.env = append(r.env, e.Name+"="+ns)
			case e.ValueFrom == nil:
				r.env = append(r.env, e.Name+"="+e.Value)
			}
		}
		t.Logf("%s: baton %s", r.pod, strings.Join(r.args, " "))
		start(r)
		replicas = append(replicas, r)
	}
	if len(replicas) != 3 {
		t.Errorf("the chart runs %d control plane replicas by default, want 3", len(replicas))
	}
	// The API Service selects the leader label: exactly one pod carries
	// it, the one whose replica serves the API.
	var api apiService
	renderedObject(t, objs, "Service", release+"-controlplane-api", &api.svc)
	leader := func(skip *replica) (r *replica, url string) {
		wait.For(t, 2*time.Minute, "one replica elected, serving the API, and the only pod the API Service selects", func() string {
			var selected []string
			r, url = nil, ""
			for _, c := range replicas {
				if c == skip {
					continue
				}
				if api.selects(kube.Labels(ns, c.pod)) {
					selected = append(selected, c.pod)
				}
				if m := upLine.FindStringSubmatch(c.proc.log.String()); m != nil && strings.Contains(c.proc.log.String(), "elected leader") {
					r, url = c, m[1]
				}
			}
			if r == nil {
				return fmt.Sprintf("no leader yet; the Service selects %v", selected)
			}
			if len(selected) != 1 || selected[0] != r.pod {
				return fmt.Sprintf("%s leads, the Service selects %v", r.pod, selected)
			}
			return ""
		})
		return r, url
	}
	lead, apiURL := leader(nil)
	t.Logf("%s leads and is the pod the API Service selects", lead.pod)
	api.url = apiURL
	if out, err := runCLI("topic", "add", "orders", "--server", apiURL, "--token-file", tokenFile); err != nil {
		t.Fatalf("topic add with the chart's operator token: %v\n%s", err, out)
	}
	if resp, err := http.Get(apiURL + "/v1/topics"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the API answered a caller without a token %s, want 401", resp.Status)
	}

	// The leader is killed (SIGKILL: it labels nothing on its way out):
	// another is elected and labels its pod. Kubernetes restarts the
	// killed container; the new process labels its pod not the leader
	// before it campaigns.
	lead.proc.kill()
	next, _ := leader(lead)
	t.Logf("%s killed; %s leads and is labelled so", lead.pod, next.pod)
	start(lead)
	wait.For(t, time.Minute, "the restarted "+lead.pod+" labelled not the leader", func() string {
		if l := kube.Labels(ns, lead.pod); l[leaderLabelKey] != "false" {
			return fmt.Sprintf("labels %v", l)
		}
		return ""
	})
	if l := kube.Labels(ns, next.pod); !api.selects(l) {
		t.Errorf("the leader %s's labels %v are not what the API Service selects", next.pod, l)
	}

	// The injector, with the chart's certificate.
	var dep appsv1.Deployment
	renderedObject(t, objs, "Deployment", release+"-injector", &dep)
	var tlsSecret corev1.Secret
	renderedObject(t, objs, "Secret", release+"-injector-tls", &tlsSecret)
	tlsData := map[string]string{}
	for k, v := range tlsSecret.Data {
		tlsData[k] = string(v)
	}
	certFile, keyFile := secretFile(t, dir, tlsData, "tls.crt"), secretFile(t, dir, tlsData, "tls.key")
	args := containerArgs(t, dep.Spec.Template.Spec, "injector", map[string]string{
		"--listen": "127.0.0.1:0", "--tls-cert": certFile, "--tls-key": keyFile})
	t.Logf("injector: baton %s", strings.Join(args, " "))
	inj := runBaton(t, args...)
	var addr string
	wait.For(t, time.Minute, "the injector up", func() string {
		select {
		case <-inj.exited:
			t.Fatalf("the injector exited:\n%s", inj.log)
		default:
		}
		if m := injectorUp.FindStringSubmatch(inj.log.String()); m != nil {
			addr = m[1]
			return ""
		}
		return "not up yet:\n" + inj.log.String()
	})
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	renderedObject(t, objs, "MutatingWebhookConfiguration", release+"-injector", &mwc)
	if len(mwc.Webhooks) != 1 || mwc.Webhooks[0].ClientConfig.Service == nil {
		t.Fatalf("webhooks %+v: want one, calling a service", mwc.Webhooks)
	}
	hook := mwc.Webhooks[0]
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(hook.ClientConfig.CABundle) {
		t.Fatal("the webhook's caBundle holds no certificate")
	}
	svc := hook.ClientConfig.Service
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, ServerName: svc.Name + "." + svc.Namespace + ".svc"}}}
	var probe corev1.Container = dep.Spec.Template.Spec.Containers[0]
	if resp, err := client.Get("https://" + addr + probe.ReadinessProbe.HTTPGet.Path); err != nil {
		t.Fatalf("the readiness probe's path over the chart's certificate: %v", err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusOK {
		t.Errorf("the readiness probe's path answered %s", resp.Status)
	}
	pod := corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "producer", Namespace: "shop"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "shop/producer:1"}}}}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	review, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "chart-1", Namespace: "shop", Operation: admissionv1.Create,
			Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Object: runtime.RawExtension{Raw: raw}}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Post("https://"+addr+*svc.Path, "application/json", bytes.NewReader(review))
	if err != nil {
		t.Fatalf("the webhook as the MutatingWebhookConfiguration calls it: %v", err)
	}
	defer resp.Body.Close()
	var got admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.Response == nil || !got.Response.Allowed || len(got.Response.Patch) == 0 {
		t.Fatalf("the webhook answered %+v, want the pod allowed with a patch", got.Response)
	}
	patch := string(got.Response.Patch)
	image := dep.Spec.Template.Spec.Containers[0].Image
	for _, want := range []string{image, "restartPolicy", "--control-plane=" + release + "-controlplane-0." + release + "-controlplane-headless." + ns + ".svc:18000"} {
		if !strings.Contains(patch, want) {
			t.Errorf("the injected agent lacks %q; patch:\n%s", want, patch)
		}
	}
}

// apiService is the chart's Service of the HTTP API.
type apiService struct {
	svc corev1.Service
	url string
}

// selects says whether the Service routes to a pod labelled so (the
// chart's other selector labels are on every control plane pod).
func (a *apiService) selects(labels map[string]string) bool {
	v, ok := a.svc.Spec.Selector[leaderLabelKey]
	return ok && labels[leaderLabelKey] == v
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// secretFile writes a rendered Secret's key to a file named so in dir,
// as its volume mounts it, and returns the file's path.
func secretFile(t *testing.T, dir string, data map[string]string, key string) string {
	t.Helper()
	if data[key] == "" {
		t.Fatalf("the rendered Secret has no %s", key)
	}
	return writeFile(t, dir, key, data[key])
}
