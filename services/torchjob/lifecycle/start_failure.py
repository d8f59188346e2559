"""Replicas whose pods cannot start, and the deadline after which that fails the job. Pure.

A replica cannot start when the kubelet says one of its pod's containers (an init container
included) waits for a reason that does not pass by itself (observe.START_FAILURE_REASONS: an
image that cannot be pulled, a Secret or ConfigMap that does not exist), or when the scheduler
says no node can take the pod. The StartFailure condition (lifecycle/conditions.py) shows it
while it holds. Waiting for a turn is not a failure to start: a pod behind scheduling gates (a
queue such as Kueue's) is not one, nor a paused job's, nor the pods of a job whose group waits in
a queue (Volcano's, T9k's) before it is placed.

The start deadline runs from the condition's lastTransitionTime to True (the round that first
sees the failure starts it at its own time): once it has passed with the failure still there,
the job fails with the failure's reason. The deadline is the job's start-deadline annotation,
else the reconciler's --start-deadline; 0 turns it off.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from torchjob.api import constants, queries
from torchjob.api.types import ConditionType
from torchjob.lifecycle.observe import PodView
from torchjob.lifecycle.round import Outcome, Round
from torchjob.lifecycle.times import parse_time, seconds_text
from torchjob.render.scheduling import Gang

CONDITION: ConditionType = "StartFailure"
NAMED = 3  # replicas a message names with the same words; the others are counted


@dataclass(frozen=True, slots=True)
class StartFailure:
    """Replica pod `pod` cannot start: the job's `reason` (ImagePullFailed), and the kubelet's or
    the scheduler's words (`ImagePullBackOff: Back-off pulling image "nope:1"`)."""

    pod: str
    reason: str
    said: str


def start_failures(state: Round) -> list[StartFailure]:
    """The current replicas that cannot start, in the order of the spec's replicas."""
    pause = state.observed.spec.run_mode.pause if state.observed.spec.run_mode else None
    if pause and pause.enabled:
        return []
    queued = _group_queued(state)
    failures = []
    for replica in state.desired:
        pod = state.pods.get((replica.type, replica.index))
        if pod is None or not state.current(pod) or pod.finished or pod.gates:
            continue
        failure = _of_pod(pod, queued)
        if failure is not None:
            failures.append(failure)
    return failures


def _of_pod(pod: PodView, queued: bool) -> StartFailure | None:
    if pod.cannot_start is not None:
        words = pod.cannot_start
        said = f"{words.said}: {words.message}" if words.message else words.said
        return StartFailure(pod.name, words.reason, said)
    if pod.unschedulable and not pod.bound and not queued:
        said = f"{constants.REASON_UNSCHEDULABLE}: {pod.unschedulable}"
        return StartFailure(pod.name, constants.REASON_UNSCHEDULABLE, said)
    return None


def _group_queued(state: Round) -> bool:
    """The job's group waits in a queue for its turn (Volcano's, T9k's): while it is not placed,
    the scheduler's refusals of its pods are the queue's. Kueue's queue holds pods behind a
    scheduling gate instead."""
    gang, group = state.observed.gang, state.observed.group
    if not isinstance(gang, Gang) or not gang.queue or gang.kind is None:
        return False
    return group is None or not group.scheduled


def message(failures: list[StartFailure]) -> str:
    """`replica j-worker-0 cannot start: ImagePullBackOff: ...`; replicas that fail with the
    same words are named together."""
    by_words: dict[str, list[str]] = {}
    for failure in failures:
        by_words.setdefault(failure.said, []).append(failure.pod)
    return "; ".join(f"{_replicas(pods)} cannot start: {said}" for said, pods in by_words.items())


def _replicas(pods: list[str]) -> str:
    if len(pods) == 1:
        return f"replica {pods[0]}"
    named = ", ".join(pods[:NAMED])
    more = f" and {len(pods) - NAMED} more" if len(pods) > NAMED else ""
    return f"replicas {named}{more}"


def deadline_outcome(state: Round, setting: float) -> tuple[Outcome | None, float | None]:
    """The job's failure once a start failure has lasted its start deadline, else None with the
    seconds until the deadline (None: no deadline runs)."""
    deadline = queries.start_deadline(state.observed.job_meta, setting)
    failures = start_failures(state)
    if not failures or deadline <= 0:
        return None, None
    since = _failing_since(state) or state.observed.now
    left = (since + timedelta(seconds=deadline) - state.observed.now).total_seconds()
    if left > 0:
        return None, left
    said = f"the start deadline ({seconds_text(deadline)}) passed: {message(failures)}"
    return Outcome(False, failures[0].reason, said), None


def _failing_since(state: Round) -> datetime | None:
    """When the status last showed the StartFailure condition become True."""
    for condition in state.observed.status.get("conditions") or []:
        if condition.get("type") == CONDITION and condition.get("status") == "True":
            return parse_time(condition.get("lastTransitionTime"))
    return None
