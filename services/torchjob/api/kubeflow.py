"""Kubeflow's PyTorchJob (`kubeflow.org/v1`) as a PyTorchTrainingJob: the one translation every
part of the system uses to run a Kubeflow job through the same lifecycle. Pure.

A PyTorchJob's `pytorchReplicaSpecs` map (`Master`, `Worker`) becomes the replica specs
`master`, `worker` (so pods and Services are named `<job>-master-0`, `<job>-worker-N`, as
Kubeflow names them); `runPolicy` becomes the run policy and `suspend` a pause; `elasticPolicy`
bounds an elastic job. The job's status keeps the lifecycle's own record under
`status.torchjob`; the Kubeflow status around it is rendered from that record
(render/kubeflow.py). docs/kubeflow.md lists every field and what becomes of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from torchjob.api.job_api import KUBEFLOW_JOB

MASTER: Final = "Master"
WORKER: Final = "Worker"
# Kubeflow's training container: the one its webhook requires, its port and environment read.
DEFAULT_CONTAINER: Final = "pytorch"
# The replica types Kubeflow's PyTorchJob knows, in rank order (the master is rank 0).
REPLICA_TYPES: Final = (MASTER, WORKER)
# Where the lifecycle's own record of a Kubeflow job lives in its status.
STATUS_RECORD: Final = "torchjob"
# The key of the PyTorchJob's own status in the job `as_training_job` makes (a key no job has).
KUBEFLOW_STATUS: Final = "kubeflowStatus"
# The key of the PyTorchJob's own spec in that job: what only Kubeflow's API says (the
# environment's settings, the scheduling policy).
KUBEFLOW_SPEC: Final = "kubeflowSpec"
# The controller a job's runPolicy.managedBy names when torchjob runs it (absent: the same).
KUBEFLOW_MANAGER: Final = "kubeflow.org/training-operator"
# backoffLimit absent: Kubeflow restarts without limit.
UNLIMITED_BACKOFF: Final = 2**31 - 1
# Kubeflow's cleanPodPolicy values and the clean-up policy each one is.
CLEAN_POD_POLICIES: Final = {"All": "All", "Running": "Unfinished", "None": "None"}
# The training process's last progress report: the progress endpoint writes it at the top of a
# PyTorchJob's status, beside Kubeflow's fields, where the progress deadline must read it.
TRAINER_STATUS: Final = "trainerStatus"


@dataclass(frozen=True, slots=True)
class RunPolicyField:
    """One run-policy setting both APIs have: its key in a PyTorchJob's `spec.runPolicy`, its key
    in a PyTorchTrainingJob's, and how a value turns from one API's into the other's."""

    kubeflow: str
    torchjob: str
    # Values the two APIs name differently (Kubeflow's: ours); any other value is `fallback`.
    names: Mapping[str, str] | None = None
    fallback: str = "None"
    # Our value for what a PyTorchJob says by leaving the key out (None: left out in both).
    unset: int | None = None


# The run policy's settings, one row each, in the order a PyTorchTrainingJob writes them: the one
# mapping between the two APIs' run policies (`training_run_policy`, `kubeflow_run_policy`).
RUN_POLICY: Final = (
    RunPolicyField("backoffLimit", "backoffLimit", unset=UNLIMITED_BACKOFF),
    RunPolicyField("cleanPodPolicy", "cleanUpPolicy", names=CLEAN_POD_POLICIES),
    RunPolicyField("activeDeadlineSeconds", "activeDeadlineSeconds"),
    RunPolicyField("ttlSecondsAfterFinished", "ttlSecondsAfterFinished"),
)


def replica_type_of(kubeflow_type: str) -> str:
    """The replica type a `pytorchReplicaSpecs` key runs as (`Master` -> `master`)."""
    return kubeflow_type.lower()


def kubeflow_type_of(replica_type: str) -> str:
    """The `pytorchReplicaSpecs` key of a replica type (`worker` -> `Worker`)."""
    return next((t for t in REPLICA_TYPES if t.lower() == replica_type), replica_type.title())


