"""The job's conditions as one table, `CONDITIONS`: a row per condition type with the rule that
decides it from a round, the reasons it can give, the Events its change records and the Kubeflow
PyTorchJob condition of the same meaning. Pure.

The status shows the rows' conditions in the table's order (lifecycle/status.py); the planner
records their Events, in the same order, once the status is written (lifecycle/plan.py). A new
condition is a new row here, its type in the API's ConditionType and its reasons in
api/constants.py and docs/api.md ("Condition reasons"); tests/unit/test_condition_table.py
checks that the three agree."""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from torchjob.api import constants
from torchjob.api.types import ConditionStatus, ConditionType, JobPhase
from torchjob.lifecycle import start_failure
from torchjob.lifecycle.backoff import PendingRestart
from torchjob.lifecycle.round import Round
from torchjob.lifecycle.times import format_time, seconds_text
from torchjob.render import kubeflow
from torchjob.render.scheduling import KUEUE_GATE, Gang

# What a condition holds besides its type: status, reason, message.
Wanted = tuple[ConditionStatus, str, str]
# What a condition shows this round, given the job's phase; None: it is not shown (see `cleared`).
Rule = Callable[[Round, JobPhase], Wanted | None]
EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True, slots=True)
class Event:
    type: EventType
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """The Event recorded when a condition changes to `status` (any, when None) with one of
    `reasons` (any, when None): of `type`, with the condition's reason and message."""

    type: EventType
    status: ConditionStatus | None = None
    reasons: frozenset[str] | None = None

    def of(self, condition: Mapping[str, Any]) -> Event | None:
        if self.status is not None and condition["status"] != self.status:
            return None
        if self.reasons is not None and condition["reason"] not in self.reasons:
            return None
        return Event(self.type, condition["reason"], condition["message"])


@dataclass(frozen=True, slots=True)
class ConditionRow:
    type: ConditionType
    decide: Rule
    # Every reason the condition can carry: the closed set docs/api.md documents for its type.
    reasons: frozenset[str]
    # Shown instead, once the condition was shown, when the rule no longer holds.
    cleared: Wanted | None = None
    # The Events of a change, the first that fits; a change is one of status, or with
    # `reason_changes` of reason too.
    events: tuple[ChangeEvent, ...] = ()
    reason_changes: bool = False
    # The Kubeflow PyTorchJob condition of the same meaning (render/kubeflow.py), if any.
    kubeflow: kubeflow.KubeflowCondition | None = None


def _initialized(state: Round, phase: JobPhase) -> Wanted:
    if phase == "Paused":
        return ("False", constants.REASON_PAUSED, "the job is paused: its replicas have no pods")
    if _all_created(state):
        return ("True", constants.REASON_CREATED, "every replica's pod and service exists")
    return ("False", constants.REASON_CREATING, "creating replicas")


def _all_created(state: Round) -> bool:
    for replica in state.desired:
        if state.service_of(replica) not in state.observed.services:
            return False
        pod = state.pods.get((replica.type, replica.index))
        if pod is None or pod.debug != state.debug:
            return False
    return True


def _running(state: Round, phase: JobPhase) -> Wanted:
    """A finished job's Running condition carries how it ended."""
    if state.outcome is not None:
        return ("False", state.outcome.reason, state.outcome.message)
    if phase != "Running":
        return ("False", constants.REASON_NOT_RUNNING, f"the job is {phase.lower()}")
    if state.debug:
        return ("True", constants.REASON_DEBUG, "debug mode: replicas run the debug command")
    return ("True", constants.REASON_RUNNING, "every replica has started")


def _replica_failure(state: Round, phase: JobPhase) -> Wanted | None:
    if not (state.failures or state.waiting or state.refused or state.gang_restarting):
        return None
    told = [*state.failures, *map(_waiting, state.waiting), *(r.message for r in state.refused)]
    if state.gang_restarting:  # it names the failure that restarts the gang: said once
        told = [state.gang_restarting, *(t for t in told if t not in state.gang_restarting)]
    return ("True", _failure_reason(state), "; ".join(told))


def _failure_reason(state: Round) -> str:
    if state.gang_restarting:
        return constants.REASON_GANG_RESTARTING
    if state.waiting:
        return constants.REASON_RESTART_BACKOFF
    if state.failures:
        return constants.REASON_REPLICA_FAILED
    return state.refused[0].reason


def _waiting(pending: PendingRestart) -> str:
    at = format_time(pending.at) if pending.at else "now"
    return (
        f"restarting {pending.pod.name} at {at} ({seconds_text(pending.delay)} after it ended, "
        f"restart {pending.in_a_row} in a row)"
    )


