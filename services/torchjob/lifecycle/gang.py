"""Gang restarts: every replica of a job stopped, then created again together. Pure.

A plain process group (no torchrun rendezvous) cannot take a new member: when one replica of
such a job is restarted alone, the others hang or crash on the broken group, and each crash
would be charged as a restart of its own. In the job's Gang restart scope (the default for a job
not run by torchrun; api/queries.restart_scope) a replica that is to be restarted (its restart
policy says so, after its restart delay) restarts the whole gang instead:

1. the status is written first: backoffCount + 1 once, the failed replica type's restartCount
   + 1, gangRestarts + 1 (with the time, in gangRestartTimes), and every replica's recorded pod
   uid dropped, as a pause drops them, so the recreations are not counted again;
2. every pod of the job is deleted, or asked to restart in place where it was made for that
   (lifecycle/in_place.py: it then keeps its uid, and is of the new gang at once);
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
from torchjob.lifecycle import failing_nodes, in_place
from torchjob.lifecycle.backoff import PendingRestart
from torchjob.lifecycle.conditions import Event
from torchjob.lifecycle.decision import (
    NOTHING,
    Decision,
    GangRestart,
    Tally,
    announce,
)
from torchjob.lifecycle.observe import PodView, describe_failure
from torchjob.lifecycle.round import GangCause, Observed, Outcome, Round, recorded_in_a_row
from torchjob.lifecycle.times import format_time, parse_time
from torchjob.render.topology import replica_name


def so_far(observed: Observed) -> tuple[bool, int, tuple[str, ...]]:
    """The job's restart scope (True: Gang), its gang restarts so far and the times of those
    counted against the limit, from its status and its pods (a pod created after a status write
    the cache does not show yet carries the newer count)."""
    scope = queries.restart_scope(observed.job_meta, observed.spec) == constants.RESTART_SCOPE_GANG
    shown = observed.status.get("gangRestarts")
    counts = [p.gang_restarts for p in observed.pods]
    restarts = max([shown if isinstance(shown, int) else 0, *counts])
    times = observed.status.get("gangRestartTimes")
    return scope, restarts, tuple(str(t) for t in times) if isinstance(times, list) else ()


def stop_earlier(state: Round) -> Decision:
    """The pods of a gang restarted since are deleted (those not being deleted already). No pod
    is created while one remains; their recorded uids are dropped and the replicas' restarts in
    a row carried on as the status shows them."""
    earlier = [p for p in state.pods.values() if p.gang_restarts < state.gang_restarts]
    if not earlier:
        return _restarting_in_place(state)
    status = state.observed.status
    stop = in_place.stop_gang(
        [p for p in earlier if not p.deleting], state.gang_restarts, state.avoided_nodes
    )
    staying = {ask.name for ask in stop.asked}
    return Decision(
        delete_pods=stop.deleted,
        restart_in_place=stop.asked,
        hold_creations=True,
        uid_dropped=frozenset(p.name for p in earlier) - staying,
        in_a_row_kept=tuple((p.name, recorded_in_a_row(status, p.name)) for p in earlier),
        gang_restarting=(
            f"restarting every replica together (gang restart {state.gang_restarts}): waiting "
            f"for {len(earlier)} pod(s) of the gang before to stop"
        ),
    )


def _restarting_in_place(state: Round) -> Decision:
    said = in_place.pending_restarts(state)
    return NOTHING if said is None else Decision(gang_restarting=said)


def restart_cause(state: Round, pending: PendingRestart) -> GangCause | None:
    """The gang restart the restart `pending` makes instead of the replica's alone: in Gang
    scope, or once the replica's restarts in a row reach the rules' count; `settle` decides it
    with the others found this round. None: the replica restarts alone."""
    made_in_a_row = pending.in_a_row - 1
    if not state.gang_scope and made_in_a_row < state.rules.replica_restarts_before_gang:
        return None
    pod = pending.pod
    what = describe(pod)
    if not state.gang_scope:
        what += f" after {made_in_a_row} restarts of it in a row"
    return GangCause(what, constants.REASON_GANG_RESTARTING, True, pod.replica_type, pending)


def describe(pod: PodView) -> str:
    """How the pod ended, for the gang restart's Event."""
    if pod.phase == "Succeeded":
        return f"{pod.name} succeeded (restartPolicy Always)"
    return describe_failure(pod)


def lost(state: Round, name: str, replica_type: str) -> GangCause | None:
    """In Gang scope, a replica whose recorded pod is gone (deleted by someone) restarts the
    gang: its replacement could not join the others' group. None in Replica scope."""
    if not state.gang_scope:
        return None
    what = f"{name}'s pod was deleted"
    return GangCause(what, constants.REASON_GANG_RESTARTING, True, replica_type)


def settle(
    state: Round,
    causes: tuple[GangCause, ...],
    preempted: tuple[PodView, ...],
    tally: Tally,
    deleted: frozenset[str],
) -> Decision:
    """The gang restart this round makes for the first of `causes` (and, in Gang scope, of the
    `preempted` pods), if any, or the restart delay it waits for; `deleted`: the uids of the pods
    the steps before delete. A restart the job may not make fails it (backoffLimit, the gang
    restart limit; with reason NoProgress for a job restarted for its silence)."""
    if state.gang_scope:
        for pod in preempted:
            what = f"{pod.name} was preempted ({pod.preempted})"
            causes = (GangCause(what, constants.REASON_GANG_RESTARTING, False), *causes)
    if not causes:
        return NOTHING
    cause = min(causes, key=_first_cause)
    if cause.charged and (refused := _refused(state, cause, tally)) is not None:
        return Decision(outcome=refused)
    pending = cause.pending
    if pending is not None and (wait := pending.remaining(state.observed.now)) > 0:
        # The restart's place in its row, which the replica's status shows while it waits.
        return Decision(
            in_a_row=((pending.pod.name, pending.in_a_row),),
            announced=announce(state, pending, wait, tally),
            waiting=(pending,),
            requeue_after=wait,
        )
    return _restart(state, cause, tally, deleted)


