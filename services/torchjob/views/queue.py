"""Where a job waiting for Kueue's admission stands in its queue, as `torchjob get` and the
console's job page show it. Pure: the caller reads Kueue's visibility API as the user
(kube/kueue.py) and hands its answer here.

A job waits for Kueue while its `Scheduled` condition says `WaitingForAdmission`; its pods carry
Kueue's queue label and the pod group's name, which is its Workload's (render/scheduling.py).
Kueue's visibility API lists the pending Workloads of a LocalQueue with their positions, counted
from 0, in the LocalQueue and in its ClusterQueue."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchjob.api import constants
from torchjob.render.scheduling import KUEUE_GROUP_LABEL, KUEUE_QUEUE_LABEL
from torchjob.views.summary import job_of_pod


@dataclass(frozen=True)
class Queued:
    queue: str  # the LocalQueue, in the job's namespace
    workload: str  # the pod group's Workload


def waiting_for_admission(job: dict[str, Any]) -> bool:
    for condition in (job.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Scheduled":
            return bool(condition.get("reason") == constants.REASON_WAITING_FOR_ADMISSION)
    return False


def queued(job: dict[str, Any], pods: list[dict[str, Any]]) -> Queued | None:
    """The queue and Workload of a job that waits for Kueue's admission; None for one that does
    not, or whose pods do not say yet."""
    if not waiting_for_admission(job):
        return None
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get(KUEUE_QUEUE_LABEL) and labels.get(KUEUE_GROUP_LABEL):
            return Queued(str(labels[KUEUE_QUEUE_LABEL]), str(labels[KUEUE_GROUP_LABEL]))
    return None


def short_text(where: Queued, pending: dict[str, Any] | None) -> str:
    """`torchjob list -o wide`'s QUEUE cell: the queue and the job's place in it, if known."""
    for item in (pending or {}).get("items") or []:
        if (item.get("metadata") or {}).get("name") == where.workload:
            return f"{where.queue} ({_nth(int(item.get('positionInLocalQueue') or 0) + 1)})"
    return where.queue


def waiting_jobs(
    jobs: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> dict[tuple[str, str], Queued]:
    """Where each of `jobs` that waits for Kueue's admission waits, by namespace and name, from
    its pods among `pods`."""
    by_job: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for pod in pods:
        namespace, name = job_of_pod(pod)
        by_job.setdefault((str(namespace), str(name)), []).append(pod)
    waiting = {}
    for job in jobs:
        key = (str(job["metadata"].get("namespace")), str(job["metadata"]["name"]))
        if (where := queued(job, by_job.get(key, []))) is not None:
            waiting[key] = where
    return waiting


def position_text(where: Queued, pending: dict[str, Any] | None, problem: str = "") -> str:
    """`where` the job waits, and its place as Kueue's `pending` Workloads of the LocalQueue say
    (a PendingWorkloadsSummary); `problem`: why they could not be read."""
    if pending is None:
        return f"{where.queue}, position unknown ({problem or 'not read'})"
    items = pending.get("items") or []
    for item in items:
        if (item.get("metadata") or {}).get("name") == where.workload:
            local = int(item.get("positionInLocalQueue") or 0) + 1
            cluster = int(item.get("positionInClusterQueue") or 0) + 1
            return (
                f"{where.queue}, {_nth(local)} of {len(items)} waiting in it "
                f"({_nth(cluster)} in its ClusterQueue)"
            )
    return f"{where.queue}, not among the Workloads Kueue lists as pending (admitted just now?)"


def _nth(number: int) -> str:
    suffix = (
        "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    )
    return f"{number}{suffix}"
