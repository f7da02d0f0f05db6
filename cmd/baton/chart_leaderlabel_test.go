package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/baton-kafka/baton/deploy"
	"github.com/baton-kafka/baton/internal/podlabel"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/test/etcdcluster"
	"github.com/baton-kafka/baton/test/kubeapi"
)

// chartReplica is one control plane replica of the rendered chart, run as
// its pod would run it, against a stand-in Kubernetes API.
type chartReplica struct {
	pod, http string
	proc      *controlPlaneProc
}

// startChartReplicas renders the chart with values and starts its
// control plane replicas for the pods named (ordinals of the StatefulSet),
// each waited for until it campaigns or exits.
func startChartReplicas(t *testing.T, kube *kubeapi.Server, values map[string]any, ordinals ...int) []*chartReplica {
	t.Helper()
	const release, ns = "baton", "baton"
	objs, err := deploy.Render(release, ns, values, "1.30.0")
	if err != nil {
		t.Fatal(err)
	}
	var sts appsv1.StatefulSet
	renderedObject(t, objs, "StatefulSet", release+"-controlplane", &sts)
	var tokens corev1.Secret
	renderedObject(t, objs, "Secret", release+"-api-tokens", &tokens)
	tokensFile := secretFile(t, t.TempDir(), tokens.StringData, "tokens.yaml")
	saDir := kube.ServiceAccountDir(t, t.TempDir(), ns)
	var out []*chartReplica
	for _, i := range ordinals {
		r := &chartReplica{pod: fmt.Sprintf("%s-%d", sts.Name, i), http: freeTCPAddr(t)}
		args := containerArgs(t, sts.Spec.Template.Spec, r.pod, map[string]string{
			"--grpc": freeTCPAddr(t), "--http": r.http, "--admin": "127.0.0.1:0", "--api-tokens-file": tokensFile})
		env := []string{"KUBERNETES_SERVICE_HOST=" + kube.Host(), "KUBERNETES_SERVICE_PORT=" + kube.Port(),
			podlabel.ServiceAccountDirEnv + "=" + saDir, "POD_NAME=" + r.pod, "POD_NAMESPACE=" + ns}
		r.proc = runBatonEnv(t, env, args...)
		wait.For(t, 2*time.Minute, r.pod+" campaigning", func() string {
			if strings.Contains(r.proc.log.String(), "campaigning for leader") {
				return ""
			}
			select {
			case <-r.proc.exited:
				t.Fatalf("%s exited before campaigning:\n%s", r.pod, r.proc.log)
			default:
			}
			return "not yet:\n" + r.proc.log.String()
		})
		out = append(out, r)
	}
	return out
}

// TestChartLeaderLabelledOnlyWhileServing: the API Service routes to the
// pod labelled the leader, so a replica must not label its pod so before
// it serves the HTTP API. A leader whose source does not answer spends
// --source-fence=auto's detection (30 s) after its election and before it
// listens on --http, and then exits: its pod must never have been
// labelled true.
func TestChartLeaderLabelledOnlyWhileServing(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a control plane process, etcd and a kfake cluster")
	}
	endpoints := etcdcluster.Start(t, 1).Endpoints()
	_, dst := kfakePair(t)
	kube := kubeapi.Start(t, "controlplane-sa-token")
	unreachable := freeTCPAddr(t) // nothing listens there: the source is down
	rs := startChartReplicas(t, kube, map[string]any{
		"source":       map[string]any{"bootstrap": unreachable},
		"destination":  map[string]any{"bootstrap": dst.Bootstrap()},
		"etcd":         map[string]any{"enabled": false, "external": map[string]any{"endpoints": toAny(endpoints)}},
		"controlPlane": map[string]any{"sourceFence": "auto"},
	}, 0)
	r := rs[0]
	wait.For(t, 2*time.Minute, r.pod+" elected and then exited, its source out of reach", func() string {
		select {
		case <-r.proc.exited:
			return ""
		default:
			return "still running:\n" + r.proc.log.String()
		}
	})
	log := r.proc.log.String()
	if !strings.Contains(log, "elected leader") {
		t.Fatalf("%s was never elected:\n%s", r.pod, log)
	}
	if upLine.MatchString(log) {
		t.Fatalf("%s served the HTTP API after all (the source was reachable?):\n%s", r.pod, log)
	}
	for _, c := range kube.History() {
		if c.Name == r.pod && c.Key == leaderLabelKey && c.Value == "true" {
			t.Errorf("%s never served the HTTP API, yet its pod was labelled %s=true: the API Service routed to it "+
				"while nothing listened on --http; label changes: %+v\nlog:\n%s", r.pod, leaderLabelKey, kube.History(), log)
			break
		}
	}
}

