{{/*
The APIs jobs are written in, as a JSON list of {group, version, plural, scale}: PyTorchTrainingJob
always, Kubeflow's PyTorchJob when kubeflow.enabled, Kubeflow Trainer's TrainJob when
trainer.enabled. The services' RBAC and the aggregated roles range over it, so that a PyTorchJob
or a TrainJob gets exactly what a PyTorchTrainingJob gets. `scale`: the CRD has a scale
subresource (a TrainJob's has none, so none is granted on it).
Read it with (include "torchjob.jobApis" . | fromJsonArray).
*/}}
{{- define "torchjob.jobApis" -}}
{{- $apis := list (dict "group" "batch.tensorstack.dev" "version" "v1beta1" "plural" "pytorchtrainingjobs" "scale" true) }}
{{- if .Values.kubeflow.enabled }}
{{- $apis = append $apis (dict "group" "kubeflow.org" "version" "v1" "plural" "pytorchjobs" "scale" true) }}
{{- end }}
{{- if .Values.trainer.enabled }}
{{- $apis = append $apis (dict "group" "trainer.kubeflow.org" "version" "v1alpha1" "plural" "trainjobs" "scale" false) }}
{{- end }}
{{- toJson $apis }}
{{- end }}

{{- define "torchjob.kubeflowCRDName" -}}
pytorchjobs.kubeflow.org
{{- end }}

{{/*
Refuses to take over a PyTorchJob CRD this release did not install (torchjob.crdOwnerCheck). Call
with (dict "root" $ "existing" <the CRD as the cluster has it, or empty>).
*/}}
{{- define "torchjob.kubeflowCRDOwnerCheck" -}}
{{- include "torchjob.crdOwnerCheck" (dict "root" .root "existing" .existing
      "name" (include "torchjob.kubeflowCRDName" .root) "setting" "kubeflow.enabled"
      "installer" "Kubeflow's training-operator manifests"
      "refusal" "torchjob will not take over another operator's PyTorchJobs: uninstall Kubeflow's training-operator (or the release that owns the CRD) first, or leave kubeflow.enabled false.") }}
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
