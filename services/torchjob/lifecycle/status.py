"""The job's status as a function of the facts one round of planning ends with (its `Round`:
what was observed and what the planner's steps decided). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from torchjob.api import constants
from torchjob.api.types import (
    ConditionDict,
    ConditionStatus,
    ConditionType,
    ContainerStatusDict,
    JobPhase,
    ReplicaStatusDict,
    TaskStatusDict,
)
from torchjob.lifecycle import finishing
from torchjob.lifecycle.conditions import CONDITIONS, Wanted, wanted_conditions
from torchjob.lifecycle.observe import ContainerView, PodView
from torchjob.lifecycle.round import Outcome, Round, recorded, recorded_for
from torchjob.lifecycle.times import format_time
from torchjob.render.topology import replica_name

TERMINAL_CONDITIONS: tuple[ConditionType, ...] = ("Completed", "Failed")
# The phases of a job paused, or paused before and not running again yet.
PAUSED_PHASES: tuple[JobPhase, ...] = ("Paused", "Resuming")

# Status fields another service writes; the reconciler's merge patches leave them alone:
# the housekeeper's TensorBoard, and the progress the training process reports to the progress
# endpoint (lifecycle/progress.py), which must outlive every restart and the job's end.
NOT_OURS = ("tensorboard", "trainerStatus")


def ours(status: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in status.items() if k not in NOT_OURS}


def is_terminal(status: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") in TERMINAL_CONDITIONS and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def build_status(state: Round, *, starting: bool) -> dict[str, Any]:
    """The status `state` shows; `starting` says whether the round creates pods (the job has
    started once it has a pod or is about to)."""
    observed = state.observed
    old = observed.status
    outcome = state.outcome
    now = format_time(observed.now)
    phase = _phase(state, outcome)
    start = old.get("startTime") or (now if starting or state.pods else None)
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": _conditions(state, phase, now),
        "tasks": _tasks(state),
        "aggregate": _aggregate(state),
        "backoffCount": state.backoff_count,
        "observedGeneration": observed.job_meta.get("generation", 0),
        "replicas": _current_replicas(state),
        "selector": f"{constants.LABEL_JOB_NAME}={observed.job_meta['name']}",
    }
    if start:
        status["startTime"] = start
    ended = outcome is not None and not state.stopping
    completion = old.get("completionTime") or (now if ended else None)
    if completion:
        status["completionTime"] = completion
    return status


def _phase(state: Round, outcome: Outcome | None) -> JobPhase:
    """Running only while the job's current pods run: a change of mode (debug switched on or
    off, a resume) makes the job Pending (Resuming) until its new pods run. A replica restarted
    within a running job leaves it Running; ReplicaFailure tells of the restart."""
    old = state.observed.status
    was: JobPhase | None = old.get("phase")
    if is_terminal(old):
        return cast(JobPhase, str(old.get("phase")))
    if outcome is not None and state.stopping:
        return was or "Pending"  # it says it ended once its pods are gone (lifecycle/finishing.py)
    if outcome is not None:
        return "Succeeded" if outcome.succeeded else "Failed"
    pause = state.observed.spec.run_mode.pause if state.observed.spec.run_mode else None
    if pause and pause.enabled:
        return "Paused"
    if _all_started(state):
        return "Running"
    if was in PAUSED_PHASES:
        return "Resuming"
    return "Running" if was == "Running" and not _mode_changed(state) else "Pending"


def _current_replicas(state: Round) -> int:
    """The replicas the spec asks for now whose pod exists and is of the job's mode: the scale
    subresource's status.replicas."""
    pods = (state.pods.get((r.type, r.index)) for r in state.desired)
    return sum(1 for pod in pods if pod is not None and state.current(pod))


def _mode_changed(state: Round) -> bool:
    """The job ran in the other mode (debug or not) than the one it is in now."""
    running = _old_condition(state, "Running")
    if running.get("status") != "True":
        return False
    return (running.get("reason") == constants.REASON_DEBUG) != state.debug


def _old_condition(state: Round, kind: ConditionType) -> Mapping[str, Any]:
    conditions = state.observed.status.get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def _all_started(state: Round) -> bool:
    for replica in state.desired:
        pod = state.pods.get((replica.type, replica.index))
        if pod is None or not state.current(pod) or pod.phase not in ("Running", "Succeeded"):
            return False
    return True


def _conditions(state: Round, phase: JobPhase, now: str) -> list[ConditionDict]:
    generation = state.observed.job_meta.get("generation", 0)
    old = state.observed.status.get("conditions") or []
    previous = {c.get("type"): c for c in old}
    if is_terminal(state.observed.status):
        # A finished job's conditions stay as they were.
        return [
            condition(
                c["type"],
                cast(ConditionStatus, str(c.get("status"))),
                str(c.get("reason", "")),
                str(c.get("message", "")),
                generation,
                now,
                c,
            )
            for c in {c["type"]: c for c in old if "type" in c}.values()
        ]
    wanted = wanted_conditions(state, phase, previous)
    if finishing.recorded_outcome(state.observed.status) is not None:
        wanted = _as_decided(wanted, previous)
    return [
        condition(kind, status, reason, message, generation, now, previous.get(kind))
        for kind, (status, reason, message) in wanted
    ]


