"""What a TrainJob's users see of it, as Kubeflow Trainer shows it: the labels of its pods (those
the Kubeflow SDK finds them by), torchrun's environment in the `node` container, and its status
(conditions Suspended, Complete and Failed; `jobsStatus`), rendered from the lifecycle's own record
of the job (api/trainer.py). Pure.

Trainer has no condition for what only torchjob does (a node that cannot start, no progress, a
gang restart), and the SDK reads a TrainJob as running only while it has no condition but
Suspended: each is a Warning Event on the job and a condition of the record
(`status.torchjob.conditions`); when one ends the job, Failed names our reason in its message."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from torchjob.api import constants
from torchjob.api.kubeflow import STATUS_RECORD
from torchjob.api.trainer import MASTER_PORT, NODE
from torchjob.render.environment import HANG_EXITS
from torchjob.render.topology import Replica, replica_address

# JobSet's and the Job controller's labels, by which the Kubeflow SDK finds a TrainJob's pods.
LABEL_JOBSET_NAME: Final = "jobset.sigs.k8s.io/jobset-name"
LABEL_REPLICATED_JOB: Final = "jobset.sigs.k8s.io/replicatedjob-name"
LABEL_JOB_INDEX: Final = "jobset.sigs.k8s.io/job-index"
LABEL_COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
LABEL_ANCESTOR: Final = "trainer.kubeflow.org/trainjob-ancestor-step"

SUSPENDED: Final = "Suspended"
COMPLETE: Final = "Complete"
FAILED: Final = "Failed"
# What a TrainJob's state (its last condition) can be, Created (the Kubeflow SDK's word) before
# it has any.
TRAINER_CONDITIONS: Final = ("Created", SUSPENDED, COMPLETE, FAILED)
# Trainer's reasons: its JobSet's, and its own deadline's.
COMPLETE_REASON: Final = "AllJobsCompleted"
FAILED_REASON: Final = "FailedJobs"
DEADLINE_REASON: Final = "DeadlineExceeded"

EnvVar = dict[str, Any]


def trainer_labels(job_name: str, replica: Replica) -> dict[str, str]:
    """The labels of a node's pod and Service, as JobSet and the Job controller label them."""
    return {
        LABEL_JOBSET_NAME: job_name,
        LABEL_REPLICATED_JOB: NODE,
        LABEL_JOB_INDEX: "0",
        LABEL_COMPLETION_INDEX: str(replica.index),
        LABEL_ANCESTOR: "trainer",
    }


def trainer_env(
    job_name: str,
    replica: Replica,
    nodes: int,
    procs_per_node: int | None,
    container: Mapping[str, Any],
    service_scope: str,
) -> list[EnvVar]:
    """torchrun's variables as Kubeflow Trainer's torch plugin sets them in the `node`
    container, the first node's address being its name in torchjob's topology; then torchjob's
    NCCL setting (`HANG_EXITS`)."""
    values = [
        ("PET_NNODES", str(nodes)),
        ("PET_NPROC_PER_NODE", procs_per_node_of(procs_per_node, container)),
        ("PET_NODE_RANK", str(replica.index)),
        ("PET_MASTER_ADDR", replica_address(job_name, NODE, 0, service_scope)),
        ("PET_MASTER_PORT", str(MASTER_PORT)),
    ]
    return [{"name": name, "value": value} for name, value in values] + list(HANG_EXITS)


def procs_per_node_of(asked: int | None, container: Mapping[str, Any]) -> str:
    """The trainer's numProcPerNode; unset, `auto` (one per GPU) for a container that asks for
    GPUs, else its CPUs, at least one, as Trainer counts them."""
    if asked:
        return str(asked)
    resources = container.get("resources") or {}
    for part in ("limits", "requests"):
        if any("gpu" in str(name) for name in resources.get(part) or {}):
            return "auto"
    for part in ("requests", "limits"):
        cpu = (resources.get(part) or {}).get("cpu")
        if cpu is not None:
            return str(max(1, _whole_cpus(cpu)))
    return "1"


