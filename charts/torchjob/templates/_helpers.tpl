{{/*
Shared helpers. A service's own templates live in templates/<service>/ and call these with a
dict: (dict "root" $ "name" "webhook" "svc" .Values.webhook).
*/}}

{{- define "torchjob.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's base name: the release name, with the chart's name unless already in it. */}}
{{- define "torchjob.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* <fullname>-<component>, e.g. torchjob-webhook. Call with (dict "root" $ "name" "webhook"). */}}
{{- define "torchjob.componentName" -}}
{{- printf "%s-%s" (include "torchjob.fullname" .root) .name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "torchjob.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "torchjob.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: torchjob
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels of one component's objects. Call with (dict "root" $ "name" "webhook"). */}}
{{- define "torchjob.componentLabels" -}}
{{ include "torchjob.labels" .root }}
app.kubernetes.io/component: {{ .name }}
{{- end }}

{{/* What a component's Deployment, Service, PodDisruptionBudget and NetworkPolicy select. */}}
{{- define "torchjob.selectorLabels" -}}
app.kubernetes.io/name: {{ include "torchjob.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .name }}
{{- end }}

{{/* A component's ServiceAccount name. Call with (dict "root" $ "name" "webhook" "svc" ...). */}}
{{- define "torchjob.serviceAccountName" -}}
{{- default (include "torchjob.componentName" .) .svc.serviceAccount.name }}
{{- end }}

{{/* The username the apiserver gives a component's ServiceAccount. */}}
{{- define "torchjob.serviceAccountUser" -}}
{{- printf "system:serviceaccount:%s:%s" .root.Release.Namespace (include "torchjob.serviceAccountName" .) }}
{{- end }}

{{- define "torchjob.image" -}}
{{- $image := .Values.image }}
{{- if $image.digest }}
{{- printf "%s@%s" $image.repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) }}
{{- end }}
{{- end }}

{{- define "torchjob.webhookServiceName" -}}
{{- include "torchjob.componentName" (dict "root" . "name" "webhook") }}
{{- end }}

{{- define "torchjob.webhookSecretName" -}}
{{- default (printf "%s-tls" (include "torchjob.webhookServiceName" .)) .Values.webhook.certificate.secretName }}
{{- end }}

{{- define "torchjob.mutatingConfigName" -}}
{{- printf "%s-mutating" (include "torchjob.fullname" .) }}
{{- end }}

{{- define "torchjob.validatingConfigName" -}}
{{- printf "%s-validating" (include "torchjob.fullname" .) }}
{{- end }}

{{- define "torchjob.reconcilerLeaseName" -}}
{{- default (include "torchjob.componentName" (dict "root" . "name" "reconciler")) .Values.reconciler.leaseName }}
{{- end }}

{{- define "torchjob.housekeeperLeaseName" -}}
{{- default (include "torchjob.componentName" (dict "root" . "name" "housekeeper")) .Values.housekeeper.leaseName }}
{{- end }}

{{/*
The parts of a Deployment every component shares. Call with
(dict "root" $ "name" "reconciler" "svc" .Values.reconciler "module" "torchjob.reconciler"
      "args" (list ...) "ports" (list ...) "volumes" (list ...) "mounts" (list ...)), and
"noToken" true for a pod that must not mount its ServiceAccount's token.
The probe port is named "probes"; it also serves /metrics.
Every setting of a service is passed as a flag (runtime/settings.py declares them): a flag the
service does not take stops it at start, where a misspelled variable would be read by nothing.
The environment holds only what Kubernetes fills in (the pod's name) and the user's extraEnv.
*/}}
{{- define "torchjob.deployment" -}}
{{- $root := .root }}
{{- $svc := .svc }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "torchjob.componentName" . }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "torchjob.componentLabels" . | nindent 4 }}
spec:
  replicas: {{ $svc.replicas }}
  revisionHistoryLimit: 3
  selector:
    matchLabels:
      {{- include "torchjob.selectorLabels" . | nindent 6 }}
  {{- with $svc.updateStrategy }}
  strategy:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  template:
    metadata:
      labels:
        {{- include "torchjob.componentLabels" . | nindent 8 }}
        {{- with $svc.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with $svc.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "torchjob.serviceAccountName" . }}
      automountServiceAccountToken: {{ not .noToken }}
      enableServiceLinks: false
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with (default $root.Values.priorityClassName $svc.priorityClassName) }}
      priorityClassName: {{ . }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      terminationGracePeriodSeconds: {{ $svc.terminationGracePeriodSeconds }}
      containers:
        - name: {{ .name }}
          image: {{ include "torchjob.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          command: ["python", "-m", {{ .module | quote }}]
          args:
            {{- range .args }}
            - {{ . | quote }}
            {{- end }}
          env:
            - name: TORCHJOB_POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            {{- with $svc.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            {{- with .ports }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
            - name: probes
              containerPort: {{ $svc.probePort }}
              protocol: TCP
          livenessProbe:
            httpGet:
              path: /healthz
              port: probes
            {{- toYaml $svc.livenessProbe | nindent 12 }}
          readinessProbe:
            httpGet:
              path: /readyz
              port: probes
            {{- toYaml $svc.readinessProbe | nindent 12 }}
          resources:
            {{- toYaml $svc.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.containerSecurityContext | nindent 12 }}
          volumeMounts:
            # Python and the webhook's certificate files need a writable temporary directory.
            - name: tmp
              mountPath: /tmp
            {{- with .mounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
      volumes:
        - name: tmp
          emptyDir:
            sizeLimit: 64Mi
        {{- with .volumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with $svc.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $svc.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $svc.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $svc.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- range . }}
        - {{ toYaml . | nindent 10 | trim }}
          {{- if not .labelSelector }}
          labelSelector:
            matchLabels:
              {{- include "torchjob.selectorLabels" $ | nindent 14 }}
          {{- end }}
        {{- end }}
      {{- end }}
{{- end }}

{{/* A ServiceAccount. Call with (dict "root" $ "name" ... "svc" ...). */}}
{{- define "torchjob.serviceAccount" -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "torchjob.serviceAccountName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "torchjob.componentLabels" . | nindent 4 }}
  {{- with .svc.serviceAccount.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
# Only the component's own pods mount a token (the pod template asks for it).
automountServiceAccountToken: false
{{- end }}

{{/*
A component's leader-election Lease, without a spec: the leader fills it in, and an upgrade of
the release leaves what it wrote alone (the chart never sets spec). Rendered so that `helm
uninstall` removes it with the rest. Call with (dict "root" $ "name" "reconciler" "lease" <name>).
*/}}
{{- define "torchjob.lease" -}}
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: {{ .lease }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "torchjob.componentLabels" . | nindent 4 }}
{{- end }}

{{/* The Service in front of a component's probe port, for scraping /metrics. */}}
{{- define "torchjob.metricsService" -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ printf "%s-metrics" (include "torchjob.componentName" .) | trunc 63 | trimSuffix "-" }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "torchjob.componentLabels" . | nindent 4 }}
    torchjob.dev/metrics: "true"
spec:
  type: ClusterIP
  selector:
    {{- include "torchjob.selectorLabels" . | nindent 4 }}
  ports:
    - name: metrics
      port: {{ .svc.probePort }}
      targetPort: probes
      protocol: TCP
{{- end }}

{{/* A PodDisruptionBudget, when enabled. */}}
{{- define "torchjob.podDisruptionBudget" -}}
{{- $pdb := .svc.podDisruptionBudget }}
{{- if $pdb.enabled }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "torchjob.componentName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "torchjob.componentLabels" . | nindent 4 }}
spec:
  {{- if ne (toString $pdb.minAvailable) "" }}
  minAvailable: {{ $pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ $pdb.maxUnavailable }}
  {{- end }}
  unhealthyPodEvictionPolicy: AlwaysAllow
  selector:
    matchLabels:
      {{- include "torchjob.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end }}

{{/* A ServiceMonitor, when metrics.serviceMonitor.enabled. */}}
{{- define "torchjob.serviceMonitor" -}}
{{- $sm := .root.Values.metrics.serviceMonitor }}
{{- if $sm.enabled }}
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ include "torchjob.componentName" . }}
  namespace: {{ default .root.Release.Namespace $sm.namespace }}
  labels:
    {{- include "torchjob.componentLabels" . | nindent 4 }}
    {{- with $sm.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  namespaceSelector:
    matchNames:
      - {{ .root.Release.Namespace }}
  selector:
    matchLabels:
      {{- include "torchjob.selectorLabels" . | nindent 6 }}
      torchjob.dev/metrics: "true"
  endpoints:
    - port: metrics
      path: /metrics
      scheme: http
      interval: {{ $sm.interval }}
      {{- with $sm.scrapeTimeout }}
      scrapeTimeout: {{ . }}
      {{- end }}
      {{- with $sm.relabelings }}
      relabelings:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end }}
{{- end }}

{{/*
A NetworkPolicy, when networkPolicy.enabled: the component may reach the apiserver and DNS; its
probe port takes scrapes from networkPolicy.metricsFrom (everyone when empty) and `ingress` adds
the component's own ports (the webhook's).
*/}}
{{- define "torchjob.networkPolicy" -}}
{{- $np := .root.Values.networkPolicy }}
{{- if $np.enabled }}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ include "torchjob.componentName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "torchjob.componentLabels" . | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- include "torchjob.selectorLabels" . | nindent 6 }}
  policyTypes:
    - Ingress
    - Egress
  ingress:
    - ports:
        - port: probes
          protocol: TCP
      {{- with $np.metricsFrom }}
      from:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    {{- with .ingress }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  egress:
    - ports:
        {{- range $np.apiServerPorts }}
        - port: {{ . }}
          protocol: TCP
        {{- end }}
      {{- with $np.apiServerTo }}
      to:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    - ports:
        - port: 53
          protocol: UDP
        - port: 53
          protocol: TCP
    {{- with $np.extraEgress }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}
{{- end }}

{{/*
A component's ClusterRole (cluster-wide watches, and writes in users' namespaces) and Role (its
Lease or Secret in the release namespace), each bound to its ServiceAccount. Call with
(dict "root" $ "name" ... "svc" ... "clusterRules" <YAML list> "rules" <YAML list>); an empty
list of rules makes no role.
*/}}
{{- define "torchjob.rbac" -}}
{{- $name := include "torchjob.componentName" . }}
{{- $subject := include "torchjob.serviceAccountName" . }}
{{- if trim .clusterRules }}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $name }}
  labels:
    {{- include "torchjob.componentLabels" . | nindent 4 }}
rules:
  {{- trim .clusterRules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $name }}
  labels:
    {{- include "torchjob.componentLabels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ $subject }}
    namespace: {{ .root.Release.Namespace }}
{{- end }}
{{- if trim .rules }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "torchjob.componentLabels" . | nindent 4 }}
rules:
  {{- trim .rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "torchjob.componentLabels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ $subject }}
    namespace: {{ .root.Release.Namespace }}
{{- end }}
{{- end }}

{{/*
Refuses to take over a CRD of an opt-in job API (kubeflow.enabled, trainer.enabled) that this
release did not install: another operator owns it and runs its objects, and two controllers must
not act on one job. Call with (dict "root" $ "existing" <the CRD as the cluster has it, or empty>
"name" <the CRD's name> "setting" <the value that installs it> "installer" <who installs it without
Helm> "refusal" <why not, and what to do>). Helm's `lookup` finds nothing in `helm template` and
dry runs, where nothing is refused. A CRD kept by an uninstalled release of the same name and
namespace is this release's and is taken back.
*/}}
{{- define "torchjob.crdOwnerCheck" -}}
{{- $root := .root }}
{{- $check := . }}
{{- with .existing }}
{{- $annotations := .metadata.annotations | default dict }}
{{- $release := get $annotations "meta.helm.sh/release-name" }}
{{- $namespace := get $annotations "meta.helm.sh/release-namespace" }}
{{- if not (and (eq $release $root.Release.Name) (eq $namespace $root.Release.Namespace)) }}
{{- $owner := printf "it carries no Helm release annotations (installed by %s, or by hand)" $check.installer }}
{{- if or $release $namespace }}
{{- $owner = printf "it belongs to Helm release %q in namespace %q" $release $namespace }}
{{- end }}
{{- fail (printf "%s: the cluster already has the CRD %s, which this release (%s in namespace %s) did not install: %s. %s" $check.setting $check.name $root.Release.Name $root.Release.Namespace $owner $check.refusal) }}
{{- end }}
{{- end }}
{{- end }}
