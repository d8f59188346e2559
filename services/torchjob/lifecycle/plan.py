"""The reconciler's decision, as a pure function: the job and what is observed of its pods and
services -> what to create, what to delete, the status to write, the events to record, and when
to look again. Same observations, same plan, in whatever order the events arrived.

The plan is made in steps, each a pure function that reads the round's observed facts (a
`Round`) and what the steps before it decided (a `Tally`, the causes and pods they found), and
returns what it decides (a `Decision`, lifecycle/decision.py). `_decide` writes down their order
once; `_Applied.apply` is the one place a decision changes the round; `_finish` turns the
decided round into the plan and the status (lifecycle/status.py reads the facts alone). The
steps for each replica are in lifecycle/replicas.py, for the gang in lifecycle/gang.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta
from types import MappingProxyType
from typing import Any

from torchjob.api import constants, queries
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.lifecycle import (
    diagnosis,
    finishing,
    gang,
    kueue,
    no_progress,
    replicas,
    start_failure,
)
from torchjob.lifecycle.backoff import DEFAULT_RULES, PendingRestart, RestartRules
from torchjob.lifecycle.conditions import Event
from torchjob.lifecycle.decision import (
    NOTHING,
    Decision,
    InPlaceRestart,
    PodRef,
    PodToCreate,
    Tally,
)
from torchjob.lifecycle.observe import PodView, Refusal
from torchjob.lifecycle.round import GangCause, Observed, Outcome, Round
from torchjob.lifecycle.status import build_status, is_terminal, ours
from torchjob.lifecycle.times import parse_time
from torchjob.lifecycle.transitions import transition_events
from torchjob.render.scheduling import GangUnavailable
from torchjob.render.topology import Replica, replica_name, replicas_of

__all__ = ["Plan", "PodToCreate", "plan"]


@dataclass(slots=True)
class Plan:
    create_services: list[Replica] = field(default_factory=list)
    create_pods: list[PodToCreate] = field(default_factory=list)
    delete_pods: list[tuple[str, str]] = field(default_factory=list)  # (name, uid)
    # Pods asked to restart in place (lifecycle/in_place.py), after the status is written.
    restart_in_place: list[InPlaceRestart] = field(default_factory=list)
    # Pods stuck being deleted on a node that will never confirm it (lifecycle/nodes.py).
    force_delete_pods: list[tuple[str, str]] = field(default_factory=list)  # (name, uid)
    delete_services: list[str] = field(default_factory=list)  # of replicas scaled away
    # Pods of an ended job's Kueue pod group, to tell Kueue the group is over (finishing.py).
    end_group: list[tuple[str, str]] = field(default_factory=list)  # (name, uid)
    # The Kueue Workload to delete, so that Kueue lets go the pods it holds (lifecycle/kueue.py).
    release_workload: str | None = None
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
    # A diagnosis to ask the pods for, or to collect from their agents' logs
    # (lifecycle/diagnosis.py); the status.diagnosis the round decided, if it changed it.
    ask_diagnosis: diagnosis.Ask | None = None
    collect_diagnosis: diagnosis.Collect | None = None
    diagnosis: dict[str, Any] | None = None


def plan(observed: Observed, rules: RestartRules = DEFAULT_RULES) -> Plan:
    """The plan for what is observed; `rules` say how replicas are restarted."""
    if not observed.spec.replica_specs:
        return Plan(status=ours(observed.status))
    start = _start_round(observed, rules)
    if is_terminal(observed.status):
        return Plan(
            status=build_status(start, starting=False)
            | gang.status_fields(start)
            | diagnosis.status_field(dict(observed.status)),
            end_group=list(kueue.group_to_end(start)),
        )
    applied = _Applied(start)
    _decide(start, applied)
    return _finish(start, applied)


def _start_round(observed: Observed, rules: RestartRules) -> Round:
    """The round's facts as observed, before any step decides."""
    recorded = int(observed.status.get("backoffCount") or 0)
    restarts = {
        t.get("type", ""): int(t.get("restartCount") or 0)
        for t in observed.status.get("tasks") or []
    }
    gang_scope, gang_restarts, gang_restart_times = gang.so_far(observed)
    status = observed.status
    base = queries.restart_backoff(observed.job_meta, rules.backoff.base)
    if base != rules.backoff.base:  # the job's own restart delay
        rules = replace(rules, backoff=replace(rules.backoff, base=base))
    return Round(
        observed,
        desired=tuple(replicas_of(observed.spec)),
        pods={(p.replica_type, p.index): p for p in observed.pods},
        rules=rules,
        debug=queries.debug_enabled(observed.spec) and not _paused(observed.spec),
        gang_scope=gang_scope,
        gang_restarts=gang_restarts,
        gang_restart_times=gang_restart_times,
        backoff_count=max([recorded, *(p.backoff_count for p in observed.pods)]),
        restarts_by_type=restarts,
        gang_restart_nodes=_nodes(status.get("gangRestartNodes")),
        avoided_nodes=_nodes(status.get("avoidedNodes")),
    )


