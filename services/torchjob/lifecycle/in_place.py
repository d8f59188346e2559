"""Restarts in place (render/in_place.py), as the planner decides them. Pure.

A pod made to restart in place does not end when its training container fails with an exit code
its replica's restart policy restarts: the container's rule restarts it where it stands at once
(the kubelet's crash back-off applies from its second restart within 10 minutes), and the
failure is seen in the container's last state and restart count. The status records, for each
replica, the training container's restarts counted so far (`restartsInPlace`, with the pod's
uid), written with the count in one status write, so a failure is counted once however many
rounds see it.

- In Replica scope the failure is charged (backoffLimit, its type's restartCount, an Event) and
  nothing else is done: the container runs again already. The kubelet's back-off stands in for
  the job's restart delay.
- Where the failure restarts the gang (Gang scope, or the replica's restarts in a row), or the
  gang restarts for any other reason (no progress, a pod lost), the gang restart
  (lifecycle/gang.py) asks each live pod made for it to restart in place instead of deleting it:
  in one patch, after the status write, the pod's gang-restarts annotation becomes the new
  count and its restarts asked its agent's restarts + 1. A pod that ended, is being deleted or
  is gone is recreated, as before.
- A failure of a pod asked to restart that has not restarted yet belongs to the gang before
  (the others crash on the broken group while it stops), as the pods of a lower gang count do
  with recreation.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from torchjob.api import constants, queries
from torchjob.lifecycle.backoff import PendingRestart
from torchjob.lifecycle.conditions import Event
from torchjob.lifecycle.decision import Decision, InPlaceRestart, Tally
from torchjob.lifecycle.observe import PodView, describe_failure
from torchjob.lifecycle.round import Round, recorded_for, recorded_in_a_row


def ended(state: Round, pod: PodView) -> PodView | None:
    """The pod as if it had ended with the failure its training container was restarted for in
    place, when that failure is not counted yet; None when there is none (or it is the gang
    before's)."""
    last = pod.ended_in_place
    if last is None or pod.restart_pending or pod.deleting:
        return None
    if pod.training_restarts <= counted(state, pod):
        return None
    return replace(
        pod,
        phase="Failed",
        exit_code=last.exit_code,
        reason=last.reason,
        message=last.message,
        finished_at=last.finished_at,
        ran_seconds=last.ran_seconds,
        # The pod's annotation is its creation's; its restarts in place since are the status's.
        consecutive_restarts=recorded_in_a_row(state.observed.status, pod.name),
    )


def first_failure(state: Round) -> datetime | None:
    """When the first of the failures in place not counted yet ended: where the gang broke."""
    ends = [
        failed.finished_at
        for pod in state.pods.values()
        if (failed := ended(state, pod)) is not None and failed.finished_at is not None
    ]
    return min(ends, default=None)


def counted(state: Round, pod: PodView) -> int:
    """The training container's restarts the status has counted for this pod."""
    restarts = recorded_for(state.observed.status, pod.name, pod.uid).get("restartsInPlace")
    return restarts if isinstance(restarts, int) else 0


def charge(state: Round, pending: PendingRestart, tally: Tally) -> Decision:
    """The failure `pending` restarts, already restarted in place by its rule: counted, with
    its Event; nothing to delete or create."""
    pod = pending.pod
    limit = queries.backoff_limit(state.observed.spec)
    count = tally.backoff_count + 1
    what = f"{describe_failure(pod)}; restarted in place (restart {count} of backoffLimit {limit})"
    return Decision(
        failures=(describe_failure(pod),),
        charged=(pod.replica_type,),
        in_a_row=((pod.name, pending.in_a_row),),
        counted_in_place=((pod.name, pod.training_restarts),),
        events=(Event("Warning", constants.REASON_REPLICA_RESTARTING, what),),
    )


@dataclass(frozen=True, slots=True)
class GangStop:
    """How the pods of a gang restart stop: those asked to restart in place, those deleted, and
    those whose training container runs anew since the failure already (`fresh`: moved to the
    new gang without a restart, their restarts so far counted as the gang's, by pod name)."""

    asked: tuple[InPlaceRestart, ...]
    deleted: tuple[tuple[str, str], ...]
    fresh: tuple[tuple[str, int], ...] = ()


def stop_gang(
    pods: list[PodView],
    gang_restarts: int,
    avoided: tuple[str, ...],
    failed_at: datetime | None = None,
) -> GangStop:
    """Each of `pods` (none being deleted) asked to restart in place as gang `gang_restarts`
    where it can, else deleted: so is a pod on an `avoided` node, whose replacement goes
    elsewhere (lifecycle/failing_nodes.py). A pod whose training container its rule restarted
    after the failure at `failed_at` (a restart due at once) runs anew already: restarting it
    again would only cost its start once more."""
    asked, deleted, fresh = [], [], []
    for pod in pods:
        if not pod.in_place or pod.finished or pod.node in avoided:
            deleted.append((pod.name, pod.uid))
        elif _anew_since(pod, failed_at):
            kept = InPlaceRestart(pod.name, pod.uid, gang_restarts, pod.restarts_asked)
            asked.append(kept)  # its gang count only: the patch asks no restart
            fresh.append((pod.name, pod.training_restarts))
        else:
            asked.append(ask(pod, gang_restarts))
    return GangStop(tuple(asked), tuple(deleted), tuple(fresh))


def _anew_since(pod: PodView, failed_at: datetime | None) -> bool:
    """The pod's training container ended with the failure at `failed_at`, or after it (on the
    broken group), and runs again: its run now began after the failure. (The kubelet writes
    whole seconds: the end of the run before is compared, not this run's start.)"""
    last = pod.ended_in_place
    return (
        failed_at is not None
        and last is not None
        and last.finished_at is not None
        and last.finished_at >= failed_at
        and pod.running_since is not None
        and not pod.restart_pending
    )


def ask(pod: PodView, gang_restarts: int) -> InPlaceRestart:
    """The pod's annotations for gang `gang_restarts`: one restart more than its agent made,
    unless one is asked already and not made yet."""
    asked = pod.restarts_asked if pod.restart_pending else pod.agent_restarts + 1
    return InPlaceRestart(pod.name, pod.uid, gang_restarts, asked)


def restart_patch(ask: InPlaceRestart) -> dict[str, Any]:
    """The merge patch that asks: the pod's uid in it makes it a precondition (409 when the pod
    of that name is another)."""
    annotations = {
        constants.ANNOTATION_GANG_RESTARTS: str(ask.gang_restarts),
        constants.ANNOTATION_RESTARTS_ASKED: str(ask.asked),
    }
    return {"metadata": {"uid": ask.uid, "annotations": annotations}}


def pending_restarts(state: Round) -> str | None:
    """What the ReplicaFailure condition says while pods of the job's current gang restart in
    place; None when none does."""
    pending = [p for p in state.pods.values() if state.current(p) and p.restart_pending]
    if not pending or not state.gang_restarts:
        return None
    return (
        f"restarting every replica in place (gang restart {state.gang_restarts}): waiting for "
        f"{len(pending)} pod(s) to restart"
    )
