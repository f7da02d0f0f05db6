package injector

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Mutate answers one AdmissionReview. A pod in an injected namespace gets
// the agent by a JSON patch; a pod elsewhere, opted out, on the host's
// network, already injected, or a request other than CREATE is allowed
// unchanged; a pod whose annotations the injector cannot follow is
// refused (allowed false) with the reason. A review that is not one of a
// pod is answered allowed false with ErrBadReview's message. The answer
// carries the request's UID, as the API server requires.
func (in *Injector) Mutate(review admissionv1.AdmissionReview) admissionv1.AdmissionReview {
	out := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{
		APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"}}
	resp, err := in.mutate(review)
	if err != nil {
		resp = &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
			Status: metav1.StatusFailure, Message: err.Error(), Reason: metav1.StatusReasonBadRequest, Code: 400}}
	}
	if review.Request != nil {
		resp.UID = review.Request.UID
	}
	out.Response = resp
	return out
}

func (in *Injector) mutate(review admissionv1.AdmissionReview) (*admissionv1.AdmissionResponse, error) {
	if review.APIVersion != admissionv1.SchemeGroupVersion.String() || review.Kind != "AdmissionReview" {
		return nil, fmt.Errorf("%w: apiVersion %q kind %q: want %s AdmissionReview",
			ErrBadReview, review.APIVersion, review.Kind, admissionv1.SchemeGroupVersion)
	}
	req := review.Request
	if req == nil {
		return nil, fmt.Errorf("%w: no request", ErrBadReview)
	}
	if req.Kind.Group != "" || req.Kind.Kind != "Pod" {
		return nil, fmt.Errorf("%w: request.kind %s: the injector mutates pods only (the webhook's rules should match pods alone)",
			ErrBadReview, req.Kind.String())
	}
	allow := &admissionv1.AdmissionResponse{Allowed: true}
	if req.Operation != admissionv1.Create {
		return allow, nil
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return nil, fmt.Errorf("%w: request.object: %w", ErrBadReview, err)
	}
	ns := req.Namespace
	if ns == "" {
		ns = pod.Namespace
	}
	if in.ns != nil && !in.ns[ns] {
		return allow, nil
	}
	if pod.Annotations[AnnotationInject] == "false" || injected(&pod) {
		return allow, nil
	}
	if pod.Spec.HostNetwork {
		allow.Warnings = []string{"baton: not injected: the pod is on the host's network, where the agent's ports are the node's"}
		return allow, nil
	}
	opts, err := readAnnotations(pod.Annotations)
	if err != nil {
		return nil, err
	}
	ops, err := in.patch(&pod, opts)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRefused, err) // cannot happen: the values are k8s types
	}
	pt := admissionv1.PatchTypeJSONPatch
	allow.Patch, allow.PatchType = b, &pt
	return allow, nil
}

// injected says whether the pod has the agent's container already.
func injected(pod *corev1.Pod) bool {
	is := func(c corev1.Container) bool { return c.Name == ContainerName }
	return slices.ContainsFunc(pod.Spec.Containers, is) || slices.ContainsFunc(pod.Spec.InitContainers, is)
}

// patchOp is one RFC 6902 operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// patch is the pod's JSON patch: the app containers' env first (their
// indexes are the pod's own), then the volumes, then the agent.
func (in *Injector) patch(pod *corev1.Pod, opts podOptions) ([]patchOp, error) {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, p := range c.Ports {
				if int(p.ContainerPort) == in.cfg.ListenPort || int(p.ContainerPort) == in.cfg.AdminPort {
					return nil, fmt.Errorf("%w: container %s declares port %d, one of the agent's (%d, %d): opt the pod out (%s: \"false\") or give the injector other agent ports",
						ErrRefused, c.Name, p.ContainerPort, in.cfg.ListenPort, in.cfg.AdminPort, AnnotationInject)
				}
			}
		}
	}
	secret := in.cfg.Secret
	if opts.secret != "" {
		secret = opts.secret
	}
	var ops []patchOp
	bootstrap := net.JoinHostPort("127.0.0.1", strconv.Itoa(in.cfg.ListenPort))
	env := []corev1.EnvVar{{Name: EnvBootstrap, Value: bootstrap}}
	if opts.overrideBootstrap {
		env = append(env, corev1.EnvVar{Name: EnvKafkaBootstrap, Value: bootstrap})
	}
	for i, c := range pod.Spec.Containers {
		ops = append(ops, setEnv(fmt.Sprintf("/spec/containers/%d/env", i), c.Env, env)...)
	}
	vols := []corev1.Volume{{Name: StateVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	if secret != "" {
		vols = append(vols, corev1.Volume{Name: SecretVolume, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: secret}}})
	}
	for _, v := range vols {
		if slices.ContainsFunc(pod.Spec.Volumes, func(p corev1.Volume) bool { return p.Name == v.Name }) {
			return nil, fmt.Errorf("%w: the pod has a volume named %s already, the agent's", ErrRefused, v.Name)
		}
	}
	ops = appendAll(ops, "/spec/volumes", len(pod.Spec.Volumes), vols)
	agent := in.container(workloadOf(pod, opts), secret != "", opts.agentArgs)
	if in.native {
		ops = appendAll(ops, "/spec/initContainers", len(pod.Spec.InitContainers), []corev1.Container{agent})
	} else {
		ops = append(ops, patchOp{Op: "add", Path: "/spec/containers/0", Value: agent})
	}
	return ops, nil
}