// TestChartStalledLeaderUnlabelled: a leader that stalls (SIGSTOP: a long
// pause, a hung node) loses its etcd session and another replica is
// elected. The stalled pod still passes its tcpSocket readiness probe
// (the kernel completes the handshake for it), so it must not still be
// labelled the leader, or the API Service routes to two pods, one of which
// answers nothing.
func TestChartStalledLeaderUnlabelled(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs control plane processes, etcd and kfake clusters")
	}
	endpoints := etcdcluster.Start(t, 1).Endpoints()
	src, dst := kfakePair(t)
	kube := kubeapi.Start(t, "controlplane-sa-token")
	rs := startChartReplicas(t, kube, map[string]any{
		"source":       map[string]any{"bootstrap": src.Bootstrap()},
		"destination":  map[string]any{"bootstrap": dst.Bootstrap()},
		"etcd":         map[string]any{"enabled": false, "external": map[string]any{"endpoints": toAny(endpoints)}},
		"controlPlane": map[string]any{"sourceFence": "none"},
	}, 0, 1)
	const ns = "baton"
	leaderOf := func(skip *chartReplica) *chartReplica {
		var lead *chartReplica
		wait.For(t, 2*time.Minute, "a replica serving the API and labelled the leader", func() string {
			lead = nil
			for _, r := range rs {
				if r != skip && upLine.MatchString(r.proc.log.String()) && kube.Labels(ns, r.pod)[leaderLabelKey] == "true" {
					lead = r
					return ""
				}
			}
			return fmt.Sprintf("none yet; labels: %v", kube.History())
		})
		return lead
	}
	stalled := leaderOf(nil)
	if err := stalled.proc.proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = stalled.proc.proc.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(resume) // before the SIGTERM of runBaton's cleanup
	next := leaderOf(stalled)
	got := kube.Labels(ns, stalled.pod)[leaderLabelKey]
	resume()
	if got == "true" {
		t.Errorf("%s leads and is labelled %s=true, and the stalled former leader %s is still labelled true: "+
			"the API Service selects both; label changes: %+v", next.pod, leaderLabelKey, stalled.pod, kube.History())
	}
}

// TestChartReplicaStartsThroughABriefAPIOutage: --leader-label gives its
// first label 30 s; one 503 from the Kubernetes API (an API server being
// upgraded) must not stop the replica's start, which the pod would repeat
// under CrashLoopBackOff. A refusal (RBAC) still is final
// (podlabel.TestSet, newLeaderLabel).
func TestChartReplicaStartsThroughABriefAPIOutage(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a control plane process, etcd and kfake clusters")
	}
	endpoints := etcdcluster.Start(t, 1).Endpoints()
	src, dst := kfakePair(t)
	kube := kubeapi.Start(t, "controlplane-sa-token")
	kube.Unavailable(1)
	// startChartReplicas fails the test if the replica exits before it
	// campaigns.
	rs := startChartReplicas(t, kube, map[string]any{
		"source":       map[string]any{"bootstrap": src.Bootstrap()},
		"destination":  map[string]any{"bootstrap": dst.Bootstrap()},
		"etcd":         map[string]any{"enabled": false, "external": map[string]any{"endpoints": toAny(endpoints)}},
		"controlPlane": map[string]any{"sourceFence": "none"},
	}, 0)
	if got := kube.Labels("baton", rs[0].pod)[leaderLabelKey]; got != "false" && got != "true" {
		t.Errorf("%s campaigns with its pod's %s %q, want it labelled", rs[0].pod, leaderLabelKey, got)
	}
}
