"""Kubeflow Trainer's TrainJob (`trainer.kubeflow.org/v1alpha1`) as a PyTorchTrainingJob: the one
translation every part of the system uses to run a TrainJob through the same lifecycle. Pure.

A TrainJob is made from the training runtime it names. The reconciler copies that runtime into
the job's status (`status.torchjob.runtime`, `runtime_snapshot`) before the job starts, so the
job is rendered from the copy ever after and a later change to the runtime never touches it.
The runtime's `node` replicated job becomes the replica type `node` with one replica per node
(pods `<job>-node-<index>`), its pod template changed by the TrainJob's trainer overrides, the
runtime patches' labels and annotations, and the runtime's initializers (`dataset-initializer`,
`model-initializer`) put before the trainer as init containers of every node's pod, where they
fill the volumes they share with it. docs/trainjob.md lists every field and what becomes of it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from torchjob.api import clustertrainingruntime_types, trainingruntime_types
from torchjob.api.job_api import TRAIN_JOB
from torchjob.api.kubeflow import KUBEFLOW_SPEC, KUBEFLOW_STATUS, STATUS_RECORD, TRAINER_STATUS

# The replicated job, and its container, that trains (Kubeflow Trainer's names).
NODE: Final = "node"
DATASET_INITIALIZER: Final = "dataset-initializer"
MODEL_INITIALIZER: Final = "model-initializer"
# The initializers a runtime may have, in the order they run, with the key of the TrainJob's
# spec.initializer that sets each one's STORAGE_URI and environment.
INITIALIZERS: Final = ((DATASET_INITIALIZER, "dataset"), (MODEL_INITIALIZER, "model"))
# The controller a TrainJob's spec.managedBy names when torchjob runs it (absent: the same).
TRAINER_MANAGER: Final = "trainer.kubeflow.org/trainjob-controller"
# The label the Kubeflow SDK requires of a runtime: its framework (`torch`).
FRAMEWORK_LABEL: Final = "trainer.kubeflow.org/framework"
CLUSTER_RUNTIME: Final = clustertrainingruntime_types.KIND
NAMESPACED_RUNTIME: Final = trainingruntime_types.KIND
# Where the runtime a job is made from is copied, in the lifecycle's record.
RUNTIME_RECORD: Final = "runtime"
# torchrun's port on the first node, as Kubeflow Trainer sets it.
MASTER_PORT: Final = 29500
# A Kubernetes Job's backoffLimit when its template says none (the runtime's node Job's).
JOB_BACKOFF_LIMIT: Final = 6
# torchrun's variables torchjob sets; a TrainJob's trainer.env may not set them.
RESERVED_ENV: Final = (
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
)


@dataclass(frozen=True, slots=True)
class RuntimeRef:
    """The runtime a TrainJob names: a ClusterTrainingRuntime, or a TrainingRuntime of the
    job's namespace (`namespace`; None for a cluster-wide one)."""

    kind: str
    name: str
    namespace: str | None

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"

    @property
    def plural(self) -> str:
        return RUNTIME_PLURALS[self.kind]


# Where each runtime kind is served (trainer.kubeflow.org/v1alpha1).
RUNTIME_PLURALS: Final = {
    CLUSTER_RUNTIME: clustertrainingruntime_types.PLURAL,
    NAMESPACED_RUNTIME: trainingruntime_types.PLURAL,
}


def runtime_ref(job: Mapping[str, Any]) -> RuntimeRef:
    ref = (job.get("spec") or {}).get("runtimeRef") or {}
    kind = str(ref.get("kind") or CLUSTER_RUNTIME)
    namespace = (job.get("metadata") or {}).get("namespace") if kind == NAMESPACED_RUNTIME else None
    return RuntimeRef(kind, str(ref.get("name") or ""), namespace)


def is_runtime(document: Mapping[str, Any]) -> bool:
    """A training runtime's manifest (a ClusterTrainingRuntime or a TrainingRuntime)."""
    return (
        document.get("apiVersion") == TRAIN_JOB.api_version
        and document.get("kind") in RUNTIME_PLURALS
    )


def runtime_to_copy(job: Mapping[str, Any]) -> RuntimeRef | None:
    """The runtime the reconciler copies into the job's status before it starts; None when it
    was copied, or the job is not torchjob's to run, or is deleted."""
    meta = job.get("metadata") or {}
    if managed_elsewhere(job) or meta.get("deletionTimestamp") or copied_runtime(job) is not None:
        return None
    ref = runtime_ref(job)
    return ref if ref.kind in RUNTIME_PLURALS and ref.name else None


