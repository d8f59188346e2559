"""Gang restarts: every replica of a job stopped, then created again together. Pure.

A plain process group (no torchrun rendezvous) cannot take a new member: when one replica of
such a job is restarted alone, the others hang or crash on the broken group, and each crash
would be charged as a restart of its own. In the job's Gang restart scope (the default for a job
not run by torchrun; api/queries.restart_scope) a replica that is to be restarted (its restart
policy says so, after its restart delay) restarts the whole gang instead:

1. the status is written first: backoffCount + 1 once, the failed replica type's restartCount
   + 1, gangRestarts + 1 (with the time, in gangRestartTimes), and every replica's recorded pod
   uid dropped, as a pause drops them, so the recreations are not counted again;
2. every pod of the job is deleted;
3. the new gang's pods are created once every pod of the old one is gone.

Each pod carries the job's gang restart count when it was created (ANNOTATION_GANG_RESTARTS). A
pod of a lower count than the status's is of an earlier gang: it is deleted, its ending neither
charged nor announced (the others crash on the broken group while the gang stops), and no pod
is created while one remains. This also makes a crash between the status write and the
deletions safe: the next round finds the old pods of a lower count and deletes them.

In Replica scope a replica whose restarts in a row reach the rules' replica_restarts_before_gang
restarts the gang instead. In both scopes at most gang_restart_limit charged gang restarts are
made within gang_restart_window seconds: the next one fails the job (GangRestartLimitExceeded);
backoffLimit still bounds the count. A preempted pod (lost to other work, or with its node)
makes an uncharged gang restart in Gang scope.
"""

from __future__ import annotations

from datetime import timedelta

from torchjob.api import constants, queries
from torchjob.lifecycle.backoff import PendingRestart
from torchjob.lifecycle.conditions import Event
from torchjob.lifecycle.observe import PodView, describe_failure
from torchjob.lifecycle.round import GangCause, Outcome, Round
from torchjob.lifecycle.status import recorded
from torchjob.lifecycle.times import format_time, parse_time
from torchjob.render.topology import replica_name


def start(state: Round) -> None:
    """The job's restart scope and gang restarts so far, from its status and its pods (a pod
    created after a status write the cache does not show yet carries the newer count)."""
    observed = state.observed
    state.gang_scope = (
        queries.restart_scope(observed.job_meta, observed.spec) == constants.RESTART_SCOPE_GANG
    )
    shown = observed.status.get("gangRestarts")
    counts = [p.gang_restarts for p in observed.pods]
    state.gang_restarts = max([shown if isinstance(shown, int) else 0, *counts])
    times = observed.status.get("gangRestartTimes")
    state.gang_restart_times = [str(t) for t in times] if isinstance(times, list) else []


def stop_earlier(state: Round) -> list[PodView]:
    """The pods of a gang restarted since, to delete (those not being deleted already). No pod is
    created while one remains; their recorded uids are dropped and the replicas' restarts in a
    row carried on as the status shows them."""
    earlier = [p for p in state.pods.values() if p.gang_restarts < state.gang_restarts]
    if not earlier:
        return []
    state.hold_creations = True
    for pod in earlier:
        state.uid_dropped.add(pod.name)
        carried = recorded(state.observed.status, pod.name).get("consecutiveRestarts")
        state.in_a_row.setdefault(pod.name, carried if isinstance(carried, int) else 0)
    state.gang_restarting = (
        f"restarting every replica together (gang restart {state.gang_restarts}): waiting for "
        f"{len(earlier)} pod(s) of the gang before to stop"
    )
    return [p for p in earlier if not p.deleting]


def restarts_gang(state: Round, pending: PendingRestart) -> bool:
    """Whether the restart `pending` is the gang's, not the replica's alone: in Gang scope, or
    once the replica's restarts in a row reach the rules' count. It is then decided by `settle`,
    with the others found this round."""
    made_in_a_row = pending.in_a_row - 1
    if not state.gang_scope and made_in_a_row < state.rules.replica_restarts_before_gang:
        return False
    pod = pending.pod
    what = describe(pod)
    if not state.gang_scope:
        what += f" after {made_in_a_row} restarts of it in a row"
    state.gang_causes.append(
        GangCause(what, constants.REASON_GANG_RESTARTING, True, pod.replica_type, pending)
    )
    return True


def describe(pod: PodView) -> str:
    """How the pod ended, for the gang restart's Event."""
    if pod.phase == "Succeeded":
        return f"{pod.name} succeeded (restartPolicy Always)"
    return describe_failure(pod)