def _paused(state: Round, phase: JobPhase) -> Wanted | None:
    if phase == "Paused":
        return ("True", constants.REASON_PAUSED, "runMode.pause.enabled is true")
    if phase == "Resuming":
        return (
            "False",
            constants.REASON_RESUMING,
            "runMode.pause.enabled is false: the replicas are being created again",
        )
    return None


def _debug(state: Round, phase: JobPhase) -> Wanted | None:
    if not state.debug:
        return None
    return (
        "True",
        constants.REASON_DEBUG_ENABLED,
        "runMode.debug.enabled is true: the replicas run the debug command",
    )


def _scheduled(state: Round, phase: JobPhase) -> Wanted | None:
    """Whether the replicas of a job scheduled as a group are placed, else what they wait for;
    None for a job whose pods are placed one by one."""
    gang = state.observed.gang
    if not isinstance(gang, Gang) or gang.mode == "none":
        return None
    if phase == "Paused":
        return ("False", constants.REASON_PAUSED, "the job is paused: its replicas have no pods")
    pods = [p for r in state.desired if (p := state.pods.get((r.type, r.index))) is not None]
    current = [p for p in pods if state.current(p)]
    group = f"{gang.mode} group {gang.name}"
    if state.preempted:
        names = ", ".join(sorted(f"{p.name} ({p.preempted})" for p in state.preempted))
        return (
            "False",
            constants.REASON_PREEMPTED,
            f"stopped by the cluster: {names}; the replicas are created again, to be placed",
        )
    if len(current) == len(state.desired) and all(p.placed for p in current):
        return (
            "True",
            constants.REASON_SCHEDULED,
            f"all {len(current)} replicas are placed ({group}, at least {gang.min_count} together)",
        )
    return _waiting_to_be_placed(state, gang, current, group)


def _waiting_to_be_placed(state: Round, gang: Gang, current: list[Any], group: str) -> Wanted:
    group_seen = state.observed.group
    # A group being deleted (a resume replaces it) says nothing of the pods to come.
    said = group_seen.unschedulable if group_seen and not group_seen.deleting else None
    said = said or next((p.unschedulable for p in current if p.unschedulable), None)
    if said:
        return (
            "False",
            constants.REASON_UNSCHEDULABLE,
            f"{gang.min_count} replicas cannot be placed together ({group}): {said}",
        )
    if any(KUEUE_GATE in p.gates for p in current):
        return (
            "False",
            constants.REASON_WAITING_FOR_ADMISSION,
            f"waiting for Kueue to admit the job's {gang.total} pods (queue {gang.queue})",
        )
    gates = sorted({g for p in current for g in p.gates})
    if gates:
        return (
            "False",
            constants.REASON_SCHEDULING_GATED,
            f"waiting for scheduling gates to be lifted: {', '.join(gates)}",
        )
    return (
        "False",
        constants.REASON_SCHEDULING,
        f"waiting for the scheduler to place at least {gang.min_count} of {len(state.desired)} "
        f"replicas together ({group})",
    )


def _start_failure(state: Round, phase: JobPhase) -> Wanted | None:
    failures = start_failure.start_failures(state)
    if not failures:
        return None
    return ("True", failures[0].reason, start_failure.message(failures))


def _completed(state: Round, phase: JobPhase) -> Wanted | None:
    outcome = state.outcome
    if outcome is None or not outcome.succeeded or state.stopping:
        return None
    return ("True", outcome.reason, outcome.message)


def _failed(state: Round, phase: JobPhase) -> Wanted | None:
    outcome = state.outcome
    if outcome is None or outcome.succeeded or state.stopping:
        return None
    return ("True", outcome.reason, outcome.message)


# The apiserver refused a creation: retried while the refusal may pass, else the job failed.
REFUSAL_REASONS = frozenset(
    {
        constants.REASON_POD_CREATION_FAILED,
        constants.REASON_SERVICE_CREATION_FAILED,
        constants.REASON_POD_GROUP_CREATION_FAILED,
    }
)
# A replica cannot start (lifecycle/start_failure.py); the job fails so at its start deadline.
START_FAILURE_REASONS = frozenset(
    {
        constants.REASON_IMAGE_PULL_FAILED,
        constants.REASON_CONTAINER_CONFIG_INVALID,
        constants.REASON_UNSCHEDULABLE,
    }
)
COMPLETED_REASONS = frozenset({constants.REASON_MASTER_SUCCEEDED})
FAILED_REASONS = (
    REFUSAL_REASONS
    | START_FAILURE_REASONS
    | {
        constants.REASON_MASTER_FAILED,
        constants.REASON_REPLICA_FAILED,
        constants.REASON_BACKOFF_LIMIT_EXCEEDED,
        constants.REASON_DEADLINE_EXCEEDED,
        constants.REASON_GANG_UNAVAILABLE,
        constants.REASON_GANG_RESTART_LIMIT_EXCEEDED,
        constants.REASON_NO_PROGRESS,
    }
)