def _nodes(recorded: object) -> tuple[str, ...]:
    return tuple(str(n) for n in recorded) if isinstance(recorded, list) else ()


def _decide(start: Round, applied: _Applied) -> None:
    """The steps, in their order. A job whose ending is recorded, or whose deadline has passed,
    is only stopped (`_finish`); otherwise the creations the apiserver refused are judged last,
    once the steps before have said what the round creates again."""
    spec = start.observed.spec
    if (ended := finishing.recorded_outcome(start.observed.status)) is not None:
        applied.apply(Decision(outcome=ended))  # the job's pods are stopping: nothing else
        return
    for deadline in (_active_deadline, _start_deadline):
        if applied.apply(deadline(start)).outcome is not None:
            return
    if _paused(spec):
        applied.apply(replicas.pause(start))
    elif applied.apply(_group(start)).outcome is not None:
        pass  # the job cannot be placed as asked: it failed
    elif queries.debug_enabled(spec):
        applied.apply(replicas.debug(start, applied.tally()))
    else:
        _run(start, applied)
    if start.observed.refusals:
        applied.apply(_judge_refusals(start.observed, applied.creating(), applied.outcome))


def _run(start: Round, applied: _Applied) -> None:
    """The steps of a job that runs: its Services, the pods it no longer wants, those lost with
    their node or of a gang before, each replica in the spec's order, the progress deadline,
    and last the gang restart any of them asked for."""
    applied.apply(replicas.services_to_create(start))
    applied.apply(replicas.delete_surplus(start))
    applied.apply(replicas.lost_with_nodes(start))
    applied.apply(gang.stop_earlier(start))
    for replica in start.desired:
        if applied.outcome is not None:
            break
        applied.apply(replicas.judge(start, replica, applied.tally()))
    if applied.outcome is not None:
        return
    silence = no_progress.check(start)
    diagnosing = diagnosis.step(start, silence.since)
    applied.apply(
        Decision(
            diagnosis=diagnosing.record,
            ask_diagnosis=diagnosing.ask,
            collect_diagnosis=diagnosing.collect,
            requeue_after=diagnosing.requeue_after,
        )
    )
    if not diagnosing.holds_restart:
        applied.apply(_progress_deadline(start, silence))
    if applied.outcome is None:
        applied.apply(
            gang.settle(
                start,
                tuple(applied.gang_causes),
                tuple(applied.preempted),
                applied.tally(),
                frozenset(uid for _, uid in applied.plan.delete_pods),
            )
        )


def _progress_deadline(start: Round, silence: no_progress.Silence) -> Decision:
    """A job silent past its progress deadline restarts its gang, its Event naming what the
    diagnosis of the silence found, or fails when it may not (lifecycle/no_progress.py); else it
    looks again at the deadline."""
    if silence.cause is not None and silence.since is not None:
        said = diagnosis.said_for_stall(dict(start.observed.status), silence.since)
        cause = silence.cause
        if said is not None:
            cause = replace(cause, what=f"{cause.what}; {said}")
        return Decision(gang_causes=(cause,))
    if silence.outcome is not None:
        return Decision(outcome=silence.outcome)
    return NOTHING if silence.wait is None else Decision(requeue_after=silence.wait)