def lost(state: Round, name: str, replica_type: str) -> bool:
    """In Gang scope, a replica whose recorded pod is gone (deleted by someone) restarts the
    gang: its replacement could not join the others' group."""
    if not state.gang_scope:
        return False
    what = f"{name}'s pod was deleted"
    state.gang_causes.append(GangCause(what, constants.REASON_GANG_RESTARTING, True, replica_type))
    return True


def settle(state: Round) -> tuple[GangCause | None, PendingRestart | None]:
    """The gang restart this round makes, if any, or the restart delay it waits for. A restart
    the job may not make fails it (backoffLimit, the gang restart limit; with reason NoProgress
    for a job restarted for its silence)."""
    if state.gang_scope:
        for pod in state.preempted:
            what = f"{pod.name} was preempted ({pod.preempted})"
            state.gang_causes.insert(0, GangCause(what, constants.REASON_GANG_RESTARTING, False))
    if state.outcome is not None or not state.gang_causes:
        return None, None
    cause = min(state.gang_causes, key=_first_cause)
    pending = cause.pending
    if cause.charged and not _allowed(state, cause):
        return None, None
    if pending is not None:
        # The restart's place in its row, which the replica's status shows while it waits and
        # its replacement carries.
        state.in_a_row[pending.pod.name] = pending.in_a_row
        if pending.remaining(state.observed.now) > 0:
            return None, pending
    _restart(state, cause)
    return cause, None


def _first_cause(cause: GangCause) -> tuple[int, str, str]:
    """Preemption first (the others' failures follow from it), then what ended first."""
    if not cause.charged:
        return (0, "", cause.what)
    ended = cause.pending.pod.finished_at if cause.pending else None
    return (1, format_time(ended) if ended else "", cause.what)


def _allowed(state: Round, cause: GangCause) -> bool:
    limit = queries.backoff_limit(state.observed.spec)
    reason = constants.REASON_NO_PROGRESS if cause.reason == constants.REASON_NO_PROGRESS else None
    if state.backoff_count + 1 > limit:
        message = f"replica restarts reached backoffLimit ({limit}); the last: {cause.what}"
        state.outcome = Outcome(False, reason or constants.REASON_BACKOFF_LIMIT_EXCEEDED, message)
        return False
    rules, now = state.rules, state.observed.now
    if not rules.gang_restart_limit:
        return True
    since = now - timedelta(seconds=rules.gang_restart_window)
    recent = [t for t in state.gang_restart_times if (moment := parse_time(t)) and moment > since]
    if len(recent) < rules.gang_restart_limit:
        return True
    message = (
        f"{len(recent)} gang restarts within {rules.gang_restart_window:.0f}s reached the limit "
        f"({rules.gang_restart_limit}); the last: {cause.what}"
    )
    state.outcome = Outcome(False, reason or constants.REASON_GANG_RESTART_LIMIT_EXCEEDED, message)
    return False


def _restart(state: Round, cause: GangCause) -> None:
    """Count the restart and drop every replica's recorded pod uid; the caller deletes the
    pods."""
    state.gang_restarts += 1
    if cause.charged:
        state.backoff_count += 1
        if cause.replica_type is not None:
            kind = cause.replica_type
            state.restarts_by_type[kind] = state.restarts_by_type.get(kind, 0) + 1
        times = [*state.gang_restart_times, format_time(state.observed.now)]
        limit = state.rules.gang_restart_limit
        state.gang_restart_times = times[-limit:] if limit else []
    job = state.observed.job_meta["name"]
    for replica in state.desired:
        name = replica_name(job, replica.type, replica.index)
        pod = state.pods.get((replica.type, replica.index))
        carried = recorded(state.observed.status, name).get("consecutiveRestarts")
        before = pod.consecutive_restarts if pod else carried if isinstance(carried, int) else 0
        state.in_a_row.setdefault(name, before)
        state.uid_dropped.add(name)
    for pod in state.pods.values():
        state.uid_dropped.add(pod.name)
    state.waiting.clear()
    state.gang_restarting = f"restarting every replica together: {cause.what}"


def event(state: Round, cause: GangCause) -> Event:
    """The Event of the gang restart `cause` made."""
    if not cause.charged:
        count = "not counted against backoffLimit"
        return Event("Normal", cause.reason, f"restarting every replica: {cause.what} ({count})")
    limit = queries.backoff_limit(state.observed.spec)
    count = f"restart {state.backoff_count} of backoffLimit {limit}"
    return Event("Warning", cause.reason, f"restarting every replica: {cause.what} ({count})")


def status_fields(state: Round) -> dict[str, object]:
    """What the status shows of the job's gang restarts: nothing before the first."""
    if not state.gang_restarts:
        return {}
    fields: dict[str, object] = {"gangRestarts": state.gang_restarts}
    if state.gang_restart_times:
        fields["gangRestartTimes"] = list(state.gang_restart_times)
    return fields