# In the order the status shows them and their Events are recorded.
CONDITIONS: tuple[ConditionRow, ...] = (
    ConditionRow(
        "Initialized",
        _initialized,
        frozenset({constants.REASON_CREATED, constants.REASON_CREATING, constants.REASON_PAUSED}),
        kubeflow=kubeflow.CREATED,
    ),
    ConditionRow(
        "Running",
        _running,
        frozenset({constants.REASON_RUNNING, constants.REASON_DEBUG, constants.REASON_NOT_RUNNING})
        | COMPLETED_REASONS
        | FAILED_REASONS,
        kubeflow=kubeflow.RUNNING,
    ),
    ConditionRow(
        "ReplicaFailure",
        _replica_failure,
        REFUSAL_REASONS
        | {
            constants.REASON_REPLICA_FAILED,
            constants.REASON_RESTART_BACKOFF,
            constants.REASON_NO_FAILURE,
            constants.REASON_GANG_RESTARTING,
        },
        cleared=("False", constants.REASON_NO_FAILURE, "no replica has failed since"),
        kubeflow=kubeflow.RESTARTING,
    ),
    ConditionRow(
        "Paused",
        _paused,
        frozenset({constants.REASON_PAUSED, constants.REASON_RESUMING, constants.REASON_RESUMED}),
        cleared=("False", constants.REASON_RESUMED, "the job was resumed"),
        kubeflow=kubeflow.SUSPENDED,
    ),
    ConditionRow(
        "Debug",
        _debug,
        frozenset({constants.REASON_DEBUG_ENABLED, constants.REASON_DEBUG_DISABLED}),
        cleared=(
            "False",
            constants.REASON_DEBUG_DISABLED,
            "debug mode is off: the replicas run the training command",
        ),
        events=(ChangeEvent("Normal"),),
    ),
    ConditionRow(
        "Scheduled",
        _scheduled,
        frozenset(
            {
                constants.REASON_SCHEDULED,
                constants.REASON_SCHEDULING,
                constants.REASON_UNSCHEDULABLE,
                constants.REASON_WAITING_FOR_ADMISSION,
                constants.REASON_SCHEDULING_GATED,
                constants.REASON_PREEMPTED,
                constants.REASON_PAUSED,
            }
        ),
        # Placed, or found not to fit; waiting to be placed is no news.
        events=(
            ChangeEvent("Normal", "True"),
            ChangeEvent(
                "Warning",
                "False",
                frozenset({constants.REASON_UNSCHEDULABLE, constants.REASON_PREEMPTED}),
            ),
        ),
        reason_changes=True,
    ),
    ConditionRow(
        start_failure.CONDITION,
        _start_failure,
        START_FAILURE_REASONS | {constants.REASON_STARTED},
        cleared=("False", constants.REASON_STARTED, "no replica fails to start now"),
        events=(ChangeEvent("Warning", "True"),),
        reason_changes=True,
    ),
    ConditionRow(
        "Completed",
        _completed,
        COMPLETED_REASONS,
        events=(ChangeEvent("Normal", "True"),),
        kubeflow=kubeflow.SUCCEEDED,
    ),
    ConditionRow(
        "Failed",
        _failed,
        FAILED_REASONS,
        events=(ChangeEvent("Warning", "True"),),
        kubeflow=kubeflow.FAILED,
    ),
)


def wanted_conditions(
    state: Round, phase: JobPhase, shown: Container[ConditionType | None]
) -> list[tuple[ConditionType, Wanted]]:
    """What each row's condition shows this round, in the table's order; `shown`: the types
    of the conditions the status showed before."""
    wanted = []
    for row in CONDITIONS:
        now = row.decide(state, phase)
        if now is None and row.cleared is not None and row.type in shown:
            now = row.cleared
        if now is not None:
            wanted.append((row.type, now))
    return wanted


def condition_events(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Event]:
    """The Events of the conditions that changed from status `old` to status `new`, in the
    table's order."""
    before = _by_type(old)
    after = _by_type(new)
    events = []
    for row in CONDITIONS:
        if not row.events or row.type not in after:
            continue
        now, was = after[row.type], before.get(row.type) or {}
        if was.get("status") == now["status"] and (
            not row.reason_changes or was.get("reason") == now["reason"]
        ):
            continue
        for change in row.events:
            event = change.of(now)
            if event is not None:
                events.append(event)
                break
    return events


def _by_type(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type"): c for c in status.get("conditions") or []}