def _as_decided(
    wanted: list[tuple[ConditionType, Wanted]], previous: Mapping[Any, Mapping[str, Any]]
) -> list[tuple[ConditionType, Wanted]]:
    """The conditions of a round after the one that decided how the job ended, while its pods
    stop (lifecycle/finishing.py): those it wrote stay as they were, whatever the pods' going
    away would say now (replicas being created, no failure); Completed or Failed joins them."""
    kept: dict[ConditionType, Wanted] = dict(wanted)
    for row in CONDITIONS:
        before = previous.get(row.type)
        if before is not None and row.type not in TERMINAL_CONDITIONS:
            status = cast(ConditionStatus, str(before.get("status")))
            kept[row.type] = (status, str(before.get("reason", "")), str(before.get("message", "")))
    return [(row.type, kept[row.type]) for row in CONDITIONS if row.type in kept]


def condition(
    kind: ConditionType,
    status: ConditionStatus,
    reason: str,
    message: str,
    generation: int,
    now: str,
    before: Mapping[str, Any] | None,
) -> ConditionDict:
    """A condition as of `now`: its lastTransitionTime moves only when its status changes from
    what it was `before`."""
    since = (before or {}).get("lastTransitionTime")
    unchanged = (before or {}).get("status") == status
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since if unchanged and since else now,
        "observedGeneration": generation,
    }


def _tasks(state: Round) -> list[TaskStatusDict]:
    name = state.observed.job_meta["name"]
    tasks: dict[str, TaskStatusDict] = {}
    for spec in state.observed.spec.replica_specs or []:
        kind = spec.type or ""
        restarts = state.restarts_by_type.get(kind, 0)
        tasks[kind] = {"type": kind, "restartCount": restarts, "replicas": []}
    for replica in sorted(state.desired, key=lambda r: (r.type, r.index)):
        pod_name = replica_name(name, replica.type, replica.index)
        tasks[replica.type]["replicas"].append(
            _replica_status(state, replica.type, replica.index, pod_name)
        )
    return list(tasks.values())


def _replica_status(state: Round, kind: str, index: int, pod_name: str) -> ReplicaStatusDict:
    pod = state.pods.get((kind, index))
    if pod is None or pod_name in state.uid_dropped or pod.deleting:
        seen = {} if pod_name in state.uid_dropped else recorded(state.observed.status, pod_name)
        uid = seen.get("uid")
        carried = seen.get("consecutiveRestarts")
        in_a_row = state.in_a_row.get(pod_name, carried if isinstance(carried, int) else 0)
        gone: ReplicaStatusDict = {"name": pod_name}
        if uid:
            gone["uid"] = uid
        return _with_in_a_row(gone, in_a_row)
    entry: ReplicaStatusDict = {"name": pod_name, "uid": pod.uid, "phase": pod.phase}
    if pod.containers:
        entry["containers"] = [_container_status(c) for c in pod.containers]
    if counted := _counted_in_place(state, pod_name, pod.uid):
        entry["restartsInPlace"] = counted
    return _with_in_a_row(entry, _in_a_row(state, pod_name, pod))


def _in_a_row(state: Round, pod_name: str, pod: PodView) -> int:
    """The replica's restarts in a row: this round's, else its pod's own; a pod that restarts in
    place carries its count in the status (its annotation is its creation's)."""
    if pod_name in state.in_a_row:
        return state.in_a_row[pod_name]
    seen = recorded_for(state.observed.status, pod_name, pod.uid)
    if pod.in_place and pod_name not in state.uid_dropped and seen:
        carried = seen.get("consecutiveRestarts")
        return carried if isinstance(carried, int) else 0
    return pod.consecutive_restarts


def _counted_in_place(state: Round, pod_name: str, uid: str) -> int:
    """The training container's restarts in place counted for pod `uid` (lifecycle/
    in_place.py): this round's, else the status's for the same pod."""
    if pod_name in state.counted_in_place:
        return state.counted_in_place[pod_name]
    if pod_name in state.uid_dropped:
        return 0
    counted = recorded_for(state.observed.status, pod_name, uid).get("restartsInPlace")
    return counted if isinstance(counted, int) else 0


def _container_status(container: ContainerView) -> ContainerStatusDict:
    entry: ContainerStatusDict = {"name": container.name, "state": container.state}
    if container.exit_code is not None:
        entry["exitCode"] = container.exit_code
    if container.reason:
        entry["reason"] = container.reason
    return entry


def _with_in_a_row(entry: ReplicaStatusDict, count: int) -> ReplicaStatusDict:
    """`entry` with its restarts in a row, which it shows only when there are some."""
    if count:
        entry["consecutiveRestarts"] = count
    return entry


def _aggregate(state: Round) -> dict[str, int]:
    counts = dict.fromkeys(
        ("creating", "pending", "running", "succeeded", "failed", "unknown", "deleted"), 0
    )
    # A job that ended creates no pod: its missing pods were stopped or cleaned up.
    ended = state.outcome is not None or is_terminal(state.observed.status)
    missing = "deleted" if ended else "creating"
    for replica in state.desired:
        pod = state.pods.get((replica.type, replica.index))
        if pod is None:
            counts[missing] += 1
        elif not state.current(pod):
            counts["deleted"] += 1  # being deleted, or of the mode before (and about to be)
        else:
            counts[pod.phase.lower() if pod.phase.lower() in counts else "unknown"] += 1
    return counts
