{{/*
The APIs jobs are written in, as a JSON list of {group, version, plural}: PyTorchTrainingJob
always, Kubeflow's PyTorchJob when kubeflow.enabled. The services' RBAC and the aggregated roles
range over it, so that a PyTorchJob gets exactly what a PyTorchTrainingJob gets.
Read it with (include "torchjob.jobApis" . | fromJsonArray).
*/}}
{{- define "torchjob.jobApis" -}}
{{- $apis := list (dict "group" "batch.tensorstack.dev" "version" "v1beta1" "plural" "pytorchtrainingjobs") }}
{{- if .Values.kubeflow.enabled }}
{{- $apis = append $apis (dict "group" "kubeflow.org" "version" "v1" "plural" "pytorchjobs") }}
{{- end }}
{{- toJson $apis }}
{{- end }}

{{- define "torchjob.kubeflowCRDName" -}}
pytorchjobs.kubeflow.org
{{- end }}

{{/*
Refuses to take over a PyTorchJob CRD this release did not install. Call with
(dict "root" $ "existing" <the CRD as the cluster has it, or empty>). Helm's `lookup` finds
nothing in `helm template` and dry runs, where nothing is refused. A CRD kept by an uninstalled
release of the same name and namespace is this release's and is taken back.
*/}}
{{- define "torchjob.kubeflowCRDOwnerCheck" -}}
{{- $root := .root }}
{{- with .existing }}
{{- $annotations := .metadata.annotations | default dict }}
{{- $release := get $annotations "meta.helm.sh/release-name" }}
{{- $namespace := get $annotations "meta.helm.sh/release-namespace" }}
{{- if not (and (eq $release $root.Release.Name) (eq $namespace $root.Release.Namespace)) }}
{{- $owner := "it carries no Helm release annotations (installed by Kubeflow's training-operator manifests, or by hand)" }}
{{- if or $release $namespace }}
{{- $owner = printf "it belongs to Helm release %q in namespace %q" $release $namespace }}
{{- end }}
{{- fail (printf "kubeflow.enabled: the cluster already has the CRD %s, which this release (%s in namespace %s) did not install: %s. torchjob will not take over another operator's PyTorchJobs: uninstall Kubeflow's training-operator (or the release that owns the CRD) first, or leave kubeflow.enabled false." (include "torchjob.kubeflowCRDName" $root) $root.Release.Name $root.Release.Namespace $owner) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The flag that has a service run PyTorchJobs too, as a list of arguments, empty when
kubeflow.enabled is false.
*/}}
{{- define "torchjob.kubeflowArgs" -}}
{{- if .Values.kubeflow.enabled }}
{{- toJson (list "--kubeflow") }}
{{- else }}
{{- toJson list }}
{{- end }}
{{- end }}