def _first_cause(cause: GangCause) -> tuple[int, str, str]:
    """Preemption first (the others' failures follow from it), then what ended first."""
    if not cause.charged:
        return (0, "", cause.what)
    ended = cause.pending.pod.finished_at if cause.pending else None
    return (1, format_time(ended) if ended else "", cause.what)


def _refused(state: Round, cause: GangCause, tally: Tally) -> Outcome | None:
    """The job's failure when it may not make the charged gang restart `cause`."""
    limit = queries.backoff_limit(state.observed.spec)
    reason = constants.REASON_NO_PROGRESS if cause.reason == constants.REASON_NO_PROGRESS else None
    if tally.backoff_count + 1 > limit:
        message = f"replica restarts reached backoffLimit ({limit}); the last: {cause.what}"
        return Outcome(False, reason or constants.REASON_BACKOFF_LIMIT_EXCEEDED, message)
    rules, now = state.rules, state.observed.now
    if not rules.gang_restart_limit:
        return None
    since = now - timedelta(seconds=rules.gang_restart_window)
    recent = [t for t in state.gang_restart_times if (moment := parse_time(t)) and moment > since]
    if len(recent) < rules.gang_restart_limit:
        return None
    message = (
        f"{len(recent)} gang restarts within {rules.gang_restart_window:.0f}s reached the limit "
        f"({rules.gang_restart_limit}); the last: {cause.what}"
    )
    return Outcome(False, reason or constants.REASON_GANG_RESTART_LIMIT_EXCEEDED, message)


def _restart(state: Round, cause: GangCause, tally: Tally, deleted: frozenset[str]) -> Decision:
    """The restart counted, every replica's recorded pod uid dropped (so the recreations are not
    counted again) and every pod deleted; the new gang is created once they are gone."""
    times = None
    if cause.charged:
        limit = state.rules.gang_restart_limit
        times = (
            (*state.gang_restart_times, format_time(state.observed.now))[-limit:] if limit else ()
        )
    job, status = state.observed.job_meta["name"], state.observed.status
    kept = {}
    for replica in state.desired:
        name = replica_name(job, replica.type, replica.index)
        pod = state.pods.get((replica.type, replica.index))
        if pod is not None and not pod.in_place:
            kept[name] = pod.consecutive_restarts
        else:  # a pod restarted in place carries its count in the status
            kept[name] = recorded_in_a_row(status, name)
    pending = cause.pending
    pods = state.pods.values()
    nodes = failing_nodes.judge(state, cause)
    # A failure restarted at once: the pods their rule restarted since need no restart more.
    failed_at = in_place.first_failure(state) if pending is not None and not pending.delay else None
    stop = in_place.stop_gang(
        [p for p in pods if not p.deleting and p.uid not in deleted],
        state.gang_restarts + 1,
        nodes.avoided,
        failed_at,
    )
    # A pod restarted in place stays the replica's pod: its uid is kept, so is its count.
    staying = {ask.name for ask in stop.asked}
    return Decision(
        gang_restart=GangRestart(cause, times, nodes.named, nodes.avoided),
        charged=(cause.replica_type,) if cause.charged else (),
        in_a_row=((pending.pod.name, pending.in_a_row),) if pending else (),
        in_a_row_kept=tuple(kept.items()),
        uid_dropped=(frozenset(kept) | {p.name for p in pods}) - staying,
        gang_restarting=f"restarting every replica together: {cause.what}",
        delete_pods=stop.deleted,
        restart_in_place=stop.asked,
        counted_in_place=stop.fresh,
        announced=(_event(state, cause, tally, in_place=bool(staying)), *nodes.events),
    )


def _event(state: Round, cause: GangCause, tally: Tally, in_place: bool) -> Event:
    """The Event of the gang restart `cause` makes; `in_place`: pods restart where they stand."""
    where = " in place" if in_place else ""
    if not cause.charged:
        count = "not counted against backoffLimit"
        said = f"restarting every replica{where}: {cause.what} ({count})"
        return Event("Normal", cause.reason, said)
    limit = queries.backoff_limit(state.observed.spec)
    count = f"restart {tally.backoff_count + 1} of backoffLimit {limit}"
    return Event(
        "Warning", cause.reason, f"restarting every replica{where}: {cause.what} ({count})"
    )


def status_fields(state: Round) -> dict[str, object]:
    """What the status shows of the job's gang restarts: nothing before the first."""
    if not state.gang_restarts:
        return {}
    fields: dict[str, object] = {"gangRestarts": state.gang_restarts}
    if state.gang_restart_times:
        fields["gangRestartTimes"] = list(state.gang_restart_times)
    if state.gang_restart_nodes:
        fields["gangRestartNodes"] = list(state.gang_restart_nodes)
    if state.avoided_nodes:
        fields["avoidedNodes"] = list(state.avoided_nodes)
    return fields
