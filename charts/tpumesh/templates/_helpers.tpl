{{/*
Named templates of the tpumesh chart.

Public (include them in your own pod templates, one line each; see NOTES.txt):
  tpumesh.serviceAccountName  the ServiceAccount name (a string)
  tpumesh.initContainer       the tpumesh-init entry of initContainers[]
  tpumesh.sidecar             the tpumesh-sidecar entry of initContainers[] (native sidecar)
  tpumesh.volumes             the shared emptyDir and the downward-API volume
  tpumesh.volumeMounts        the read-only mount of the shared volume for training containers

Each takes either the top-level context (.) or a dict with the context under
"ctx" and options:
  tpumesh.initContainer  (dict "ctx" . "tpuChips" 4)       request 4 google.com/tpu in
                                                          tpumesh-init (the trainer's count)
                         (dict "ctx" . "tpuChips" 8 "tpuResource" "cloud-tpus.google.com/v3")
                                                          the same on a legacy TPU Node
  tpumesh.sidecar        (dict "ctx" . "selector" "k=v")  restrict the pods it watches
  both                   (dict "ctx" . "env" $list)       append env entries (a list of
                                                          {name, value} or {name, valueFrom})

They work both in this chart and in a chart that has tpumesh as a dependency
(no alias): there the settings come from .Values.tpumesh, which Helm fills with
this chart's defaults. A dependency with alias: fails with a message saying so
(tpumesh.requireValues, templates/validate.yaml).
*/}}

{{/* Fails with what to do when the settings a named template needs are not there: a parent
chart that lists tpumesh with an alias keeps its values under the alias, where the templates
cannot find them. */}}
{{- define "tpumesh.requireValues" -}}
{{- if not (and (kindIs "map" .) (hasKey . "serviceAccount") (hasKey . "sidecar")) -}}
{{- fail "tpumesh: the named templates find no tpumesh settings: a chart that has tpumesh as a dependency must list it without alias: (aliases are not supported) and put its values under tpumesh:" -}}
{{- end -}}
{{- end -}}

