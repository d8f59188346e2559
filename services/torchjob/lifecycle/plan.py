"""The reconciler's decision, as a pure function: the job and what is observed of its pods and
services -> what to create, what to delete, the status to write, the events to record, and when
to look again. Same observations, same plan, in whatever order the events arrived.

Restarts are counted in a crash-safe way: `status.tasks[].replicas[]` records the pod uid of each
replica. A replica whose recorded pod is gone is recreated and counted; the status written before
the creation carries the new count and drops the old uid, so a crash between the two neither
loses nor doubles a count.

A replica that ended is restarted after a delay (lifecycle/backoff.py): its pod is kept, and
deleted once the delay has passed, so the delay is read off the pod in every round and the
reconcile that decides to wait asks to be run again when the wait is over.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from torchjob.api import constants, queries
from torchjob.api.objects import FINISHED_POD_PHASES
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.lifecycle import finishing, gang, no_progress, start_failure
from torchjob.lifecycle.backoff import (
    DEFAULT_BACKOFF,
    DEFAULT_RULES,
    PendingRestart,
    RestartBackoff,
    RestartRules,
    next_in_a_row,
    pending_restart,
)
from torchjob.lifecycle.conditions import Event
from torchjob.lifecycle.nodes import judge_nodes
from torchjob.lifecycle.observe import (
    PodView,
    describe_failure,
    ending,
    failure_message,
)
from torchjob.lifecycle.round import Observed, Outcome, Round
from torchjob.lifecycle.status import (
    PAUSED_PHASES,
    build_status,
    is_terminal,
    ours,
    recorded,
)
from torchjob.lifecycle.times import parse_time, seconds_text
from torchjob.lifecycle.transitions import transition_events
from torchjob.render.scheduling import GangUnavailable
from torchjob.render.topology import Replica, replica_name, replicas_of


@dataclass(frozen=True, slots=True)
class PodToCreate:
    replica: Replica
    annotations: dict[str, str]


@dataclass(slots=True)
class Plan:
    create_services: list[Replica] = field(default_factory=list)
    create_pods: list[PodToCreate] = field(default_factory=list)
    delete_pods: list[tuple[str, str]] = field(default_factory=list)  # (name, uid)
    # Pods stuck being deleted on a node that will never confirm it (lifecycle/nodes.py).
    force_delete_pods: list[tuple[str, str]] = field(default_factory=list)  # (name, uid)
    delete_services: list[str] = field(default_factory=list)  # of replicas scaled away
    status: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    # Events about the change of status itself (a new phase): recorded once it is written.
    status_events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    # The status only describes creations in flight and records no restart: it may be written
    # after them, by the reconcile that observing them triggers (one write a job, not two).
    status_can_wait: bool = False
    # The job's group object (render/scheduling.py): created before the pods, its minimum set
    # to the gang's, or deleted (a pause: the resumed pods form a new group).
    create_group: bool = False
    resize_group: bool = False
    delete_group: bool = False


@dataclass(slots=True)
class _Planning(Round):
    """A round's facts, with how the planner decides and what it has decided so far."""

    rule: RestartBackoff = DEFAULT_BACKOFF
    plan: Plan = field(default_factory=Plan)
    announced: list[Event] = field(default_factory=list)  # restarts decided this round


def plan(observed: Observed, rules: RestartRules = DEFAULT_RULES) -> Plan:
    """The plan for what is observed; `rules` say how replicas are restarted."""
    spec = observed.spec
    if not spec.replica_specs:
        return Plan(status=ours(observed.status))
    state = _start_round(observed)
    state.rules, state.rule = rules, rules.backoff
    gang.start(state)
    state.debug = queries.debug_enabled(spec) and not _paused(spec)
    if is_terminal(observed.status):
        state.plan.status = build_status(state, starting=False) | gang.status_fields(state)
        return state.plan
    if (ended := finishing.recorded_outcome(observed.status)) is not None:
        state.outcome = ended  # the job's pods are stopping: nothing else is decided
        return _finish(state)
    if _deadline_passed(state) or _start_deadline_passed(state):
        return _finish(state)
    if _paused(spec):
        _pause(state)
    elif not _group(state):
        pass  # the job cannot be placed as asked: it failed
    elif queries.debug_enabled(spec):
        _debug(state)
    else:
        _run(state)
    _judge_refusals(state)
    return _finish(state)


