package podlabel_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/baton-kafka/baton/internal/podlabel"
	"github.com/baton-kafka/baton/test/kubeapi"
)

// TestSet labels the pod the environment names, through a stand-in API
// server that checks the request as Kubernetes does; a refusal (RBAC)
// comes back with the API server's reason.
func TestSet(t *testing.T) {
	api := kubeapi.Start(t, "sa-token")
	t.Setenv("KUBERNETES_SERVICE_HOST", api.Host())
	t.Setenv("KUBERNETES_SERVICE_PORT", api.Port())
	t.Setenv(podlabel.ServiceAccountDirEnv, api.ServiceAccountDir(t, t.TempDir(), "baton"))
	t.Setenv("POD_NAME", "baton-controlplane-1")
	t.Setenv("POD_NAMESPACE", "")
	pod, err := podlabel.InCluster()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, v := range []string{"false", "true"} {
		if err := pod.Set(ctx, "baton.io/leader", v); err != nil {
			t.Fatal(err)
		}
		if got := api.Labels("baton", "baton-controlplane-1")["baton.io/leader"]; got != v {
			t.Fatalf("label baton.io/leader is %q, want %q", got, v)
		}
	}
	api.Unavailable(1)
	if err := pod.Set(ctx, "baton.io/leader", "false"); !podlabel.Temporary(err) {
		t.Fatalf("a 503: %v, want a temporary error", err)
	}
	api.Forbid(true)
	err = pod.Set(ctx, "baton.io/leader", "false")
	if !errors.Is(err, podlabel.ErrAPI) || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "cannot patch resource") {
		t.Fatalf("a forbidden patch: %v, want ErrAPI with the status and the API server's message", err)
	}
	if podlabel.Temporary(err) || podlabel.NotFound(err) {
		t.Fatalf("a 403 is final and not a missing pod: %v", err)
	}
}

// TestInClusterNamesWhatIsMissing: outside a pod, or without POD_NAME or
// the service account, InCluster says what is missing.
func TestInClusterNamesWhatIsMissing(t *testing.T) {
	api := kubeapi.Start(t, "sa-token")
	saDir := api.ServiceAccountDir(t, t.TempDir(), "baton")
	for _, tc := range []struct {
		name, host, pod, dir, want string
	}{
		{"no API server", "", "p", saDir, "KUBERNETES_SERVICE_HOST"},
		{"no pod name", api.Host(), "", saDir, "POD_NAME"},
		{"no service account", api.Host(), "p", t.TempDir(), "automountServiceAccountToken"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBERNETES_SERVICE_HOST", tc.host)
			t.Setenv("KUBERNETES_SERVICE_PORT", api.Port())
			t.Setenv("POD_NAME", tc.pod)
			t.Setenv(podlabel.ServiceAccountDirEnv, tc.dir)
			_, err := podlabel.InCluster()
			if !errors.Is(err, podlabel.ErrNotInCluster) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("InCluster: %v, want ErrNotInCluster naming %s", err, tc.want)
			}
		})
	}
}
