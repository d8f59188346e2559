"""The planner's steps for the job's replicas (lifecycle/plan.py calls them, in its order): each
reads the round's facts and what the steps before decided (`Tally`) and returns its `Decision`.
Pure.

Restarts are counted in a crash-safe way: `status.tasks[].replicas[]` records the pod uid of each
replica. A replica whose recorded pod is gone is recreated and counted; the status written before
the creation carries the new count and drops the old uid, so a crash between the two neither
loses nor doubles a count.

A replica that ended is restarted after a delay (lifecycle/backoff.py): its pod is kept, and
deleted once the delay has passed, so the delay is read off the pod in every round and the
reconcile that decides to wait asks to be run again when the wait is over.
"""

from __future__ import annotations

from dataclasses import replace

from torchjob.api import constants, queries
from torchjob.lifecycle import gang, in_place
from torchjob.lifecycle.backoff import next_in_a_row, pending_restart
from torchjob.lifecycle.conditions import Event
from torchjob.lifecycle.decision import (
    NOTHING,
    Decision,
    InARow,
    PodToCreate,
    Tally,
    announce,
    budget_outcome,
)
from torchjob.lifecycle.nodes import judge_nodes
from torchjob.lifecycle.observe import PodView, describe_failure, failure_message
from torchjob.lifecycle.round import Outcome, Round, recorded, recorded_in_a_row
from torchjob.lifecycle.status import PAUSED_PHASES
from torchjob.render.topology import Replica, replica_name


def services_to_create(state: Round) -> Decision:
    """The Services of the desired replicas that have none are created."""
    missing = _missing_services(state)
    return Decision(create_services=missing) if missing else NOTHING


def _missing_services(state: Round) -> tuple[Replica, ...]:
    """The first replica of each missing Service: with service scope `Job`, one Service names
    them all (render/topology.py)."""
    missing: dict[str, Replica] = {}
    for replica in state.desired:
        name = state.service_of(replica)
        if name not in state.observed.services:
            missing.setdefault(name, replica)
    return tuple(missing.values())


def pause(state: Round) -> Decision:
    """A paused job's pods are deleted, not as restarts, and its group too: the group's
    scheduling state is that of its first placement, the resumed pods get a new one."""
    group = state.observed.group
    return Decision(
        create_services=_missing_services(state),
        delete_pods=tuple((p.name, p.uid) for p in state.pods.values() if not p.deleting),
        uid_dropped=frozenset(p.name for p in state.pods.values()),
        delete_group=group is not None and not group.deleting,
    )


def debug(state: Round, tally: Tally) -> Decision:
    """Debug pods run the debug command and are never restarted; pods of the mode before go."""
    creates, deletes, dropped = [], [], set()
    job = state.observed.job_meta["name"]
    for replica in state.desired:
        pod = state.pods.get((replica.type, replica.index))
        if pod is None and not tally.hold_creations:
            extra = {constants.ANNOTATION_DEBUG: "true"}
            creates.append(_pod_to_create(state, replica, tally.backoff_count, 0, extra))
            dropped.add(replica_name(job, replica.type, replica.index))
        elif pod is not None and not pod.debug and not pod.deleting:
            deletes.append((pod.name, pod.uid))
            dropped.add(pod.name)
    return Decision(
        create_services=_missing_services(state),
        create_pods=tuple(creates),
        delete_pods=tuple(deletes),
        uid_dropped=frozenset(dropped),
    )


def delete_surplus(state: Round) -> Decision:
    """Pods and Services beyond the desired replicas (an elastic job scaled down), highest
    index first."""
    wanted = {(r.type, r.index) for r in state.desired}
    surplus = [p for key, p in state.pods.items() if key not in wanted and not p.deleting]
    wanted_names = {state.service_of(r) for r in state.desired}
    if not surplus and state.observed.services <= wanted_names:
        return NOTHING
    return Decision(
        delete_pods=tuple(
            (p.name, p.uid) for p in sorted(surplus, key=lambda p: (p.replica_type, -p.index))
        ),
        delete_services=tuple(sorted(state.observed.services - wanted_names, key=_by_index_down)),
    )