def copied_runtime(job: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The runtime copied into the job's status when it started; None before."""
    status = job.get("status")
    record = status.get(STATUS_RECORD) if isinstance(status, Mapping) else None
    runtime = record.get(RUNTIME_RECORD) if isinstance(record, Mapping) else None
    return runtime if isinstance(runtime, Mapping) else None


def runtime_snapshot(runtime: Mapping[str, Any]) -> dict[str, Any]:
    """What is copied of a runtime into the status of a job made from it: its kind, name,
    generation and spec."""
    meta = runtime.get("metadata") or {}
    return {
        "kind": runtime.get("kind"),
        "name": meta.get("name"),
        "generation": meta.get("generation"),
        "labels": dict(meta.get("labels") or {}),
        "spec": copy.deepcopy(runtime.get("spec") or {}),
    }


def managed_elsewhere(job: Mapping[str, Any]) -> bool:
    """The TrainJob's spec.managedBy names another controller (Kueue's MultiKueue)."""
    manager = (job.get("spec") or {}).get("managedBy")
    return bool(manager) and manager != TRAINER_MANAGER


def as_training_job(job: Mapping[str, Any]) -> dict[str, Any]:
    """The PyTorchTrainingJob that runs a TrainJob, made from the runtime copied into its
    status (without one yet: a job of no replicas, which the reconciler does not run). It keeps
    the TrainJob's apiVersion, kind and metadata, so what is made for it is owned by the
    TrainJob; its status is the lifecycle's record kept in the TrainJob's status, with the
    progress the training process last reported."""
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    record = {k: v for k, v in (status.get(STATUS_RECORD) or {}).items() if k != RUNTIME_RECORD}
    if status.get(TRAINER_STATUS) is not None:
        record[TRAINER_STATUS] = status[TRAINER_STATUS]
    runtime = copied_runtime(job)
    return {
        "apiVersion": TRAIN_JOB.api_version,
        "kind": TRAIN_JOB.kind,
        "metadata": job.get("metadata") or {},
        "spec": training_spec(spec, (runtime or {}).get("spec") or {}),
        "status": record,
        KUBEFLOW_STATUS: status,
        KUBEFLOW_SPEC: spec,
    }


def training_spec(spec: Mapping[str, Any], runtime: Mapping[str, Any]) -> dict[str, Any]:
    """A TrainJob's spec, made from its runtime's spec, as a PyTorchTrainingJob's."""
    out: dict[str, Any] = {"replicaSpecs": []}
    node_job = replicated_job(runtime, NODE)
    if node_job is not None:
        template = node_pod_template(spec, runtime, node_job)
        restart = (template.get("spec") or {}).pop("restartPolicy", None)
        out["replicaSpecs"] = [
            {
                "type": NODE,
                "replicas": node_count(spec, runtime),
                "restartPolicy": restart if restart in ("Never", "OnFailure") else "OnFailure",
                "template": template,
            }
        ]
    job_spec = (node_job or {}).get("template", {}).get("spec") or {}
    jobset = _jobset_spec(runtime)
    backoff = job_spec.get("backoffLimit")
    run_policy: dict[str, Any] = {
        "backoffLimit": backoff if isinstance(backoff, int) else JOB_BACKOFF_LIMIT,
        "cleanUpPolicy": "None",  # the pods stay, for their logs (the SDK's get_job_logs)
    }
    if isinstance(spec.get("activeDeadlineSeconds"), int):
        run_policy["activeDeadlineSeconds"] = spec["activeDeadlineSeconds"]
    if isinstance(jobset.get("ttlSecondsAfterFinished"), int):
        run_policy["ttlSecondsAfterFinished"] = jobset["ttlSecondsAfterFinished"]
    out["runPolicy"] = run_policy
    if spec.get("suspend"):
        out["runMode"] = {"pause": {"enabled": True}}
    return out


def node_count(spec: Mapping[str, Any], runtime: Mapping[str, Any]) -> int:
    """The nodes a TrainJob runs on: its trainer's numNodes, else its runtime's, else 1."""
    trainer = spec.get("trainer") or {}
    policy = runtime.get("mlPolicy") or {}
    for value in (trainer.get("numNodes"), policy.get("numNodes")):
        if isinstance(value, int) and value > 0:
            return value
    return 1


def replicated_job(runtime: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """The runtime's replicated job of that name; None when it has none."""
    jobs = _jobset_spec(runtime).get("replicatedJobs") or []
    return next((j for j in jobs if isinstance(j, dict) and j.get("name") == name), None)


def pod_template_of(replicated: Mapping[str, Any]) -> dict[str, Any]:
    """The pod template of a replicated job's Job template."""
    job_spec = (replicated.get("template") or {}).get("spec") or {}
    template = job_spec.get("template")
    return template if isinstance(template, dict) else {}


def node_pod_template(
    spec: Mapping[str, Any], runtime: Mapping[str, Any], node_job: Mapping[str, Any]
) -> dict[str, Any]:
    """The pod template of every node: the runtime's, with the JobSet's and the patches'
    labels and annotations, the trainer's overrides of the `node` container, and the
    initializers before it."""
    template = copy.deepcopy(pod_template_of(node_job))
    meta = template.setdefault("metadata", {})
    for source in (_jobset_meta(runtime), *_patched_metas(spec)):
        for key in ("labels", "annotations"):
            if source.get(key):
                meta[key] = {**source[key], **(meta.get(key) or {})}
    pod_spec = template.setdefault("spec", {})
    for container in pod_spec.get("containers") or []:
        if container.get("name") == NODE:
            _override_trainer(container, spec.get("trainer") or {})
    _add_initializers(pod_spec, spec.get("initializer") or {}, runtime)
    return template


def _override_trainer(container: dict[str, Any], trainer: Mapping[str, Any]) -> None:
    for key in ("image", "command", "args"):
        if trainer.get(key):
            container[key] = copy.deepcopy(trainer[key])
    if trainer.get("env"):
        container["env"] = upsert_env(container.get("env") or [], trainer["env"])
    if isinstance(trainer.get("resourcesPerNode"), Mapping):
        container["resources"] = copy.deepcopy(trainer["resourcesPerNode"])


def upsert_env(env: list[Any], added: list[Any]) -> list[Any]:
    """`env` with each variable of `added` in place of the one of its name, or after them."""
    names = [a.get("name") for a in added if isinstance(a, Mapping)]
    kept = [e for e in env if not (isinstance(e, Mapping) and e.get("name") in names)]
    return [*kept, *copy.deepcopy(added)]


def _add_initializers(
    pod_spec: dict[str, Any], settings: Mapping[str, Any], runtime: Mapping[str, Any]
) -> None:
    """Each initializer's containers run, in order, before the node's own init containers, with
    the TrainJob's STORAGE_URI, environment and Secret; the volumes they mount come along (the
    node's own of a name win)."""
    added: list[Any] = []
    for name, key in INITIALIZERS:
        replicated = replicated_job(runtime, name)
        if replicated is None:
            continue
        init_spec = pod_template_of(replicated).get("spec") or {}
        for container in copy.deepcopy(init_spec.get("containers") or []):
            if container.get("name") == name:
                _configure_initializer(container, settings.get(key) or {})
            added.append(container)
        have = {v.get("name") for v in pod_spec.get("volumes") or []}
        volumes = [v for v in init_spec.get("volumes") or [] if v.get("name") not in have]
        if volumes:
            pod_spec["volumes"] = [*(pod_spec.get("volumes") or []), *copy.deepcopy(volumes)]
    if added:
        pod_spec["initContainers"] = [*added, *(pod_spec.get("initContainers") or [])]


def _configure_initializer(container: dict[str, Any], settings: Mapping[str, Any]) -> None:
    env: list[Any] = []
    if settings.get("storageUri"):
        env.append({"name": "STORAGE_URI", "value": settings["storageUri"]})
    env += list(settings.get("env") or [])
    if env:
        container["env"] = upsert_env(container.get("env") or [], env)
    secret = (settings.get("secretRef") or {}).get("name")
    if secret:
        container["envFrom"] = [*(container.get("envFrom") or []), {"secretRef": {"name": secret}}]


def _jobset_spec(runtime: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = (runtime.get("template") or {}).get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _jobset_meta(runtime: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = (runtime.get("template") or {}).get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _patched_metas(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The labels and annotations the runtime patches give the JobSet, the `node` Job and its
    pods, in the order they apply."""
    out: list[Mapping[str, Any]] = []
    for patch in spec.get("runtimePatches") or []:
        template = ((patch or {}).get("trainingRuntimeSpec") or {}).get("template") or {}
        out.append(template.get("metadata") or {})
        for job in (template.get("spec") or {}).get("replicatedJobs") or []:
            if (job or {}).get("name") != NODE:
                continue
            job_template = job.get("template") or {}
            out.append(job_template.get("metadata") or {})
            pod = (job_template.get("spec") or {}).get("template") or {}
            out.append(pod.get("metadata") or {})
    return out
