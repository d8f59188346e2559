{{/*
The clientConfig of one webhook. Call with (dict "root" $ "path" "/mutate/pods"). In-cluster it
names the webhook's Service; webhook.externalURL points the apiserver elsewhere instead (a webhook
running outside the cluster, e.g. during development). The caBundle is left out: the webhook
patches in its own CA (self-managed certificates), or cert-manager's CA injector does.
*/}}
{{- define "torchjob.webhookClientConfig" -}}
{{- $w := .root.Values.webhook }}
{{- if $w.externalURL -}}
url: {{ printf "%s%s" (trimSuffix "/" $w.externalURL) .path | quote }}
{{- else -}}
service:
  name: {{ include "torchjob.webhookServiceName" .root }}
  namespace: {{ .root.Release.Namespace }}
  path: {{ .path | quote }}
  port: {{ $w.service.port }}
{{- end }}
{{- end }}

{{/*
The namespaces a webhook applies to: never kube-system, the release's own namespace or
webhook.excludedNamespaces, and only those matching webhook.namespaceSelector when it is set.
*/}}
{{- define "torchjob.webhookNamespaceSelector" -}}
{{- $w := .Values.webhook }}
{{- $excluded := uniq (concat (list "kube-system" .Release.Namespace) $w.excludedNamespaces) }}
{{- $expressions := prepend ($w.namespaceSelector.matchExpressions | default list) (dict "key" "kubernetes.io/metadata.name" "operator" "NotIn" "values" $excluded) -}}
namespaceSelector:
  {{- with $w.namespaceSelector.matchLabels }}
  matchLabels:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  matchExpressions:
    {{- toYaml $expressions | nindent 4 }}
{{- end }}

{{/* What every webhook of ours shares. */}}
{{- define "torchjob.webhookCommon" -}}
admissionReviewVersions: ["v1"]
sideEffects: None
matchPolicy: Equivalent
failurePolicy: Fail
timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
{{ include "torchjob.webhookNamespaceSelector" . }}
{{- end }}

{{- define "torchjob.webhookConfigurationMetadata" -}}
labels:
  {{- include "torchjob.componentLabels" (dict "root" . "name" "webhook") | nindent 2 }}
{{- if .Values.certManager.enabled }}
annotations:
  cert-manager.io/inject-ca-from: {{ printf "%s/%s" .Release.Namespace (include "torchjob.webhookServiceName" .) }}
{{- end }}
{{- end }}

{{/* The rules of Kubeflow's PyTorchJobs' webhooks (kubeflow.enabled). */}}
{{- define "torchjob.kubeflowJobRules" -}}
rules:
  - apiGroups: ["kubeflow.org"]
    apiVersions: ["v1"]
    resources: ["pytorchjobs"]
    operations: ["CREATE", "UPDATE"]
    scope: Namespaced
{{- end }}

{{/*
The rules of Kubeflow Trainer's webhooks (trainer.enabled): TrainJobs, and each kind of training
runtime (a TrainJob is made from one). Call with (dict "plural" "trainjobs" "scope" "Namespaced").
*/}}
{{- define "torchjob.trainerRules" -}}
rules:
  - apiGroups: ["trainer.kubeflow.org"]
    apiVersions: ["v1alpha1"]
    resources: [{{ .plural | quote }}]
    operations: ["CREATE", "UPDATE"]
    scope: {{ .scope }}
{{- end }}

{{- define "torchjob.jobRules" -}}
rules:
  - apiGroups: ["batch.tensorstack.dev"]
    apiVersions: ["v1beta1"]
    resources: ["pytorchtrainingjobs"]
    operations: ["CREATE", "UPDATE"]
    scope: Namespaced
{{- end }}