@dataclass(slots=True)
class _Applied:
    """The round as the decisions applied so far make it; only `apply` changes it."""

    start: Round
    plan: Plan = field(default_factory=Plan)
    outcome: Outcome | None = None
    backoff_count: int = 0
    restarts_by_type: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    preempted: list[PodView] = field(default_factory=list)
    waiting: list[PendingRestart] = field(default_factory=list)
    uid_dropped: set[str] = field(default_factory=set)
    counted_in_place: dict[str, int] = field(default_factory=dict)
    in_a_row: dict[str, int] = field(default_factory=dict)
    hold_creations: bool = False
    gang_causes: list[GangCause] = field(default_factory=list)
    gang_restarts: int = 0
    gang_restart_times: tuple[str, ...] = ()
    gang_restart_nodes: tuple[str, ...] = ()
    avoided_nodes: tuple[str, ...] = ()
    gang_restarting: str | None = None
    stopping: tuple[str, ...] = ()
    announced: list[Event] = field(default_factory=list)  # restarts decided this round
    tallied: Tally | None = None  # `tally()` as of the last decision applied

    def __post_init__(self) -> None:
        self.backoff_count = self.start.backoff_count
        self.restarts_by_type = dict(self.start.restarts_by_type)
        self.gang_restarts = self.start.gang_restarts
        self.gang_restart_times = self.start.gang_restart_times
        self.gang_restart_nodes = self.start.gang_restart_nodes
        self.avoided_nodes = self.start.avoided_nodes

    def tally(self) -> Tally:
        """What the decisions so far say that a step reads."""
        if self.tallied is None:
            self.tallied = Tally(self.backoff_count, len(self.announced), self.hold_creations)
        return self.tallied

    def apply(self, decision: Decision) -> Decision:
        """Take `decision` into the round; returns it."""
        if decision is NOTHING:
            return decision
        self.tallied = None
        self._objects(decision)
        self._restarts(decision)
        if decision.outcome is not None and self.outcome is None:
            self.outcome = decision.outcome
        self.failures += decision.failures
        self.refused += decision.refused
        self.preempted += decision.preempted
        self.waiting += decision.waiting
        self.gang_causes += decision.gang_causes
        if decision.gang_restarting is not None:
            self.gang_restarting = decision.gang_restarting
        self.stopping += decision.stopping
        self.plan.events += decision.events
        self.announced += decision.announced
        if (seconds := decision.requeue_after) is not None:
            current = self.plan.requeue_after
            self.plan.requeue_after = seconds if current is None else min(current, seconds)
        return decision

    def _objects(self, decision: Decision) -> None:
        plan = self.plan
        if decision.gang_restart is not None:
            # The gang restarts instead: what was to be created, waited for or announced is not.
            plan.create_pods.clear()
            self.waiting.clear()
            self.announced.clear()
        plan.create_services += decision.create_services
        plan.create_pods += decision.create_pods
        plan.delete_pods += decision.delete_pods
        plan.restart_in_place += decision.restart_in_place
        plan.force_delete_pods += decision.force_delete_pods
        plan.end_group += decision.end_group
        plan.delete_services += decision.delete_services
        plan.create_group |= decision.create_group
        plan.resize_group |= decision.resize_group
        plan.delete_group |= decision.delete_group
        plan.ask_diagnosis = decision.ask_diagnosis or plan.ask_diagnosis
        plan.collect_diagnosis = decision.collect_diagnosis or plan.collect_diagnosis
        plan.diagnosis = decision.diagnosis or plan.diagnosis
        self.hold_creations |= decision.hold_creations

    def _restarts(self, decision: Decision) -> None:
        for replica_type in decision.charged:
            self.backoff_count += 1
            if replica_type is not None:
                self.restarts_by_type[replica_type] = self.restarts_by_type.get(replica_type, 0) + 1
        if (restart := decision.gang_restart) is not None:
            self.gang_restarts += 1
            if restart.times is not None:
                self.gang_restart_times = restart.times
            self.gang_restart_nodes, self.avoided_nodes = restart.named, restart.avoided
        self.uid_dropped |= decision.uid_dropped
        self.counted_in_place.update(decision.counted_in_place)
        self.in_a_row.update(decision.in_a_row)
        for name, count in decision.in_a_row_kept:
            self.in_a_row.setdefault(name, count)

    def creating(self) -> frozenset[tuple[str, str]]:
        """The (kind, name) of each object the round creates so far."""
        name = self.start.observed.job_meta["name"]
        plan = self.plan
        return frozenset(
            {
                *(
                    ("pod", replica_name(name, p.replica.type, p.replica.index))
                    for p in plan.create_pods
                ),
                *(("service", self.start.service_of(r)) for r in plan.create_services),
                *((("podgroup", name),) if plan.create_group else ()),
            }
        )

    def facts(self) -> Round:
        """The round's facts, as the decisions made them."""
        start = self.start
        return Round(
            start.observed,
            start.desired,
            start.pods,
            start.rules,
            start.debug,
            start.gang_scope,
            self.gang_restarts,
            self.gang_restart_times,
            self.backoff_count,
            MappingProxyType(self.restarts_by_type),
            self.outcome,
            tuple(self.failures),
            frozenset(self.uid_dropped),
            MappingProxyType(self.counted_in_place),
            tuple(self.waiting),
            MappingProxyType(self.in_a_row),
            tuple(self.refused),
            tuple(self.preempted),
            self.gang_restarting,
            self.stopping,
            self.gang_restart_nodes,
            self.avoided_nodes,
        )