def _start_round(observed: Observed) -> _Planning:
    desired = replicas_of(observed.spec)
    pods = {(p.replica_type, p.index): p for p in observed.pods}
    recorded = int(observed.status.get("backoffCount") or 0)
    backoff = max([recorded, *(p.backoff_count for p in observed.pods)])
    restarts = {
        t.get("type", ""): int(t.get("restartCount") or 0)
        for t in observed.status.get("tasks") or []
    }
    return _Planning(observed, desired, pods, backoff, restarts)


def _judge_refusals(state: _Planning) -> None:
    """The apiserver refused some of the job's creations last time: a permanent refusal of an
    object this round creates again fails the job, a transient one is shown while it is retried.
    A refusal of an object that exists since, or that is no longer created, is history."""
    name = state.observed.job_meta["name"]
    again = {
        *(
            ("pod", replica_name(name, p.replica.type, p.replica.index))
            for p in state.plan.create_pods
        ),
        *(("service", replica_name(name, r.type, r.index)) for r in state.plan.create_services),
        *((("podgroup", name),) if state.plan.create_group else ()),
    }
    for refusal in state.observed.refusals:
        if (refusal.kind, refusal.name) not in again:
            continue
        if not refusal.permanent:
            state.refused.append(refusal)
        elif state.outcome is None:
            state.outcome = Outcome(False, refusal.reason, refusal.message)


def _paused(spec: PyTorchTrainingJobSpec) -> bool:
    pause = spec.run_mode.pause if spec.run_mode else None
    return bool(pause and pause.enabled)


def _deadline_passed(state: _Planning) -> bool:
    policy = state.observed.spec.run_policy
    started = parse_time(state.observed.status.get("startTime"))
    if not policy or not policy.active_deadline_seconds or started is None:
        return False
    deadline = started + timedelta(seconds=policy.active_deadline_seconds)
    if state.observed.now < deadline:
        _requeue(state, (deadline - state.observed.now).total_seconds())
        return False
    state.outcome = Outcome(
        False,
        constants.REASON_DEADLINE_EXCEEDED,
        f"the job ran longer than activeDeadlineSeconds ({policy.active_deadline_seconds}s)",
    )
    _delete_unfinished(state)
    return True


def _start_deadline_passed(state: _Planning) -> bool:
    """A replica could not start for its start deadline (lifecycle/start_failure.py): it fails."""
    outcome, wait = start_failure.deadline_outcome(state, state.rules.start_deadline)
    if wait is not None:
        _requeue(state, wait)
    if outcome is None:
        return False
    state.outcome = outcome
    _delete_unfinished(state)
    return True


def _delete_unfinished(state: _Planning) -> None:
    for pod in state.pods.values():
        if not pod.finished and not pod.deleting:
            state.plan.delete_pods.append((pod.name, pod.uid))


def _pause(state: _Planning) -> None:
    for pod in state.pods.values():
        if not pod.deleting:
            state.plan.delete_pods.append((pod.name, pod.uid))
        state.uid_dropped.add(pod.name)  # pods deleted by a pause are not restarts
    _ensure_services(state)
    group = state.observed.group
    # The group's scheduling state is that of its first placement: the resumed pods get a new one.
    state.plan.delete_group = group is not None and not group.deleting


