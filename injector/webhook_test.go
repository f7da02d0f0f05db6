package injector_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/baton-kafka/baton/injector"
	"github.com/baton-kafka/baton/internal/testcert"
	"github.com/baton-kafka/baton/internal/wait"
)

// baseConfig is an injector's config as the chart's defaults give it.
func baseConfig() injector.Config {
	return injector.Config{
		AgentImage:   "ghcr.io/baton-kafka/baton:test",
		Source:       "source-kafka:9092",
		Destination:  "dest-kafka:9092",
		ControlPlane: "baton-controlplane.baton:9000",
	}
}

// appPod is a Deployment's pod with one app container.
func appPod(ns string, ann map[string]string) *corev1.Pod {
	yes := true
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "orders-7d9f8-", Namespace: ns, Annotations: ann,
			Labels: map[string]string{"pod-template-hash": "7d9f8"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet",
				Name: "orders-7d9f8", UID: "rs-1", Controller: &yes}},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "orders:1",
			Env: []corev1.EnvVar{{Name: "KAFKA_BOOTSTRAP_SERVERS", Value: "source-kafka:9092"}},
		}}},
	}
}

// review is the AdmissionReview the API server sends for creating pod.
func review(t *testing.T, pod *corev1.Pod) []byte {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID("uid-" + pod.Namespace),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: pod.Namespace, Operation: admissionv1.Create,
			Object: runtime.RawExtension{Raw: raw},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// post sends body to the webhook at url and decodes the answer; it
// returns the HTTP status and, for a 200, the review.
func post(t *testing.T, c *http.Client, url string, body []byte) (int, admissionv1.AdmissionReview, string) {
	t.Helper()
	resp, err := c.Post(url+injector.PathMutate, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out admissionv1.AdmissionReview
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("a 200 that is no AdmissionReview: %v\n%s", err, b)
		}
	}
	return resp.StatusCode, out, string(b)
}

// patched applies the review's patch to pod and decodes the result.
func patched(t *testing.T, pod *corev1.Pod, resp *admissionv1.AdmissionResponse) *corev1.Pod {
	t.Helper()
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patch type %v, want JSONPatch", resp.PatchType)
	}
	doc, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	var out corev1.Pod
	dec := json.NewDecoder(bytes.NewReader(applyPatch(t, doc, resp.Patch)))
	dec.DisallowUnknownFields() // a patch that adds a field Kubernetes does not have fails here
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("the patched pod does not decode as a core/v1 Pod: %v", err)
	}
	return &out
}

func agentOf(pod *corev1.Pod) (c *corev1.Container, native bool) {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == injector.ContainerName {
			return &pod.Spec.InitContainers[i], true
		}
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == injector.ContainerName {
			return &pod.Spec.Containers[i], false
		}
	}
	return nil, false
}

