"""When a job that has ended may say so. Pure.

The rule: a job is Succeeded or Failed only once none of its pods runs. When the planner decides
how the job ended (lifecycle/plan.py), every pod of the job that has not finished is stopped,
whatever cleanUpPolicy says (cleanUpPolicy decides which finished pods and Services are kept,
lifecycle/housekeeping.py); the Completed or Failed condition, the phase and completionTime are
written once every such pod is gone. A queue that frees the job's quota when it reads that
condition (Kueue's integrations of job kinds) frees it after the resources are, and no worker
runs on under a job that says it succeeded.

In between, the Running condition is False and carries how the job ended: that is how the
rounds in between know it. They stop the pods again if need be, create none, and decide nothing
else. A pod stuck being deleted on a node that will never confirm it is force-deleted
(lifecycle/nodes.py), so the job does not wait on it forever.

Kueue's plain pod groups, ours, read the pods instead: Kueue frees a group's quota and lets its
pods go only once every pod succeeded, unless a pod says its group is not retried, and the
replicas stopped after the master succeeded, or the failed pods of a job that failed, never
succeed. So a job whose pods form a Kueue pod group also tells Kueue the group is over
(`lifecycle/kueue.py`), from the round that decides the ending on, the job's last rounds
included (docs/scheduling.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from torchjob.api import constants
from torchjob.lifecycle import kueue
from torchjob.lifecycle.conditions import COMPLETED_REASONS, FAILED_REASONS, Event
from torchjob.lifecycle.decision import Decision, PodRef
from torchjob.lifecycle.nodes import judge_nodes
from torchjob.lifecycle.observe import PodView
from torchjob.lifecycle.round import Outcome, Round
from torchjob.lifecycle.times import parse_time


def recorded_outcome(status: Mapping[str, Any]) -> Outcome | None:
    """How the job ended, as a round before decided it and the status shows while the job's
    pods stop; None when the status shows no ending."""
    for condition in status.get("conditions") or ():
        if condition.get("type") != "Running" or condition.get("status") != "False":
            continue
        reason = str(condition.get("reason") or "")
        if reason in COMPLETED_REASONS or reason in FAILED_REASONS:
            return Outcome(reason in COMPLETED_REASONS, reason, str(condition.get("message", "")))
    return None


def unfinished(pods: Iterable[PodView]) -> list[PodView]:
    """The pods that still hold their node's resources: not finished, being deleted or not."""
    return [pod for pod in pods if not pod.finished]


def stop(
    state: Round,
    outcome: Outcome,
    deleting: frozenset[str],
    force_deleting: frozenset[PodRef],
) -> Decision:
    """The job has ended (`outcome`): its pods that have not finished are deleted unless they
    are being deleted already (by the pod, or by a step before, of the names `deleting`), those
    stuck being deleted on a lost node that will never confirm it force-deleted (unless a step
    before does, `force_deleting`), and they are stopping. It looks again after the seconds
    until a pod being deleted on a node not Ready has had its grace, or those of a job that
    succeeded have had theirs; never when there is neither."""
    running = unfinished(state.observed.pods)
    grace = grace_left(state, outcome)
    deletes = tuple(
        (pod.name, pod.uid)
        for pod in running
        if not grace and not pod.deleting and pod.name not in deleting
    )
    observed = state.observed
    terminating = [pod for pod in running if pod.deleting]
    stuck = judge_nodes(terminating, (), observed.nodes, observed.now, lambda _: None)
    waits = [w for w in (stuck.recheck, grace if running and grace else None) if w is not None]
    return Decision(
        delete_pods=deletes,
        force_delete_pods=tuple(p for p in stuck.force_delete if p not in force_deleting),
        end_group=kueue.group_to_end(state),
        stopping=tuple(pod.name for pod in running),
        requeue_after=min(waits, default=None),
    )


def grace_left(state: Round, outcome: Outcome | None) -> float:
    """Seconds the replicas of a job that succeeded (`outcome`) still have to finish on their
    own (the rules' success_grace: they leave the process group a moment after the one whose
    success ended the job, and a worker about to exit 0 should not be killed, its log lost); 0
    for a job that failed, whose replicas are stopped at once."""
    if outcome is None or not outcome.succeeded:
        return 0.0
    since = _ending_recorded_at(state.observed.status) or state.observed.now
    grace = state.rules.success_grace
    return max(0.0, grace - (state.observed.now - since).total_seconds())


def _ending_recorded_at(status: Mapping[str, Any]) -> datetime | None:
    if recorded_outcome(status) is None:
        return None
    running = [c for c in status.get("conditions") or () if c.get("type") == "Running"]
    return parse_time(running[0].get("lastTransitionTime")) if running else None


def stopping_events(state: Round) -> list[Event]:
    """An Event when the ending is decided and pods must stop first; the rounds after it, whose
    status shows the ending, say nothing more until the job says it ended."""
    outcome = state.outcome
    if outcome is None or not state.stopping or recorded_outcome(state.observed.status):
        return []
    names = ", ".join(sorted(state.stopping))
    if outcome.succeeded and state.rules.success_grace:
        message = (
            f"{outcome.message}: waiting up to {state.rules.success_grace:.0f}s for {names} to "
            "finish, then "
            "stopping them, before the job is marked Succeeded"
        )
    else:
        phase = "Succeeded" if outcome.succeeded else "Failed"
        message = f"{outcome.message}: stopping {names} before the job is marked {phase}"
    return [Event("Normal", constants.REASON_STOPPING, message)]