def _whole_cpus(quantity: Any) -> int:
    text = str(quantity)
    try:
        return int(int(text[:-1]) / 1000) if text.endswith("m") else int(float(text))
    except ValueError:
        return 1


def trainer_status(
    before: Mapping[str, Any], record: Mapping[str, Any], now: str, generation: int | None
) -> dict[str, Any]:
    """The TrainJob's status: Trainer's conditions, moved on from `before` (as stored) to what
    the lifecycle's `record` says, the node pods by state, and the record itself."""
    conditions = [dict(c) for c in before.get("conditions") or [] if isinstance(c, dict)]
    for wanted in wanted_conditions(record, before):
        conditions = _set(conditions, wanted, now, generation)
    return {
        "conditions": conditions,
        "jobsStatus": [jobs_status(record)] if record.get("tasks") else None,
        STATUS_RECORD: dict(record),
    }


def runtime_failed_status(
    before: Mapping[str, Any], reason: str, message: str, now: str, generation: int | None
) -> dict[str, Any]:
    """The status of a TrainJob whose runtime cannot be copied (gone, or not one torchjob runs):
    Failed, with our reason."""
    conditions = [dict(c) for c in before.get("conditions") or [] if isinstance(c, dict)]
    failed = _condition(FAILED, "True", reason, message)
    return {"conditions": _set(conditions, failed, now, generation)}


def wanted_conditions(record: Mapping[str, Any], before: Mapping[str, Any]) -> list[dict[str, str]]:
    phase = record.get("phase")
    wanted = []
    if phase == "Paused":
        wanted.append(_condition(SUSPENDED, "True", "Suspended", "TrainJob is suspended"))
    elif _of(before, SUSPENDED).get("status") == "True":
        wanted.append(_condition(SUSPENDED, "False", "Resumed", "TrainJob is resumed"))
    if phase == "Succeeded":
        wanted.append(_condition(COMPLETE, "True", COMPLETE_REASON, "TrainJob completed"))
    elif phase == "Failed":
        failed = _of(record, "Failed")
        reason = str(failed.get("reason") or "")
        ours = DEADLINE_REASON if reason == constants.REASON_DEADLINE_EXCEEDED else FAILED_REASON
        message = f"{reason}: {failed.get('message', '')}" if reason else "TrainJob failed"
        wanted.append(_condition(FAILED, "True", ours, message))
    return wanted


def jobs_status(record: Mapping[str, Any]) -> dict[str, Any]:
    """The node pods by state, as JobSet counts the `node` Job's."""
    phases = [
        r.get("phase") for task in record.get("tasks") or [] for r in task.get("replicas") or []
    ]
    paused = record.get("phase") == "Paused"
    return {
        "name": NODE,
        "ready": phases.count("Running"),
        "succeeded": phases.count("Succeeded"),
        "failed": phases.count("Failed"),
        "active": 0 if paused else phases.count("Running") + phases.count("Pending"),
        "suspended": len(phases) if paused else 0,
    }


def _condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def _set(
    conditions: list[dict[str, Any]], new: dict[str, str], now: str, generation: int | None
) -> list[dict[str, Any]]:
    """metav1's SetStatusCondition: a condition keeps its place and its transition time while
    its status stays."""
    stamped: dict[str, Any] = {**new, "lastTransitionTime": now}
    if generation is not None:
        stamped["observedGeneration"] = generation
    for index, current in enumerate(conditions):
        if current.get("type") != new["type"]:
            continue
        if current.get("status") == new["status"]:
            stamped["lastTransitionTime"] = current.get("lastTransitionTime", now)
        return [*conditions[:index], stamped, *conditions[index + 1 :]]
    return [*conditions, stamped]


def _of(status: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    conditions = status.get("conditions") or []
    return next((c for c in conditions if isinstance(c, dict) and c.get("type") == kind), {})