def _group(state: _Planning) -> bool:
    """The job's group object, created before its pods and kept at the gang's minimum. False
    when the job asks for gang scheduling the cluster does not serve: that fails it."""
    gang, group = state.observed.gang, state.observed.group
    if isinstance(gang, GangUnavailable):
        state.outcome = Outcome(False, constants.REASON_GANG_UNAVAILABLE, gang.message)
        return False
    if gang is None or gang.kind is None:
        return True
    if group is None:
        state.plan.create_group = True  # the executor creates it before any pod
    elif group.deleting:
        state.hold_creations = True  # the pods must not join the group being deleted
    elif group.min_count != gang.min_count:
        state.plan.resize_group = True
    return True


def _debug(state: _Planning) -> None:
    """Debug pods run the debug command and are never restarted."""
    _ensure_services(state)
    for replica in state.desired:
        pod = state.pods.get((replica.type, replica.index))
        if pod is None and state.hold_creations:
            continue
        if pod is None:
            _create(state, replica, counted=False, extra={constants.ANNOTATION_DEBUG: "true"})
        elif not pod.debug and not pod.deleting:
            state.plan.delete_pods.append((pod.name, pod.uid))
            state.uid_dropped.add(pod.name)


def _run(state: _Planning) -> None:
    _ensure_services(state)
    _delete_surplus(state)
    _lost_with_nodes(state)
    state.plan.delete_pods += [(p.name, p.uid) for p in gang.stop_earlier(state)]
    for replica in state.desired:
        if state.outcome is not None:
            break
        pod = state.pods.get((replica.type, replica.index))
        if pod is None:
            _create_missing(state, replica)
        elif pod.gang_restarts < state.gang_restarts:
            continue  # of a gang restarted since: deleted above, its ending no news
        elif pod.debug and not pod.deleting:
            state.plan.delete_pods.append((pod.name, pod.uid))  # debug mode was switched off
            state.uid_dropped.add(pod.name)
        elif pod.preempted:
            _preempted(state, pod)
        elif pod.finished and not pod.deleting:
            _judge_finished(state, replica, pod)
        elif pod.finished:  # deleted after it ended: its replacement is the next in its row
            state.in_a_row[pod.name] = next_in_a_row(pod, state.rule)
    if state.outcome is None and (deadline := no_progress.check(state)) is not None:
        _requeue(state, deadline)
    _restart_gang(state)


def _restart_gang(state: _Planning) -> None:
    """Every replica restarted together (lifecycle/gang.py), when this round found a cause:
    its status is written, then every pod deleted; the new gang is created once they are gone."""
    cause, pending = gang.settle(state)
    if pending is not None:
        wait = pending.remaining(state.observed.now)
        _announce(state, pending, wait)
        state.waiting.append(pending)
        _requeue(state, wait)
    if cause is None:
        return
    state.plan.create_pods.clear()
    deleted = {uid for _, uid in state.plan.delete_pods}
    state.plan.delete_pods += [
        (p.name, p.uid) for p in state.pods.values() if not p.deleting and p.uid not in deleted
    ]
    state.announced[:] = [gang.event(state, cause)]


def _lost_with_nodes(state: _Planning) -> None:
    """Pods lost with their node are replaced as preempted ones are (lifecycle/nodes.py)."""
    wanted = {(r.type, r.index) for r in state.desired}
    seen = state.observed
    pods = [p for p in state.pods.values() if p.deleting or state.current(p)]
    losses = judge_nodes(pods, wanted, seen.nodes, seen.now, lambda n: _recorded_uid(state, n))
    state.preempted += losses.lost
    state.uid_dropped.update(p.name for p in losses.lost)
    state.plan.delete_pods += losses.delete
    state.plan.force_delete_pods += losses.force_delete
    state.plan.events += [Event("Warning", constants.REASON_NODE_LOST, m) for m in losses.told]
    if losses.recheck is not None:
        _requeue(state, losses.recheck)


def _preempted(state: _Planning, pod: PodView) -> None:
    """A pod stopped to make room for other work is no failure of the job: its replacement is
    not counted as a restart. The preemptor deletes a running one; an ended one is deleted
    here, and recreated when it is gone."""
    state.preempted.append(pod)
    state.uid_dropped.add(pod.name)
    if pod.finished and not pod.deleting:
        state.plan.delete_pods.append((pod.name, pod.uid))