def _by_index_down(name: str) -> tuple[str, int]:
    kind, _, index = name.rpartition("-")
    return kind, -int(index) if index.isdigit() else 0


def lost_with_nodes(state: Round) -> Decision:
    """Pods lost with their node are replaced as preempted ones are (lifecycle/nodes.py)."""
    wanted = {(r.type, r.index) for r in state.desired}
    seen = state.observed
    pods = [p for p in state.pods.values() if p.deleting or state.current(p)]
    losses = judge_nodes(pods, wanted, seen.nodes, seen.now, lambda n: _recorded_uid(state, n))
    if not (losses.lost or losses.delete or losses.force_delete or losses.told or losses.recheck):
        return NOTHING
    return Decision(
        preempted=tuple(losses.lost),
        uid_dropped=frozenset(p.name for p in losses.lost),
        delete_pods=tuple(losses.delete),
        force_delete_pods=tuple(losses.force_delete),
        events=tuple(Event("Warning", constants.REASON_NODE_LOST, m) for m in losses.told),
        requeue_after=losses.recheck,
    )


def _recorded_uid(state: Round, name: str) -> str | None:
    uid = recorded(state.observed.status, name).get("uid")
    return str(uid) if uid else None


def judge(state: Round, replica: Replica, tally: Tally) -> Decision:
    """What becomes of one desired replica of a running job."""
    pod = state.pods.get((replica.type, replica.index))
    if pod is None:
        return _missing(state, replica, tally)
    if pod.gang_restarts < state.gang_restarts:
        return NOTHING  # of a gang restarted since: deleted by gang.stop_earlier, no news
    if pod.debug and not pod.deleting:  # debug mode was switched off
        return Decision(delete_pods=((pod.name, pod.uid),), uid_dropped=frozenset({pod.name}))
    if pod.preempted:
        return _preempted(pod)
    if (ended := in_place.ended(state, pod)) is not None:
        return _ended_in_place(state, replica, ended, tally)
    if pod.finished and not pod.deleting:
        return _finished(state, replica, pod, tally)
    if pod.finished:  # deleted after it ended: its replacement is the next in its row
        return Decision(in_a_row=_one(pod.name, next_in_a_row(pod, state.rules.backoff)))
    return NOTHING


def _one(name: str, in_a_row: int) -> tuple[InARow]:
    return ((name, in_a_row),)


def _missing(state: Round, replica: Replica, tally: Tally) -> Decision:
    """A replica without a pod: created, counted as a restart when its recorded pod is gone."""
    if tally.hold_creations:
        return NOTHING
    name = replica_name(state.observed.job_meta["name"], replica.type, replica.index)
    # The restarts in a row the replica's status carried past its pod's deletion.
    carried = recorded_in_a_row(state.observed.status, name)
    in_a_row = _one(name, carried)
    if _recorded_uid(state, name) is None:
        pod = _pod_to_create(state, replica, tally.backoff_count, carried)
        return Decision(create_pods=(pod,), uid_dropped=frozenset({name}), in_a_row=in_a_row)
    if (cause := gang.lost(state, name, replica.type)) is not None:
        return Decision(gang_causes=(cause,), in_a_row=in_a_row)
    if (refused := budget_outcome(state, tally)) is not None:
        return Decision(outcome=refused, in_a_row=in_a_row)
    count = tally.backoff_count + 1
    pod = _pod_to_create(state, replica, count, carried)
    return Decision(
        create_pods=(pod,),
        uid_dropped=frozenset({name}),
        in_a_row=in_a_row,
        charged=(replica.type,),
        events=(
            Event(
                "Normal",
                constants.REASON_REPLICA_RESTARTING,
                f"recreating replica {name} (restart {count})",
            ),
        ),
    )


