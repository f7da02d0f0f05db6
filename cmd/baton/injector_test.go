package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/baton-kafka/baton/injector"
	"github.com/baton-kafka/baton/internal/testcert"
	"github.com/baton-kafka/baton/internal/wait"
)

// podReview is the review of creating a one-container pod in namespace ns.
func podReview(t *testing.T, ns string) []byte {
	t.Helper()
	raw, err := json.Marshal(corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "orders-0", Namespace: ns, Labels: map[string]string{"app": "orders"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "orders:1"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "u1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Namespace: ns, Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var injectorUp = regexp.MustCompile(`msg="injector up" addr=(\S+)`)

// TestInjectorCommand runs `baton injector` in a process of its own with a
// certificate from files, as the chart does, and posts one review.
func TestInjectorCommand(t *testing.T) {
	t.Parallel()
	ca := testcert.New(t)
	_, certFile, keyFile := ca.WriteFiles(t, t.TempDir(), "injector", ca.Server)
	p := runBaton(t, "injector", "--listen", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile,
		"--agent-image", "baton:test", "--source", "source-kafka:9092", "--destination", "dest-kafka:9092",
		"--control-plane", "baton-controlplane:9000", "--native-sidecar", "false")
	var addr string
	wait.For(t, time.Minute, "the injector to come up", func() string {
		select {
		case <-p.exited:
			t.Fatalf("the injector exited:\n%s", p.log)
		default:
		}
		if m := injectorUp.FindStringSubmatch(p.log.String()); m != nil {
			addr = m[1]
			return ""
		}
		return "no \"injector up\" yet; log:\n" + p.log.String()
	})
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}}
	resp, err := c.Post("https://"+addr+injector.PathMutate, "application/json", bytes.NewReader(podReview(t, "shop")))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Response == nil {
		t.Fatalf("HTTP %d: %v", resp.StatusCode, err)
	}
	if !out.Response.Allowed || !bytes.Contains(out.Response.Patch, []byte(`"path":"/spec/containers/0"`)) {
		t.Errorf("want the agent added as the first plain container (--native-sidecar false); got %s", out.Response.Patch)
	}
}

// TestInjectorCommandRefusesBadFlags checks a bad flag is refused naming
// it, before anything listens.
func TestInjectorCommandRefusesBadFlags(t *testing.T) {
	t.Parallel()
	ca := testcert.New(t)
	_, certFile, keyFile := ca.WriteFiles(t, t.TempDir(), "injector", ca.Server)
	ok := []string{"--listen", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile,
		"--agent-image", "baton:test", "--source", "s:9092", "--destination", "d:9092"}
	cases := []struct {
		name  string
		args  []string
		wants string
	}{
		{"no image", []string{"--listen", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile, "--source", "s:9092", "--destination", "d:9092"}, "agent image"},
		{"no tls", []string{"--agent-image", "b", "--source", "s:9092", "--destination", "d:9092"}, "tls"},
		{"source without a port", append(ok, "--source", "s"), "--source"},
		{"pull policy", append(ok, "--image-pull-policy", "Sometimes"), "--image-pull-policy"},
		{"native", append(ok, "--native-sidecar", "maybe"), "native sidecar"},
		{"version", append(ok, "--kubernetes-version", "latest"), "kubernetes version"},
		{"secret file", append(ok, "--secret", "s", "--secret-file", "nope"), "--secret-file"},
		{"secret file flag", append(ok, "--secret", "s", "--secret-file", "listen=x"), "not an agent flag"},
		{"agent arg", append(ok, "--agent-arg", "log-level=debug"), "agent args"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			root := newRootCmd()
			root.SetArgs(append([]string{"injector"}, c.args...))
			root.SetOut(&bytes.Buffer{})
			root.SetErr(&bytes.Buffer{})
			err := root.Execute()
			if err == nil || !strings.Contains(err.Error(), c.wants) {
				t.Errorf("got %v, want an error naming %q", err, c.wants)
			}
		})
	}
}

// TestInjectedArgsAreAgentFlags parses the args the injector gives the
// agent with the real `baton agent` command's flags and address checks, so
// that the injector cannot drift from the agent it injects.
func TestInjectedArgsAreAgentFlags(t *testing.T) {
	t.Parallel()
	cfg := injector.Config{AgentImage: "baton:test", Source: "s:9092", Destination: "d:9092", ControlPlane: "cp:9000",
		Secret: "creds", AgentArgs: []string{"--upstream-conns=2"}, SecretFiles: map[string]string{}}
	for _, f := range injector.SecretFileFlags() {
		cfg.SecretFiles[f] = f
	}
	ann := map[string]string{}
	for _, f := range injector.AgentFlags() {
		ann[injector.AnnotationAgentPrefix+f] = map[string]string{
			"log-level": "debug", "byte-counters": "userspace", "forward-without-lease": "never", "write-ranges": "on",
			"forward-deadline": "3s", "frame-timeout": "3s", "idle-timeout": "3s", "producer-id-idle": "3s"}[f]
		if ann[injector.AnnotationAgentPrefix+f] == "" {
			ann[injector.AnnotationAgentPrefix+f] = "4096"
		}
	}
	in, err := injector.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "shop", Annotations: ann, Labels: map[string]string{"app": "orders"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
	raw, _ := json.Marshal(pod)
	out := in.Mutate(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Namespace: "shop", Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}}})
	if !out.Response.Allowed {
		t.Fatalf("refused: %+v", out.Response.Result)
	}
	var ops []struct {
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(out.Response.Patch, &ops); err != nil {
		t.Fatal(err)
	}
	var agent *corev1.Container
	for _, op := range ops {
		if op.Path == "/spec/initContainers" {
			var cs []corev1.Container
			if err := json.Unmarshal(op.Value, &cs); err != nil {
				t.Fatal(err)
			}
			agent = &cs[0]
		}
	}
	if agent == nil {
		t.Fatalf("no agent in the patch %s", out.Response.Patch)
	}
	// The kubelet expands $(VAR) from the container's env.
	env := map[string]string{"BATON_POD_NAME": "p", "BATON_POD_NAMESPACE": "shop"}
	for _, e := range agent.Env {
		if e.Value != "" {
			env[e.Name] = e.Value
		}
	}
	args := make([]string, len(agent.Args))
	for i, a := range agent.Args {
		args[i] = os.Expand(strings.NewReplacer("$(", "${", ")", "}").Replace(a), func(k string) string { return env[k] })
	}
	if args[0] != "agent" {
		t.Fatalf("args %q: want the agent command first", args)
	}
	cmd := newAgentCmd()
	if err := cmd.Flags().Parse(args[1:]); err != nil {
		t.Fatalf("the agent refuses the injected args %q: %v", args, err)
	}
	if err := checkAddrFlags(cmd); err != nil {
		t.Errorf("the agent refuses an injected address: %v", err)
	}
	if got, _ := cmd.Flags().GetString("namespace"); got != "shop" {
		t.Errorf("--namespace %q, want shop", got)
	}
	if got, _ := cmd.Flags().GetString("node-id"); got != "shop/p" {
		t.Errorf("--node-id %q, want shop/p", got)
	}
}