def _ensure_services(state: _Planning) -> None:
    name = state.observed.job_meta["name"]
    for replica in state.desired:
        if replica_name(name, replica.type, replica.index) not in state.observed.services:
            state.plan.create_services.append(replica)


def _delete_surplus(state: _Planning) -> None:
    """Pods and Services beyond the desired replicas (an elastic job scaled down), highest
    index first."""
    wanted = {(r.type, r.index) for r in state.desired}
    surplus = [p for key, p in state.pods.items() if key not in wanted and not p.deleting]
    for pod in sorted(surplus, key=lambda p: (p.replica_type, -p.index)):
        state.plan.delete_pods.append((pod.name, pod.uid))
    name = state.observed.job_meta["name"]
    wanted_names = {replica_name(name, r.type, r.index) for r in state.desired}
    state.plan.delete_services = sorted(state.observed.services - wanted_names, key=_by_index_down)


def _by_index_down(name: str) -> tuple[str, int]:
    kind, _, index = name.rpartition("-")
    return kind, -int(index) if index.isdigit() else 0


def _recorded_uid(state: _Planning, name: str) -> str | None:
    uid = recorded(state.observed.status, name).get("uid")
    return str(uid) if uid else None


def _create_missing(state: _Planning, replica: Replica) -> None:
    if state.hold_creations:
        return
    name = replica_name(state.observed.job_meta["name"], replica.type, replica.index)
    # The restarts in a row the replica's status carried past its pod's deletion.
    carried = recorded(state.observed.status, name).get("consecutiveRestarts")
    state.in_a_row[name] = carried if isinstance(carried, int) else 0
    if _recorded_uid(state, name) is None:
        _create(state, replica, counted=False)
        return
    if gang.lost(state, name, replica.type):
        return
    if not _within_budget(state):
        return
    _create(state, replica, counted=True)
    state.plan.events.append(
        Event(
            "Normal",
            constants.REASON_REPLICA_RESTARTING,
            f"recreating replica {name} (restart {state.backoff_count})",
        )
    )


def _create(
    state: _Planning, replica: Replica, *, counted: bool, extra: dict[str, str] | None = None
) -> None:
    if counted:
        state.backoff_count += 1
        state.restarts_by_type[replica.type] = state.restarts_by_type.get(replica.type, 0) + 1
    name = replica_name(state.observed.job_meta["name"], replica.type, replica.index)
    in_a_row = state.in_a_row.get(name, 0)
    annotations = {
        constants.ANNOTATION_BACKOFF_COUNT: str(state.backoff_count),
        constants.ANNOTATION_CONSECUTIVE_RESTARTS: str(in_a_row),
        constants.ANNOTATION_GANG_RESTARTS: str(state.gang_restarts),
        **(extra or {}),
    }
    if state.observed.status.get("phase") in PAUSED_PHASES:
        annotations[constants.ANNOTATION_RESUMING] = "true"
    state.uid_dropped.add(name)
    state.plan.create_pods.append(PodToCreate(replica, annotations))


def _within_budget(state: _Planning, ended: PodView | None = None) -> bool:
    limit = queries.backoff_limit(state.observed.spec)
    if state.backoff_count + 1 <= limit:
        return True
    last = f"; the last: {describe_failure(ended)}" if ended and ended.phase == "Failed" else ""
    state.outcome = Outcome(
        False,
        constants.REASON_BACKOFF_LIMIT_EXCEEDED,
        f"replica restarts reached backoffLimit ({limit}){last}",
    )
    return False