{{/* The chart name (or nameOverride), truncated to 63 characters. */}}
{{- define "tpumesh.name" -}}
{{- $v := .Values -}}
{{- if and (ne .Chart.Name "tpumesh") (hasKey .Values "tpumesh") -}}{{- $v = .Values.tpumesh -}}{{- end -}}
{{- include "tpumesh.requireValues" $v -}}
{{- default "tpumesh" $v.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The resource name: fullnameOverride, else <release>-<name>, else the release name when it
already contains the name. DNS labels are at most 63 characters. */}}
{{- define "tpumesh.fullname" -}}
{{- $v := .Values -}}
{{- if and (ne .Chart.Name "tpumesh") (hasKey .Values "tpumesh") -}}{{- $v = .Values.tpumesh -}}{{- end -}}
{{- include "tpumesh.requireValues" $v -}}
{{- if $v.fullnameOverride -}}
{{- $v.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default "tpumesh" $v.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* chart label value: name-version. */}}
{{- define "tpumesh.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every resource this chart creates. */}}
{{- define "tpumesh.labels" -}}
helm.sh/chart: {{ include "tpumesh.chart" . }}
{{ include "tpumesh.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "tpumesh.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tpumesh.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The ServiceAccount name TPU pods run as. */}}
{{- define "tpumesh.serviceAccountName" -}}
{{- $v := .Values -}}
{{- if and (ne .Chart.Name "tpumesh") (hasKey .Values "tpumesh") -}}{{- $v = .Values.tpumesh -}}{{- end -}}
{{- include "tpumesh.requireValues" $v -}}
{{- /* Created or not, the name is serviceAccount.name, else the full name (values.yaml): with
create: false that ServiceAccount must exist; never the namespace's "default" one, which
would hand the pod-reading Role to every pod that runs without a ServiceAccount. */ -}}
{{- default (include "tpumesh.fullname" .) $v.serviceAccount.name -}}
{{- end -}}

{{/* image reference repository:tag. */}}
{{- define "tpumesh.image" -}}
{{- $v := .Values -}}
{{- if and (ne .Chart.Name "tpumesh") (hasKey .Values "tpumesh") -}}{{- $v = .Values.tpumesh -}}{{- end -}}
{{- include "tpumesh.requireValues" $v -}}
{{- if $v.image.digest -}}
{{- printf "%s@%s" $v.image.repository $v.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $v.image.repository $v.image.tag -}}
{{- end -}}
{{- end -}}

{{/* Container securityContext that passes the restricted Pod Security profile: non-root,
read-only root file system, no privilege escalation, every capability dropped, RuntimeDefault seccomp. */}}
{{- define "tpumesh.securityContext" -}}
{{- $v := .Values -}}
{{- if and (ne .Chart.Name "tpumesh") (hasKey .Values "tpumesh") -}}{{- $v = .Values.tpumesh -}}{{- end -}}
{{- include "tpumesh.requireValues" $v -}}
runAsNonRoot: true
runAsUser: {{ $v.securityContext.runAsUser }}
runAsGroup: {{ $v.securityContext.runAsGroup }}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* tpumesh-init: resolves the TPU, runs system initialization and publishes the first
topology (docs/DESIGN.md §1, §6). Reads the pod's annotations from the downward-API volume.
Configuration flags are passed as TPUMESH_<FLAG> variables. */}}
{{- define "tpumesh.initContainer" -}}
{{- $top := . -}}
{{- $opt := dict -}}
{{- if hasKey . "ctx" -}}{{- $top = .ctx -}}{{- $opt = . -}}{{- end -}}
{{- $v := $top.Values -}}
{{- if and (ne $top.Chart.Name "tpumesh") (hasKey $top.Values "tpumesh") -}}{{- $v = $top.Values.tpumesh -}}{{- end -}}
{{- include "tpumesh.requireValues" $v -}}
{{- $tpuResource := default $v.init.tpuResource $opt.tpuResource -}}
- name: tpumesh-init
  image: {{ include "tpumesh.image" $top | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  args:
    - tpumesh-init
  env:
    - name: TPUMESH_OUT_DIR
      value: {{ $v.sharedVolume.mountPath | quote }}
    - name: TPUMESH_ANNOTATIONS_FILE
      value: {{ printf "%s/annotations" $v.podinfo.mountPath | quote }}
    {{- if $v.init.timeoutSeconds }}
    - name: TPUMESH_TIMEOUT
      value: {{ $v.init.timeoutSeconds | quote }}
    {{- end }}
    - name: TPUMESH_LOG_FORMAT
      value: {{ $v.logFormat | quote }}
    - name: TPUMESH_LOG_LEVEL
      value: {{ $v.logLevel | quote }}
    {{- with $v.init.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- with $opt.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  resources:
    requests:
      {{- toYaml $v.init.resources.requests | nindent 6 }}
      {{- if $opt.tpuChips }}
      {{ $tpuResource }}: {{ $opt.tpuChips }}
      {{- end }}
    limits:
      {{- toYaml $v.init.resources.limits | nindent 6 }}
      {{- if $opt.tpuChips }}
      {{ $tpuResource }}: {{ $opt.tpuChips }}
      {{- end }}
  securityContext:
    {{- include "tpumesh.securityContext" $top | nindent 4 }}
  volumeMounts:
    - name: {{ $v.sharedVolume.name }}
      mountPath: {{ $v.sharedVolume.mountPath }}
    - name: {{ $v.podinfo.volumeName }}
      mountPath: {{ $v.podinfo.mountPath }}
      readOnly: true
{{- end -}}

{{/* tpumesh-sidecar as a native sidecar (restartPolicy: Always in initContainers[],
Kubernetes 1.29+): the training container starts only after its startup
probe on /readyz passed, i.e. after the topology is complete. It never requests TPUs:
it lives as long as the pod and would hold them. */}}
{{- define "tpumesh.sidecar" -}}
{{- $top := . -}}
{{- $opt := dict -}}
{{- if hasKey . "ctx" -}}{{- $top = .ctx -}}{{- $opt = . -}}{{- end -}}
{{- $v := $top.Values -}}
{{- if and (ne $top.Chart.Name "tpumesh") (hasKey $top.Values "tpumesh") -}}{{- $v = $top.Values.tpumesh -}}{{- end -}}
{{- include "tpumesh.requireValues" $v -}}
- name: tpumesh-sidecar
  image: {{ include "tpumesh.image" $top | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  restartPolicy: Always
  args:
    - tpumesh-sidecar
  env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: TPUMESH_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    - name: TPUMESH_OUT_DIR
      value: {{ $v.sharedVolume.mountPath | quote }}
    - name: TPUMESH_HTTP_ADDR
      value: {{ printf ":%v" $v.sidecar.httpPort | quote }}
    - name: TPUMESH_GRPC_ADDR
      value: {{ printf ":%v" $v.sidecar.grpcPort | quote }}
    {{- if $opt.selector }}
    - name: TPUMESH_SELECTOR
      value: {{ $opt.selector | quote }}
    {{- end }}
    - name: TPUMESH_LOG_FORMAT
      value: {{ $v.logFormat | quote }}
    - name: TPUMESH_LOG_LEVEL
      value: {{ $v.logLevel | quote }}
    {{- if $v.sidecar.verifyDns }}
    - name: TPUMESH_VERIFY_DNS
      value: "true"
    {{- end }}
    {{- with $v.sidecar.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- with $opt.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: tpumesh-http
      containerPort: {{ $v.sidecar.httpPort }}
      protocol: TCP
    - name: tpumesh-grpc
      containerPort: {{ $v.sidecar.grpcPort }}
      protocol: TCP
  startupProbe:
    httpGet:
      path: /readyz
      port: tpumesh-http
    periodSeconds: {{ $v.sidecar.probes.startup.periodSeconds }}
    timeoutSeconds: {{ $v.sidecar.probes.startup.timeoutSeconds }}
    failureThreshold: {{ $v.sidecar.probes.startup.failureThreshold }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: tpumesh-http
    periodSeconds: {{ $v.sidecar.probes.readiness.periodSeconds }}
    timeoutSeconds: {{ $v.sidecar.probes.readiness.timeoutSeconds }}
    failureThreshold: {{ $v.sidecar.probes.readiness.failureThreshold }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: tpumesh-http
    periodSeconds: {{ $v.sidecar.probes.liveness.periodSeconds }}
    timeoutSeconds: {{ $v.sidecar.probes.liveness.timeoutSeconds }}
    failureThreshold: {{ $v.sidecar.probes.liveness.failureThreshold }}
  resources:
    {{- toYaml $v.sidecar.resources | nindent 4 }}
  securityContext:
    {{- include "tpumesh.securityContext" $top | nindent 4 }}
  volumeMounts:
    - name: {{ $v.sharedVolume.name }}
      mountPath: {{ $v.sharedVolume.mountPath }}
{{- end -}}

{{/* The pod volumes: the shared in-memory emptyDir (docs/DESIGN.md §4) and the downward-API
volume with the pod's annotations and labels (not a subPath
mount, so the kubelet's updates reach it). */}}
{{- define "tpumesh.volumes" -}}
{{- $v := .Values -}}
{{- if and (ne .Chart.Name "tpumesh") (hasKey .Values "tpumesh") -}}{{- $v = .Values.tpumesh -}}{{- end -}}
{{- include "tpumesh.requireValues" $v -}}
- name: {{ $v.sharedVolume.name }}
  emptyDir:
    medium: Memory
    sizeLimit: {{ $v.sharedVolume.sizeLimit }}
- name: {{ $v.podinfo.volumeName }}
  downwardAPI:
    items:
      - path: annotations
        fieldRef:
          fieldPath: metadata.annotations
      - path: labels
        fieldRef:
          fieldPath: metadata.labels
{{- end -}}

{{/* The mount training containers add: the published files, read-only. */}}
{{- define "tpumesh.volumeMounts" -}}
{{- $v := .Values -}}
{{- if and (ne .Chart.Name "tpumesh") (hasKey .Values "tpumesh") -}}{{- $v = .Values.tpumesh -}}{{- end -}}
{{- include "tpumesh.requireValues" $v -}}
- name: {{ $v.sharedVolume.name }}
  mountPath: {{ $v.sharedVolume.mountPath }}
  readOnly: true
{{- end -}}

{{/* tpumesh-injector: its resource name, labels and the values under .Values.injector. */}}
{{- /* The namespaces the injector's webhook serves: injector.namespaceSelector, else the
release namespace alone (every namespace carries kubernetes.io/metadata.name). */ -}}
{{- define "tpumesh.injector.namespaceSelector" -}}
{{- if .Values.injector.namespaceSelector -}}
{{- toYaml .Values.injector.namespaceSelector -}}
{{- else -}}
matchLabels:
  kubernetes.io/metadata.name: {{ .Release.Namespace }}
{{- end -}}
{{- end -}}

{{- define "tpumesh.injector.fullname" -}}
{{- printf "%s-injector" (include "tpumesh.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tpumesh.injector.selectorLabels" -}}
{{ include "tpumesh.selectorLabels" . }}
app.kubernetes.io/component: injector
{{- end -}}

{{/* The injector's --config: the named templates above, rendered with this release's values,
so a webhook-injected pod gets exactly what a pod template including them gets (one source of
truth). Each entry is what the template renders: a list of one container, or the list. */}}
{{- define "tpumesh.injector.config" -}}
initContainer:
  {{- include "tpumesh.initContainer" . | nindent 2 }}
sidecar:
  {{- include "tpumesh.sidecar" . | nindent 2 }}
volumes:
  {{- include "tpumesh.volumes" . | nindent 2 }}
volumeMounts:
  {{- include "tpumesh.volumeMounts" . | nindent 2 }}
{{- end -}}