func envOf(c *corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// TestWebhookInjects posts real AdmissionReviews over HTTPS and checks the
// pods the patches make.
func TestWebhookInjects(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		cfg    func(*injector.Config)
		ann    map[string]string
		native bool
		check  func(t *testing.T, pod *corev1.Pod, agent *corev1.Container)
	}{
		{name: "native sidecar by default", native: true, check: func(t *testing.T, pod *corev1.Pod, agent *corev1.Container) {
			if agent.RestartPolicy == nil || *agent.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				t.Errorf("restartPolicy %v, want Always (a native sidecar)", agent.RestartPolicy)
			}
			app := &pod.Spec.Containers[0]
			if v, _ := envOf(app, injector.EnvBootstrap); v != "127.0.0.1:9092" {
				t.Errorf("app %s = %q, want 127.0.0.1:9092", injector.EnvBootstrap, v)
			}
			if v, _ := envOf(app, injector.EnvKafkaBootstrap); v != "source-kafka:9092" {
				t.Errorf("app %s = %q: changed without the override annotation", injector.EnvKafkaBootstrap, v)
			}
			p := agent.ReadinessProbe
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.String() != injector.AdminPortName {
				t.Errorf("readiness probe %+v, want GET /readyz on %s", p, injector.AdminPortName)
			}
			if len(agent.Ports) != 1 || agent.Ports[0].ContainerPort != injector.DefaultAdminPort {
				t.Errorf("ports %+v, want the admin port %d", agent.Ports, injector.DefaultAdminPort)
			}
			for _, want := range []string{"--source=source-kafka:9092", "--destination=dest-kafka:9092",
				"--control-plane=baton-controlplane.baton:9000", "--listen=127.0.0.1:9092", "--state-dir=/var/lib/baton",
				"--namespace=$(BATON_POD_NAMESPACE)", "--workload=$(BATON_WORKLOAD)"} {
				if !slices.Contains(agent.Args, want) {
					t.Errorf("args %q lack %s", agent.Args, want)
				}
			}
			if v, _ := envOf(agent, "BATON_WORKLOAD"); v != "orders" {
				t.Errorf("workload %q, want orders (the ReplicaSet's name without its hash)", v)
			}
			var ns string
			for _, e := range agent.Env {
				if e.Name == "BATON_POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
					ns = e.ValueFrom.FieldRef.FieldPath
				}
			}
			if ns != "metadata.namespace" {
				t.Errorf("namespace from %q, want the downward API's metadata.namespace", ns)
			}
			sc := agent.SecurityContext
			if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("security context %+v, want non-root and a read-only root", sc)
			}
			if !slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == injector.StateVolume && v.EmptyDir != nil }) {
				t.Errorf("volumes %+v lack the state emptyDir", pod.Spec.Volumes)
			}
		}},
		{name: "plain container before 1.29", native: false,
			cfg: func(c *injector.Config) { c.KubernetesVersion = "v1.28.3" },
			check: func(t *testing.T, pod *corev1.Pod, agent *corev1.Container) {
				if pod.Spec.Containers[0].Name != injector.ContainerName || agent.RestartPolicy != nil {
					t.Errorf("want the agent first among containers, without a restartPolicy; got %+v", pod.Spec.Containers)
				}
				if v, _ := envOf(&pod.Spec.Containers[1], injector.EnvBootstrap); v != "127.0.0.1:9092" {
					t.Errorf("app %s = %q", injector.EnvBootstrap, v)
				}
			}},
		{name: "bootstrap override, options and a secret",
			native: true,
			cfg: func(c *injector.Config) {
				c.Secret = "baton-agent"
				c.SecretFiles = map[string]string{"source-sasl-password-file": "source.password"}
			},
			ann: map[string]string{injector.AnnotationOverrideBootstrap: "true",
				injector.AnnotationAgentPrefix + "log-level": "debug", injector.AnnotationWorkload: "orders-api"},
			check: func(t *testing.T, pod *corev1.Pod, agent *corev1.Container) {
				if v, _ := envOf(&pod.Spec.Containers[0], injector.EnvKafkaBootstrap); v != "127.0.0.1:9092" {
					t.Errorf("app %s = %q, want the agent with the override", injector.EnvKafkaBootstrap, v)
				}
				for _, want := range []string{"--log-level=debug", "--source-sasl-password-file=/etc/baton/secret/source.password"} {
					if !slices.Contains(agent.Args, want) {
						t.Errorf("args %q lack %s", agent.Args, want)
					}
				}
				if v, _ := envOf(agent, "BATON_WORKLOAD"); v != "orders-api" {
					t.Errorf("workload %q, want the annotation's", v)
				}
				if !slices.ContainsFunc(agent.VolumeMounts, func(m corev1.VolumeMount) bool {
					return m.Name == injector.SecretVolume && m.ReadOnly && m.MountPath == injector.SecretDir
				}) {
					t.Errorf("mounts %+v lack the secret, read-only", agent.VolumeMounts)
				}
				if !slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool {
					return v.Secret != nil && v.Secret.SecretName == "baton-agent"
				}) {
					t.Errorf("volumes %+v lack Secret baton-agent", pod.Spec.Volumes)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := baseConfig()
			if c.cfg != nil {
				c.cfg(&cfg)
			}
			in, err := injector.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewTLSServer(in.Handler(nil))
			t.Cleanup(srv.Close)
			pod := appPod("shop", c.ann)
			code, out, body := post(t, srv.Client(), srv.URL, review(t, pod))
			if code != http.StatusOK || out.Response == nil || !out.Response.Allowed {
				t.Fatalf("HTTP %d, %s", code, body)
			}
			if out.Response.UID != "uid-shop" {
				t.Errorf("response uid %q, want the request's", out.Response.UID)
			}
			got := patched(t, pod, out.Response)
			agent, native := agentOf(got)
			if agent == nil {
				t.Fatalf("no %s container in %+v", injector.ContainerName, got.Spec)
			}
			if native != c.native {
				t.Errorf("native sidecar %v, want %v", native, c.native)
			}
			c.check(t, got, agent)

			// Injected twice: the second review changes nothing.
			code, again, body := post(t, srv.Client(), srv.URL, review(t, got))
			if code != http.StatusOK || !again.Response.Allowed || again.Response.Patch != nil {
				t.Errorf("the injected pod reviewed again: HTTP %d, %s; want allowed with no patch", code, body)
			}
		})
	}
}

