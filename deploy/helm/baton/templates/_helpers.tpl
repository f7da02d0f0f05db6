{{/* The release's base name: every object is named from it. */}}
{{- define "baton.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "baton.controlplane" -}}{{ include "baton.fullname" . }}-controlplane{{- end -}}
{{- define "baton.controlplane.headless" -}}{{ include "baton.fullname" . }}-controlplane-headless{{- end -}}
{{- define "baton.etcd" -}}{{ include "baton.fullname" . }}-etcd{{- end -}}
{{- define "baton.injector" -}}{{ include "baton.fullname" . }}-injector{{- end -}}
{{/* The control plane StatefulSet's pod names, comma-separated. */}}
{{- define "baton.controlplane.pods" -}}
{{- $pods := list -}}
{{- range $i := until (int .Values.controlPlane.replicas) -}}
{{- $pods = append $pods (printf "%s-%d" (include "baton.controlplane" $) $i) -}}
{{- end -}}
{{- join "," $pods -}}
{{- end -}}
{{- define "baton.controlplane.api" -}}{{ include "baton.controlplane" . }}-api{{- end -}}
{{- define "baton.injector.tls" -}}{{ include "baton.fullname" . }}-injector-tls{{- end -}}
{{- define "baton.api.tokens" -}}
{{- .Values.controlPlane.api.existingSecret | default (printf "%s-api-tokens" (include "baton.fullname" .)) -}}
{{- end -}}

{{/* Labels every object carries; component is added per object. */}}
{{- define "baton.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: pass (list $ "component"). */}}
{{- define "baton.selector" -}}
app.kubernetes.io/name: {{ (index . 0).Chart.Name }}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "baton.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* etcd's client endpoints: the chart's members by pod DNS, or etcd.external.endpoints. */}}
{{- define "baton.etcd.endpoints" -}}
{{- if .Values.etcd.enabled -}}
{{- $eps := list -}}
{{- range $i := until (int .Values.etcd.replicas) -}}
{{- $eps = append $eps (printf "http://%s-%d.%s.%s.svc:%d" (include "baton.etcd" $) $i (include "baton.etcd" $) $.Release.Namespace (int $.Values.etcd.ports.client)) -}}
{{- end -}}
{{- join "," $eps -}}
{{- else -}}
{{- required "etcd.external.endpoints: give the external etcd's client URLs when etcd.enabled is false" (join "," .Values.etcd.external.endpoints) -}}
{{- end -}}
{{- end -}}

{{/* Every control plane replica's gRPC address by pod DNS, for agents. */}}
{{- define "baton.controlplane.grpcAddrs" -}}
{{- $addrs := list -}}
{{- range $i := until (int .Values.controlPlane.replicas) -}}
{{- $addrs = append $addrs (printf "%s-%d.%s.%s.svc:%d" (include "baton.controlplane" $) $i (include "baton.controlplane.headless" $) $.Release.Namespace (int $.Values.controlPlane.ports.grpc)) -}}
{{- end -}}
{{- join "," $addrs -}}
{{- end -}}

{{/* The restricted container security context every Baton container runs with. */}}
{{- define "baton.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "baton.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The generated operator token: the one in the release's Secret if there is one (an
upgrade keeps it), else a new random one. */}}
{{- define "baton.api.operatorToken" -}}
{{- $s := lookup "v1" "Secret" .Release.Namespace (printf "%s-api-tokens" (include "baton.fullname" .)) -}}
{{- if and $s $s.data (index $s.data "token") -}}
{{- index $s.data "token" | b64dec -}}
{{- else -}}
{{- $_ := set .Values.controlPlane.api "_token" (.Values.controlPlane.api._token | default (randAlphaNum 40)) -}}
{{- .Values.controlPlane.api._token -}}
{{- end -}}
{{- end -}}

{{/* The control plane's --api-tokens-file. */}}
{{- define "baton.api.tokensFile" -}}
{{- $tokens := list -}}
{{- if .Values.controlPlane.api.generateToken -}}
{{- $tokens = append $tokens (dict "name" "operator" "role" "operator" "sha256" (include "baton.api.operatorToken" . | sha256sum)) -}}
{{- end -}}
{{- range .Values.controlPlane.api.tokens -}}
{{- $tokens = append $tokens (dict "name" .name "role" .role "sha256" .sha256) -}}
{{- end -}}
{{- required "controlPlane.api: with generateToken false, list at least one of controlPlane.api.tokens or name an existingSecret" (ternary "" (toYaml $tokens) (empty $tokens)) -}}
{{- end -}}