def _judge_finished(state: _Planning, replica: Replica, pod: PodView) -> None:
    policy = queries.replica_spec(state.observed.spec, replica.type).restart_policy or "OnFailure"
    if pod.phase == "Succeeded":
        if replica.is_master:
            state.outcome = Outcome(
                True, constants.REASON_MASTER_SUCCEEDED, f"master replica {pod.name} succeeded"
            )
        elif policy == "Always":
            _restart(state, pod)
        return
    state.failures.append(describe_failure(pod))
    if queries.restarts_after_failure(policy, pod.exit_code):
        _restart(state, pod)
    elif replica.is_master:
        state.outcome = Outcome(False, constants.REASON_MASTER_FAILED, failure_message(pod))
    elif not _elastic_survives(state):
        state.outcome = Outcome(False, constants.REASON_REPLICA_FAILED, failure_message(pod))


def _restart(state: _Planning, pod: PodView) -> None:
    """Delete the finished pod once its restart delay has passed, else look again then; its
    recreation is counted once the pod is gone."""
    if not _within_budget(state, pod):
        return
    pending = pending_restart(pod, state.rule)
    if gang.restarts_gang(state, pending):
        return  # decided with the round's other causes, once every replica is seen
    state.in_a_row[pod.name] = pending.in_a_row
    wait = pending.remaining(state.observed.now)
    _announce(state, pending, wait)
    if wait > 0:
        state.waiting.append(pending)
        _requeue(state, wait)
    else:
        state.plan.delete_pods.append((pod.name, pod.uid))


def _announce(state: _Planning, pending: PendingRestart, wait: float) -> None:
    """An Event the first time the end is seen: a status already showing this pod ended has
    had its Event (it is recorded once that status is written)."""
    pod = pending.pod
    seen = recorded(state.observed.status, pod.name)
    if seen.get("uid") == pod.uid and seen.get("phase") in FINISHED_POD_PHASES:
        return
    when = f"in {seconds_text(wait)}" if wait > 0 else "now"
    # The restart this is: of the replica, in a row, and of the job, against backoffLimit.
    counted = state.backoff_count + 1 + len(state.announced)
    limit = queries.backoff_limit(state.observed.spec)
    count = f"restart {pending.in_a_row} in a row, {counted} of backoffLimit {limit}"
    message = f"restarting {pod.name} ({count}) {when} after {ending(pod)}"
    kind: Literal["Normal", "Warning"] = "Normal" if pod.phase == "Succeeded" else "Warning"
    state.announced.append(Event(kind, constants.REASON_RESTART_BACKOFF, message))


def _requeue(state: _Planning, seconds: float) -> None:
    """Look again after `seconds`, or sooner if something else asked for sooner."""
    current = state.plan.requeue_after
    state.plan.requeue_after = seconds if current is None else min(current, seconds)


def _elastic_survives(state: _Planning) -> bool:
    low, _ = queries.elastic_bounds(state.observed.spec)
    if low is None:
        return False
    alive = sum(1 for p in state.pods.values() if p.phase != "Failed")
    return alive >= low


def _finish(state: _Planning) -> Plan:
    recheck = None
    if state.outcome is not None:
        recheck = finishing.stop(state, state.plan.delete_pods, state.plan.force_delete_pods)
    state.plan.status = build_status(state, starting=bool(state.plan.create_pods))
    state.plan.status |= gang.status_fields(state)
    if state.outcome is not None:
        state.plan.create_pods.clear()
        state.plan.create_group = state.plan.resize_group = False
        state.plan.requeue_after = recheck
    state.plan.status_can_wait = _status_can_wait(state)
    state.plan.status_events = [
        *([] if state.outcome else state.announced),
        *finishing.stopping_events(state),
        *transition_events(state.observed.status, state.plan.status),
    ]
    return state.plan


def _status_can_wait(state: _Planning) -> bool:
    plan, recorded = state.plan, int(state.observed.status.get("backoffCount") or 0)
    creates = bool(plan.create_pods or plan.create_services)
    deletes = bool(plan.delete_pods or plan.force_delete_pods or plan.delete_services)
    return creates and not deletes and state.outcome is None and state.backoff_count == recorded