// TestWebhookLeavesAlone checks the pods the injector must not change are
// allowed as they are, and the pods it cannot inject are refused with the
// reason.
func TestWebhookLeavesAlone(t *testing.T) {
	t.Parallel()
	cfg := baseConfig()
	cfg.Namespaces = []string{"shop"}
	in, err := injector.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(in.Handler(nil))
	t.Cleanup(srv.Close)
	hostNet := appPod("shop", nil)
	hostNet.Spec.HostNetwork = true
	cases := []struct {
		name    string
		pod     *corev1.Pod
		refused string // "" allowed unchanged; else a part of the refusal
	}{
		{"opted out", appPod("shop", map[string]string{injector.AnnotationInject: "false"}), ""},
		{"another namespace", appPod("billing", nil), ""},
		{"host network", hostNet, ""},
		{"misspelt opt-out", appPod("shop", map[string]string{injector.AnnotationInject: "no"}), "annotation baton.io/inject"},
		{"unknown agent option", appPod("shop", map[string]string{injector.AnnotationAgentPrefix + "listen": ":1"}), "annotation baton.io/agent-listen: unknown"},
		{"bad agent option", appPod("shop", map[string]string{injector.AnnotationAgentPrefix + "upstream-conns": "many"}), "annotation baton.io/agent-upstream-conns"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, out, body := post(t, srv.Client(), srv.URL, review(t, c.pod))
			if code != http.StatusOK || out.Response == nil {
				t.Fatalf("HTTP %d, %s", code, body)
			}
			r := out.Response
			if c.refused == "" {
				if !r.Allowed || r.Patch != nil {
					t.Errorf("want allowed and untouched, got %s", body)
				}
				return
			}
			if r.Allowed || r.Result == nil || !strings.Contains(r.Result.Message, c.refused) {
				t.Errorf("want refused naming %q, got %s", c.refused, body)
			}
		})
	}
}

// TestWebhookMalformed sends what no API server would; each gets an error
// answer and the server keeps serving.
func TestWebhookMalformed(t *testing.T) {
	t.Parallel()
	in, err := injector.New(baseConfig())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(in.Handler(nil))
	t.Cleanup(srv.Close)
	noRequest := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`
	notPod := strings.Replace(string(review(t, appPod("shop", nil))), `"kind":"Pod"`, `"kind":"Service"`, 1)
	badObject := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":{"spec":{"containers":"x"}}}}`
	cases := []struct {
		name, body string
		code       int
		message    string // for a 200: a part of response.result.message
	}{
		{"not JSON", `{"apiVersion":`, http.StatusBadRequest, ""},
		{"no request", noRequest, http.StatusOK, "no request"},
		{"v1beta1", strings.Replace(noRequest, "/v1", "/v1beta1", 1), http.StatusOK, "want admission.k8s.io/v1"},
		{"not a pod", notPod, http.StatusOK, "pods only"},
		{"a pod that is no pod", badObject, http.StatusOK, "request.object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, out, body := post(t, srv.Client(), srv.URL, []byte(c.body))
			if code != c.code {
				t.Fatalf("HTTP %d, want %d: %s", code, c.code, body)
			}
			if code != http.StatusOK {
				return
			}
			r := out.Response
			if r == nil || r.Allowed || r.Result == nil || !strings.Contains(r.Result.Message, c.message) {
				t.Errorf("want allowed false with %q, got %s", c.message, body)
			}
		})
	}
	// Still serving the next review.
	if code, out, body := post(t, srv.Client(), srv.URL, review(t, appPod("shop", nil))); code != http.StatusOK || out.Response.Patch == nil {
		t.Errorf("after the malformed reviews: HTTP %d, %s", code, body)
	}
}

// TestServerTLS runs the Server as `baton injector` does, with a
// certificate from files, and checks a client that trusts the CA gets an
// injection over HTTPS.
func TestServerTLS(t *testing.T) {
	t.Parallel()
	ca := testcert.New(t)
	_, certFile, keyFile := ca.WriteFiles(t, t.TempDir(), "injector", ca.Server)
	in, err := injector.New(baseConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := injector.NewServer(in, "127.0.0.1:0", "", "", nil); !errors.Is(err, injector.ErrBadConfig) {
		t.Errorf("no certificate: %v, want ErrBadConfig", err)
	}
	if _, err := injector.NewServer(in, "127.0.0.1:0", filepath.Join(t.TempDir(), "none.pem"), keyFile, nil); !errors.Is(err, injector.ErrBadConfig) {
		t.Errorf("a missing certificate file: %v, want ErrBadConfig", err)
	}
	srv, err := injector.NewServer(in, "127.0.0.1:0", certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}}
	url := "https://" + srv.Addr()
	wait.For(t, time.Minute, "the injector to answer /healthz", func() string {
		resp, err := c.Get(url + injector.PathHealthz)
		if err != nil {
			return err.Error()
		}
		resp.Body.Close()
		return ""
	})
	code, out, body := post(t, c, url, review(t, appPod("shop", nil)))
	if code != http.StatusOK || out.Response == nil || out.Response.Patch == nil {
		t.Fatalf("HTTP %d, %s", code, body)
	}
}