def _pod_to_create(
    state: Round,
    replica: Replica,
    backoff_count: int,
    in_a_row: int,
    extra: dict[str, str] | None = None,
) -> PodToCreate:
    """The replica's pod, with the counts it carries to the rounds after its creation."""
    annotations = {
        constants.ANNOTATION_BACKOFF_COUNT: str(backoff_count),
        constants.ANNOTATION_CONSECUTIVE_RESTARTS: str(in_a_row),
        constants.ANNOTATION_GANG_RESTARTS: str(state.gang_restarts),
        **(extra or {}),
    }
    if state.observed.status.get("phase") in PAUSED_PHASES:
        annotations[constants.ANNOTATION_RESUMING] = "true"
    return PodToCreate(replica, annotations, state.avoided_nodes)


def _preempted(pod: PodView) -> Decision:
    """A pod stopped to make room for other work is no failure of the job: its replacement is
    not counted as a restart. The preemptor deletes a running one; an ended one is deleted
    here, and recreated when it is gone."""
    return Decision(
        preempted=(pod,),
        uid_dropped=frozenset({pod.name}),
        delete_pods=((pod.name, pod.uid),) if pod.finished and not pod.deleting else (),
    )


def _finished(state: Round, replica: Replica, pod: PodView, tally: Tally) -> Decision:
    """A replica whose pod ended: the job's outcome, or the replica's restart."""
    policy = queries.replica_spec(state.observed.spec, replica.type).restart_policy or "OnFailure"
    if pod.phase == "Succeeded":
        if replica.is_master:
            said = f"master replica {pod.name} succeeded"
            return Decision(outcome=Outcome(True, constants.REASON_MASTER_SUCCEEDED, said))
        return _restart(state, pod, tally) if policy == "Always" else NOTHING
    failures = (describe_failure(pod),)
    if queries.restarts_after_failure(policy, pod.exit_code):
        restart = _restart(state, pod, tally)
        return replace(restart, failures=failures)
    if replica.is_master:
        reason = constants.REASON_MASTER_FAILED
    elif not _elastic_survives(state):
        reason = constants.REASON_REPLICA_FAILED
    else:
        return Decision(failures=failures)
    return Decision(failures=failures, outcome=Outcome(False, reason, failure_message(pod)))


def _ended_in_place(state: Round, replica: Replica, pod: PodView, tally: Tally) -> Decision:
    """A replica whose training container failed and was restarted in place by its rule
    (`pod` as if it had ended then): counted, or its gang restarted, or the job's outcome."""
    policy = queries.replica_spec(state.observed.spec, replica.type).restart_policy or "OnFailure"
    if not queries.restarts_after_failure(policy, pod.exit_code):
        return _finished(state, replica, pod, tally)  # a policy changed since the pod was made
    failures = (describe_failure(pod),)
    if (refused := budget_outcome(state, tally, pod)) is not None:
        return Decision(outcome=refused, failures=failures)
    pending = pending_restart(pod, state.rules.backoff)
    if (cause := gang.restart_cause(state, pending)) is not None:
        return Decision(gang_causes=(cause,), failures=failures)
    return in_place.charge(state, pending, tally)


def _restart(state: Round, pod: PodView, tally: Tally) -> Decision:
    """The finished pod is deleted once its restart delay has passed, else looked at again then;
    its recreation is counted once the pod is gone."""
    if (refused := budget_outcome(state, tally, pod)) is not None:
        return Decision(outcome=refused)
    pending = pending_restart(pod, state.rules.backoff)
    if (cause := gang.restart_cause(state, pending)) is not None:
        return Decision(gang_causes=(cause,))  # settled with the round's other causes
    wait = pending.remaining(state.observed.now)
    in_a_row, announced = _one(pod.name, pending.in_a_row), announce(state, pending, wait, tally)
    if wait > 0:
        return Decision(
            in_a_row=in_a_row, announced=announced, waiting=(pending,), requeue_after=wait
        )
    return Decision(in_a_row=in_a_row, announced=announced, delete_pods=((pod.name, pod.uid),))


def _elastic_survives(state: Round) -> bool:
    low, _ = queries.elastic_bounds(state.observed.spec)
    if low is None:
        return False
    alive = sum(1 for p in state.pods.values() if p.phase != "Failed")
    return alive >= low
