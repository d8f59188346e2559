"""What a job's and a pod's objects say, in the words `torchjob list` and the console show: the
phase (or why replicas cannot start), replicas, the reported progress, a pod's phase, restarts and
reason. Pure: objects as the apiserver returns them (plain JSON dicts) come in, text goes out."""

from __future__ import annotations

from typing import Any, TypeGuard

from torchjob.api import constants
from torchjob.api.job_api import api_of
from torchjob.api.queries import training_container_in
from torchjob.lifecycle.diagnosis import recorded
from torchjob.lifecycle.progress import FIELD as PROGRESS_FIELD
from torchjob.render.job_kinds import kind_of
from torchjob.render.topology import replica_name

NO_VALUE = "-"  # a progress cell without a report


def total_replicas(job: dict[str, Any]) -> int:
    return sum(
        int(r.get("replicas") or 1) for r in (job.get("spec") or {}).get("replicaSpecs") or []
    )


def phase(job: dict[str, Any]) -> str:
    return str((job.get("status") or {}).get("phase") or "Pending")


def start_failure(job: dict[str, Any]) -> str | None:
    """Why the unfinished job's replicas cannot start (ImagePullFailed, ContainerConfigInvalid,
    Unschedulable: its StartFailure condition), or None while nothing keeps them from it."""
    status = job.get("status") or {}
    if phase(job) in constants.FINISHED_JOB_PHASES:
        return None
    for condition in status.get("conditions") or []:
        if condition.get("type") == "StartFailure" and condition.get("status") == "True":
            return str(condition.get("reason") or "StartFailure")
    return None


def phase_cell(job: dict[str, Any]) -> str:
    """The job's phase, or while its replicas cannot start, why: `ImagePullFailed` where
    `kubectl get pods` says ImagePullBackOff."""
    return start_failure(job) or phase(job)


def reported_progress(job: dict[str, Any]) -> dict[str, Any]:
    """What the job's training process last reported (status.trainerStatus); {} when nothing."""
    report = (job.get("status") or {}).get(PROGRESS_FIELD)
    return report if isinstance(report, dict) else {}


def progress_text(job: dict[str, Any]) -> str:
    """`45%` as the training process last reported it (kept after the job ends); `-` without
    a report."""
    percentage = reported_progress(job).get("progressPercentage")
    return f"{percentage}%" if _whole_number(percentage) else NO_VALUE


def eta_text(job: dict[str, Any]) -> str:
    """The training time left as the training process last estimated it (`2m10s`, `1h5m`);
    `-` without an estimate, and once the job has finished (an estimate then says nothing)."""
    seconds = reported_progress(job).get("estimatedRemainingSeconds")
    if phase(job) in constants.FINISHED_JOB_PHASES or not _whole_number(seconds):
        return NO_VALUE
    return duration(max(0, seconds))


def _whole_number(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def pod_phase(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return "Terminating"
    return str((pod.get("status") or {}).get("phase") or "Pending")


def pod_restarts(pod: dict[str, Any]) -> int:
    """The replica's restarts that led to this pod (a restart replaces the pod, which carries the
    count), plus any restart of a container inside it."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    carried = str(annotations.get(constants.ANNOTATION_CONSECUTIVE_RESTARTS) or "0")
    return (int(carried) if carried.isdigit() else 0) + sum(
        int(s.get("restartCount") or 0) for s in statuses
    )


def pod_reason(pod: dict[str, Any]) -> str:
    """Why the pod is where it is: the training container's waiting or terminated reason and
    exit code, else the pod's own reason."""
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    _, training = training_container_in(pod.get("spec") or {})
    name = (training or {}).get("name")
    ordered = sorted(statuses, key=lambda s: s.get("name") != name)
    for container in ordered:
        state = container.get("state") or {}
        if "terminated" in state:
            ended = state["terminated"] or {}
            return f"{ended.get('reason') or 'Terminated'} (exit code {ended.get('exitCode')})"
        if "waiting" in state and (state["waiting"] or {}).get("reason"):
            return str(state["waiting"]["reason"])
    for container in (status.get("initContainerStatuses") or [])[::-1]:
        waiting = (container.get("state") or {}).get("waiting") or {}
        running = (container.get("state") or {}).get("running")
        if waiting.get("reason") or running is not None:
            return f"Init:{container.get('name')} {waiting.get('reason') or 'Running'}"
    return str(status.get("reason") or "")


def replica_pods(
    job: dict[str, Any], pods: list[dict[str, Any]]
) -> list[tuple[str, dict[str, Any] | None]]:
    """Every replica's name (`type-index`) with its pod, if it has one, in spec order."""
    meta = job.get("metadata") or {}
    by_name = {(p.get("metadata") or {}).get("name"): p for p in pods}
    out: list[tuple[str, dict[str, Any] | None]] = []
    for replica in (job.get("spec") or {}).get("replicaSpecs") or []:
        for index in range(int(replica.get("replicas") or 1)):
            replica_type = str(replica.get("type"))
            pod = by_name.get(replica_name(str(meta.get("name")), replica_type, index))
            out.append((f"{replica_type}-{index}", pod))
    return out


def duration(seconds: int) -> str:
    minutes, secs = divmod(seconds, 60)
    hours, mins = divmod(minutes, 60)
    days, hrs = divmod(hours, 24)
    if minutes < 1:
        return f"{secs}s"
    if minutes < 10:
        return f"{mins}m{secs}s" if secs else f"{mins}m"
    if hours < 1:
        return f"{mins}m"
    if hours < 8:
        return f"{hours}h{mins}m" if mins else f"{hours}h"
    if days < 2:
        return f"{hours}h"
    if days < 8:
        return f"{days}d{hrs}h" if hrs else f"{days}d"
    return f"{days}d"


def job_of_pod(pod: dict[str, Any]) -> tuple[Any, Any]:
    """The namespace and name of the job a replica pod belongs to (its job-name label)."""
    meta = pod.get("metadata") or {}
    return meta.get("namespace"), (meta.get("labels") or {}).get(constants.LABEL_JOB_NAME)


def diagnosis_record(job: dict[str, Any]) -> dict[str, Any]:
    """The job's status.diagnosis (lifecycle/diagnosis.py), read where its kind keeps the
    lifecycle's record (a PyTorchJob's in its status.torchjob); {} before the first."""
    view = kind_of(api_of(job)).training_job(job)
    return recorded(dict(view.get("status") or {}))