def ordered_replica_specs(specs: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The replica specs in rank order: Master, Worker, then any other key (which validation
    refuses) as written."""
    known = [(t, specs[t]) for t in REPLICA_TYPES if t in specs]
    return known + [(t, s) for t, s in specs.items() if t not in REPLICA_TYPES]


def as_training_job(job: Mapping[str, Any]) -> dict[str, Any]:
    """The PyTorchTrainingJob that runs a (defaulted) PyTorchJob. It keeps the PyTorchJob's
    apiVersion, kind and metadata, so what is made for it is owned by the PyTorchJob; its status
    is the lifecycle's record kept in the PyTorchJob's status, with the progress the training
    process last reported (which the lifecycle never writes: lifecycle/status.py NOT_OURS)."""
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    record = dict(status.get(STATUS_RECORD) or {})
    if status.get(TRAINER_STATUS) is not None:
        record[TRAINER_STATUS] = status[TRAINER_STATUS]
    return {
        "apiVersion": KUBEFLOW_JOB.api_version,
        "kind": KUBEFLOW_JOB.kind,
        "metadata": job.get("metadata") or {},
        "spec": training_spec(spec),
        "status": record,
        KUBEFLOW_STATUS: status,
        KUBEFLOW_SPEC: spec,
    }


def as_run(job: dict[str, Any]) -> dict[str, Any] | None:
    """A cached job as the lifecycle runs it: a PyTorchTrainingJob as it is, a PyTorchJob as the
    PyTorchTrainingJob `as_training_job` makes of it; None for a PyTorchJob another controller
    manages (`managed_elsewhere`)."""
    if job.get("apiVersion") != KUBEFLOW_JOB.api_version:
        return job
    return None if managed_elsewhere(job) else as_training_job(job)


def is_kubeflow(document: Mapping[str, Any]) -> bool:
    """A manifest written as Kubeflow's PyTorchJob (its apiVersion, or its kind)."""
    return (
        document.get("apiVersion") == KUBEFLOW_JOB.api_version
        or document.get("kind") == KUBEFLOW_JOB.kind
    )


def managed_elsewhere(job: Mapping[str, Any]) -> bool:
    """The PyTorchJob's runPolicy.managedBy names another controller (such as Kueue's
    MultiKueue, which runs it on another cluster): torchjob leaves it alone, as Kubeflow does."""
    run_policy = (job.get("spec") or {}).get("runPolicy") or {}
    manager = run_policy.get("managedBy")
    return bool(manager) and manager != KUBEFLOW_MANAGER


def scheduling_policy(job: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The spec.runPolicy.schedulingPolicy of the PyTorchJob `as_training_job` made `job` of."""
    spec = job.get(KUBEFLOW_SPEC) or {}
    policy = (spec.get("runPolicy") or {}).get("schedulingPolicy")
    return policy if isinstance(policy, Mapping) else None


def training_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A PyTorchJob's spec as a PyTorchTrainingJob's."""
    replica_specs = [
        _replica_spec(kind, replica or {})
        for kind, replica in ordered_replica_specs(spec.get("pytorchReplicaSpecs") or {})
    ]
    out: dict[str, Any] = {"replicaSpecs": replica_specs}
    run_policy = spec.get("runPolicy") or {}
    out["runPolicy"] = training_run_policy(run_policy)
    if run_policy.get("suspend"):
        out["runMode"] = {"pause": {"enabled": True}}
    elastic = spec.get("elasticPolicy")
    if isinstance(elastic, dict):
        # Kubeflow's bounds count Workers; a PyTorchTrainingJob's count every replica.
        masters = 1 if MASTER in (spec.get("pytorchReplicaSpecs") or {}) else 0
        bounds = {
            key: elastic[key] + masters
            for key in ("minReplicas", "maxReplicas")
            if isinstance(elastic.get(key), int)
        }
        out["elastic"] = {"enabled": True, **bounds}
    return out


def _replica_spec(kind: str, replica: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": replica_type_of(kind)}
    for key in ("replicas", "restartPolicy", "template"):
        if replica.get(key) is not None:
            out[key] = replica[key]
    out.setdefault("replicas", 1)
    out.setdefault("restartPolicy", "OnFailure")
    return out


def training_run_policy(run_policy: Mapping[str, Any]) -> dict[str, Any]:
    """A PyTorchJob's runPolicy as a PyTorchTrainingJob's (`RUN_POLICY`): every setting both APIs
    have, a value of the wrong kind counting as none; `suspend` is a pause (`training_spec`)."""
    out: dict[str, Any] = {}
    for field in RUN_POLICY:
        value = run_policy.get(field.kubeflow)
        if field.names is not None:
            out[field.torchjob] = field.names.get(str(value), field.fallback)
        elif isinstance(value, int):
            out[field.torchjob] = value
        elif field.unset is not None:
            out[field.torchjob] = field.unset
    return out


def kubeflow_run_policy(run_policy: Mapping[str, Any]) -> dict[str, Any]:
    """A PyTorchTrainingJob's runPolicy as a PyTorchJob's (`RUN_POLICY`), leaving out what a
    PyTorchJob says by leaving a key out (an unlimited backoffLimit); a pause is `suspend`,
    written by the caller."""
    out: dict[str, Any] = {}
    for field in RUN_POLICY:
        value = run_policy.get(field.torchjob)
        if value is None or value == field.unset:
            continue
        if field.names is not None:
            theirs = {ours: kubeflow for kubeflow, ours in field.names.items()}
            out[field.kubeflow] = theirs.get(str(value), field.fallback)
        elif isinstance(value, int):
            out[field.kubeflow] = value
    return out


def kubeflow_path(path: str, spec: Mapping[str, Any]) -> str:
    """The PyTorchJob field a PyTorchTrainingJob field path (of `training_spec(spec)`) came from,
    for messages: the replica specs by their Kubeflow key, the run policy's own names."""
    out = path
    kinds = [kind for kind, _ in ordered_replica_specs(spec.get("pytorchReplicaSpecs") or {})]
    for index, kind in enumerate(kinds):
        out = out.replace(f"spec.replicaSpecs[{index}]", f"spec.pytorchReplicaSpecs.{kind}")
    for field in RUN_POLICY:
        out = out.replace(f"runPolicy.{field.torchjob}", f"runPolicy.{field.kubeflow}")
    return (
        out.replace("spec.replicaSpecs", "spec.pytorchReplicaSpecs")
        .replace("spec.runMode.pause.enabled", "spec.runPolicy.suspend")
        .replace("spec.elastic", "spec.elasticPolicy")
    )
