{{/*
The plurals of Kubeflow Trainer's API (trainer.kubeflow.org/v1alpha1) whose CRDs trainer.enabled
installs, each from files/trainer.kubeflow.org_<plural>.yaml, as a JSON list. Read it with
(include "torchjob.trainerPlurals" . | fromJsonArray).
*/}}
{{- define "torchjob.trainerPlurals" -}}
{{- toJson (list "trainjobs" "trainingruntimes" "clustertrainingruntimes") }}
{{- end }}

{{/*
Refuses to take over a CRD of Kubeflow Trainer's API this release did not install
(torchjob.crdOwnerCheck). Call with (dict "root" $ "name" <the CRD's name> "existing" <the CRD as
the cluster has it, or empty>). Trainer's own controller runs every TrainJob whose spec.managedBy
is unset or its own, and its schema allows no other manager but MultiKueue: torchjob, which runs
those same TrainJobs, cannot run beside it.
*/}}
{{- define "torchjob.trainerCRDOwnerCheck" -}}
{{- include "torchjob.crdOwnerCheck" (dict "root" .root "existing" .existing
      "name" .name "setting" "trainer.enabled"
      "installer" "Kubeflow Trainer's manifests"
      "refusal" "Kubeflow Trainer appears to be installed, and Trainer's schema lets only its own controller (or MultiKueue) manage a TrainJob, so torchjob will not run TrainJobs beside it: uninstall Kubeflow Trainer (or the release that owns the CRD) first, or leave trainer.enabled false.") }}
{{- end }}

{{/*
The flag that has a service run TrainJobs too, as a list of arguments, empty when
trainer.enabled is false.
*/}}
{{- define "torchjob.trainerArgs" -}}
{{- if .Values.trainer.enabled }}
{{- toJson (list "--trainer") }}
{{- else }}
{{- toJson list }}
{{- end }}
{{- end }}

{{/*
The spec of Kubeflow Trainer's own `torch-distributed` ClusterTrainingRuntime, as Trainer v2.3.0
ships it, with the image of trainer.runtimes.torchDistributed.image (runtimes.yaml).
*/}}
{{- define "torchjob.torchDistributedSpec" -}}
mlPolicy:
  numNodes: 1
  torch: {}
template:
  spec:
    replicatedJobs:
      - name: node
        template:
          metadata:
            labels:
              trainer.kubeflow.org/trainjob-ancestor-step: trainer
          spec:
            template:
              spec:
                containers:
                  - name: node
                    image: {{ .Values.trainer.runtimes.torchDistributed.image | quote }}
{{- end }}