// setEnv sets vars in a container's env at path: each replaces the one of
// its name, else is appended.
func setEnv(path string, have, vars []corev1.EnvVar) []patchOp {
	if len(have) == 0 {
		return []patchOp{{Op: "add", Path: path, Value: vars}}
	}
	var ops []patchOp
	for _, v := range vars {
		if i := slices.IndexFunc(have, func(e corev1.EnvVar) bool { return e.Name == v.Name }); i >= 0 {
			ops = append(ops, patchOp{Op: "replace", Path: fmt.Sprintf("%s/%d", path, i), Value: v})
			continue
		}
		ops = append(ops, patchOp{Op: "add", Path: path + "/-", Value: v})
	}
	return ops
}

// appendAll appends vs to the array at path, which has n elements (0: it
// may be absent, and is added whole).
func appendAll[T any](ops []patchOp, path string, n int, vs []T) []patchOp {
	if n == 0 {
		return append(ops, patchOp{Op: "add", Path: path, Value: vs})
	}
	for _, v := range vs {
		ops = append(ops, patchOp{Op: "add", Path: path + "/-", Value: v})
	}
	return ops
}

// workloadOf is the pod's workload: its annotation, else the label
// app.kubernetes.io/name, else the label app, else its controller's name
// (a ReplicaSet's without the pod template hash: the Deployment's), else
// "".
func workloadOf(pod *corev1.Pod, opts podOptions) string {
	if opts.workload != "" {
		return opts.workload
	}
	for _, l := range []string{"app.kubernetes.io/name", "app"} {
		if v := pod.Labels[l]; v != "" {
			return v
		}
	}
	for _, o := range pod.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			if h := pod.Labels["pod-template-hash"]; o.Kind == "ReplicaSet" && h != "" {
				return strings.TrimSuffix(o.Name, "-"+h)
			}
			return o.Name
		}
	}
	return ""
}

// The agent container's env: the downward API's pod name and namespace,
// and the workload.
const (
	envPodName   = "BATON_POD_NAME"
	envNamespace = "BATON_POD_NAMESPACE"
	envWorkload  = "BATON_WORKLOAD"
)

// container is the agent's container.
func (in *Injector) container(workload string, secret bool, podArgs []string) corev1.Container {
	args := []string{"agent",
		"--listen=" + net.JoinHostPort("127.0.0.1", strconv.Itoa(in.cfg.ListenPort)),
		"--admin=" + net.JoinHostPort("", strconv.Itoa(in.cfg.AdminPort)),
		"--source=" + in.cfg.Source,
		"--destination=" + in.cfg.Destination,
	}
	if in.cfg.ControlPlane != "" {
		args = append(args, "--control-plane="+in.cfg.ControlPlane)
	}
	// Pod names are unique within a namespace only.
	args = append(args, "--node-id=$("+envNamespace+")/$("+envPodName+")", "--namespace=$("+envNamespace+")")
	env := []corev1.EnvVar{
		{Name: envPodName, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: envNamespace, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
	}
	if workload != "" {
		env = append(env, corev1.EnvVar{Name: envWorkload, Value: workload})
		args = append(args, "--workload=$("+envWorkload+")")
	}
	args = append(args, "--state-dir="+StateDir)
	mounts := []corev1.VolumeMount{{Name: StateVolume, MountPath: StateDir}}
	if secret {
		mounts = append(mounts, corev1.VolumeMount{Name: SecretVolume, MountPath: SecretDir, ReadOnly: true})
		for _, f := range slices.Sorted(maps.Keys(in.cfg.SecretFiles)) {
			args = append(args, "--"+f+"="+SecretDir+"/"+in.cfg.SecretFiles[f])
		}
	}
	args = append(append(args, in.cfg.AgentArgs...), podArgs...)
	uid := int64(AgentUID)
	yes, no := true, false
	c := corev1.Container{
		Name:            ContainerName,
		Image:           in.cfg.AgentImage,
		ImagePullPolicy: in.cfg.ImagePullPolicy,
		Args:            args,
		Env:             env,
		Ports:           []corev1.ContainerPort{{Name: AdminPortName, ContainerPort: int32(in.cfg.AdminPort), Protocol: corev1.ProtocolTCP}},
		VolumeMounts:    mounts,
		ReadinessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/readyz", Port: intstr.FromString(AdminPortName)}},
			PeriodSeconds: 2, FailureThreshold: 3, TimeoutSeconds: 1,
		},
		SecurityContext: &corev1.SecurityContext{
			RunAsUser: &uid, RunAsNonRoot: &yes, AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
	if in.native {
		always := corev1.ContainerRestartPolicyAlways
		c.RestartPolicy = &always
	}
	return c
}