def _judge_refusals(
    observed: Observed, creating: frozenset[tuple[str, str]], outcome: Outcome | None
) -> Decision:
    """The apiserver refused some of the job's creations last time: a permanent refusal of an
    object this round creates again (`creating`) fails the job (unless `outcome` says how it
    ended already), a transient one is shown while it is retried. A refusal of an object that
    exists since, or that is no longer created, is history."""
    again = [r for r in observed.refusals if (r.kind, r.name) in creating]
    if not again:
        return NOTHING
    permanent = next((r for r in again if r.permanent), None)
    failed = Outcome(False, permanent.reason, permanent.message) if permanent else None
    return Decision(
        refused=tuple(r for r in again if not r.permanent),
        outcome=failed if outcome is None else None,
    )


def _paused(spec: PyTorchTrainingJobSpec) -> bool:
    pause = spec.run_mode.pause if spec.run_mode else None
    return bool(pause and pause.enabled)


def _active_deadline(start: Round) -> Decision:
    """The job fails once it has run for activeDeadlineSeconds; else it looks again then."""
    policy = start.observed.spec.run_policy
    started = parse_time(start.observed.status.get("startTime"))
    if not policy or not policy.active_deadline_seconds or started is None:
        return NOTHING
    deadline = started + timedelta(seconds=policy.active_deadline_seconds)
    if start.observed.now < deadline:
        return Decision(requeue_after=(deadline - start.observed.now).total_seconds())
    outcome = Outcome(
        False,
        constants.REASON_DEADLINE_EXCEEDED,
        f"the job ran longer than activeDeadlineSeconds ({policy.active_deadline_seconds}s)",
    )
    return Decision(outcome=outcome, delete_pods=_unfinished(start))


def _start_deadline(start: Round) -> Decision:
    """A replica could not start for its start deadline (lifecycle/start_failure.py): it fails."""
    outcome, wait = start_failure.deadline_outcome(start, start.rules.start_deadline)
    if outcome is None:
        return NOTHING if wait is None else Decision(requeue_after=wait)
    return Decision(outcome=outcome, delete_pods=_unfinished(start), requeue_after=wait)


def _unfinished(start: Round) -> tuple[PodRef, ...]:
    return tuple((p.name, p.uid) for p in start.pods.values() if not p.finished and not p.deleting)


def _group(start: Round) -> Decision:
    """The job's group object, created before its pods and kept at the gang's minimum. The job
    fails when it asks for gang scheduling the cluster does not serve."""
    gang_seen, group = start.observed.gang, start.observed.group
    if isinstance(gang_seen, GangUnavailable):
        return Decision(
            outcome=Outcome(False, constants.REASON_GANG_UNAVAILABLE, gang_seen.message)
        )
    if gang_seen is None or gang_seen.kind is None:
        return NOTHING
    if group is None:
        return Decision(create_group=True)  # the executor creates it before any pod
    if group.deleting:
        return Decision(hold_creations=True)  # the pods must not join the group being deleted
    if group.min_count != gang_seen.min_count:
        return Decision(resize_group=True)
    return NOTHING


def _finish(start: Round, applied: _Applied) -> Plan:
    """The plan of the decided round: a job that ended stops its pods first (lifecycle/
    finishing.py), creates nothing, and looks again only for the pods it stops."""
    plan, recheck = applied.plan, None
    if applied.outcome is not None:
        deleting = frozenset(name for name, _ in plan.delete_pods)
        stop = finishing.stop(start, applied.outcome, deleting, frozenset(plan.force_delete_pods))
        recheck = applied.apply(stop).requeue_after
    facts = applied.facts()
    plan.status = build_status(facts, starting=bool(plan.create_pods)) | gang.status_fields(facts)
    plan.status |= diagnosis.status_field(dict(start.observed.status), plan.diagnosis)
    if facts.outcome is not None:
        plan.create_pods.clear()
        plan.create_group = plan.resize_group = False
        plan.requeue_after = recheck
    else:
        release = kueue.workload_to_release(start.observed.pods, start.observed.now)
        plan.release_workload = release.workload
        applied.apply(Decision(requeue_after=release.recheck_after))
    plan.status_can_wait = _status_can_wait(facts, plan)
    plan.status_events = [
        *([] if facts.outcome else applied.announced),
        *finishing.stopping_events(facts),
        *transition_events(start.observed.status, plan.status),
    ]
    return plan


def _status_can_wait(facts: Round, plan: Plan) -> bool:
    recorded = int(facts.observed.status.get("backoffCount") or 0)
    creates = bool(plan.create_pods or plan.create_services)
    deletes = bool(
        plan.delete_pods
        or plan.force_delete_pods
        or plan.delete_services
        or plan.restart_in_place
        or plan.ask_diagnosis
    )
    return creates and not deletes and facts.outcome is None and facts.backoff_count == recorded
