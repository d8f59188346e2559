"""What a job whose pods form a Kueue pod group tells Kueue. Pure.

Kueue's plain pod groups (render/scheduling.py) read the pods, not the job, and hold each pod
with a finalizer of Kueue's. Two ways out, both Kueue's documented ones (its plain-pods task,
"Termination"):

- A job that ended marks its pods `retriable-in-group: "false"` (`group_to_end`): Kueue frees a
  group's quota and lets its pods go only once every pod succeeded, unless a pod says its group
  is not retried, and the replicas stopped after the master succeeded, or the failed pods of a
  job that failed, never succeed.
- A job that goes on, or is deleted, deletes the group's Workload (`workload_to_release`) once
  Kueue holds a pod of it that is being deleted: Kueue lets such a pod go only once a replacement
  of the same role exists, and the replacement of a replica has the replica's name, which the
  held pod keeps, so neither would ever go. Deleting the Workload makes Kueue let every pod of
  the group go (and delete those not being deleted yet); the pods created next form a new
  Workload, which waits in the queue to be admitted again. A restart of a job in a Kueue group is
  so a restart of the whole group, queued again: the quota it held is released meanwhile.
  Kueue frees the quota as the Workload goes, so the Workload is released only once no pod of
  the job that is being stopped on a node still runs (or its deletion's grace period is over, as
  Kueue itself counts a pod stuck stopping): the quota is freed after the resources are, as a
  preempted job's would be.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from torchjob.lifecycle.decision import PodRef
from torchjob.lifecycle.observe import PodView
from torchjob.lifecycle.round import Round
from torchjob.render.scheduling import Gang


def group_to_end(state: Round) -> tuple[PodRef, ...]:
    """The pods of the ended job's Kueue pod group that do not yet tell Kueue the group is over;
    none for a job whose pods form no Kueue group."""
    gang = state.observed.gang
    if not isinstance(gang, Gang) or gang.mode != "kueue":
        return ()
    return tuple((pod.name, pod.uid) for pod in state.observed.pods if not pod.group_ended)


@dataclass(frozen=True)
class Release:
    workload: str | None  # the Workload to delete now (named as the pod group)
    recheck_after: float | None  # seconds until a pod still stopping is past its grace period


def workload_to_release(pods: Sequence[PodView], now: datetime) -> Release:
    """What to release so that Kueue lets the job's pods go: the Workload of a group of which
    Kueue holds a pod being deleted, once none of the job's pods being stopped on a node runs;
    nothing while none is held."""
    held = sorted({pod.kueue_group for pod in pods if pod.held_by_kueue and pod.kueue_group})
    if not held:
        return Release(None, None)
    stopping = [
        pod
        for pod in pods
        if pod.deleting
        and pod.bound
        and not pod.finished
        and (pod.deletion_due is None or pod.deletion_due > now)
    ]
    if stopping:
        dues = [(p.deletion_due - now).total_seconds() for p in stopping if p.deletion_due]
        return Release(None, min(dues) if dues else None)
    return Release(held[0], None)
