"""The housekeeper's decision, as a pure function: a job and what is observed of its replica pods
and Services and of its TensorBoard -> the TensorBoard objects to create, update or delete,
`status.tensorboard`, the clean-up after the job ended, the deletion of the job when its TTL has
run out, the events to record and when to look again.

Nothing is decided from memory: what was already done shows in what is observed (a deleted pod
is gone, a created Deployment carries the hash of what it was rendered from), so a housekeeper
restarted half-way through an action finishes it and repeats nothing. Each event carries a key
naming its action; the executor records an event under a name derived from the job's uid and that
key, so an action planned again before the cache shows it done is still reported once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from torchjob.api import constants
from torchjob.api.objects import FINISHED_POD_PHASES
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.lifecycle.status import is_terminal
from torchjob.lifecycle.tensorboard import drifted_fields, stored_form, tensorboard_status
from torchjob.lifecycle.times import parse_time
from torchjob.render.tensorboard import render_deployment, render_service, spec_hash


@dataclass(frozen=True, slots=True)
class Owned:
    """A replica pod or Service the job controls, as the clean-up sees it."""

    name: str
    uid: str
    deleting: bool
    phase: str | None = None  # a pod's phase; None for a Service
    resource_version: str = ""

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED_POD_PHASES


def view_owned(obj: dict[str, Any], *, pod: bool) -> Owned:
    meta = obj.get("metadata") or {}
    return Owned(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        deleting=bool(meta.get("deletionTimestamp")),
        phase=str((obj.get("status") or {}).get("phase") or "Pending") if pod else None,
        resource_version=str(meta.get("resourceVersion", "")),
    )


@dataclass(frozen=True, slots=True)
class TensorBoardObserved:
    """The TensorBoard objects the job controls (its pods are the Deployment's)."""

    deployment: dict[str, Any] | None = None
    service: dict[str, Any] | None = None
    pods: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class HousekeepingObserved:
    job_meta: dict[str, Any]
    spec: PyTorchTrainingJobSpec
    status: dict[str, Any]
    pods: list[Owned]
    services: list[Owned]
    tensorboard: TensorBoardObserved
    now: datetime


@dataclass(frozen=True, slots=True)
class HousekeepingEvent:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str
    key: str  # names the action: the same action is reported once


@dataclass(slots=True)
class HousekeepingPlan:
    create: list[dict[str, Any]] = field(default_factory=list)  # rendered TensorBoard objects
    # (rendered, observed) TensorBoard objects whose hash differs: rendered from a changed spec
    update: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    delete_tensorboard: list[tuple[str, str, str]] = field(default_factory=list)  # kind, name, uid
    tensorboard_status: dict[str, Any] | None = None
    write_tensorboard_status: bool = False
    # (name, uid, resourceVersion): a pod is deleted only as it was seen, since the job's cache
    # may show the job finished before the pod cache shows that pod finished too.
    delete_pods: list[tuple[str, str, str]] = field(default_factory=list)
    delete_services: list[tuple[str, str]] = field(default_factory=list)  # (name, uid)
    delete_job: bool = False
    events: list[HousekeepingEvent] = field(default_factory=list)
    requeue_after: float | None = None


def plan_housekeeping(observed: HousekeepingObserved) -> HousekeepingPlan:
    out = HousekeepingPlan()
    terminal = is_terminal(observed.status)
    if terminal and _ttl_expired(observed, out):
        return out  # the job goes, and everything it owns with it
    _tensorboard(observed, out)
    if terminal:
        _clean_up(observed, out)
    return out


# -- clean-up and TTL -----------------------------------------------------------------------------


def clean_up(
    policy: str | None, pods: list[Owned], services: list[Owned]
) -> tuple[list[Owned], list[Owned]]:
    """The clean-up decision table, for a job that has succeeded or failed: the pods and the
    Services to delete. None (the default) keeps everything; All deletes every pod and Service;
    Unfinished deletes the pods that have not finished (Pending, Running, Unknown). What is
    already being deleted is left alone."""
    live_pods = [p for p in pods if not p.deleting]
    if policy == "All":
        return live_pods, [s for s in services if not s.deleting]
    if policy == "Unfinished":
        return [p for p in live_pods if not p.finished], []
    return [], []


def _clean_up(observed: HousekeepingObserved, out: HousekeepingPlan) -> None:
    run_policy = observed.spec.run_policy
    policy = run_policy.clean_up_policy if run_policy else None
    pods, services = clean_up(policy, observed.pods, observed.services)
    if not pods and not services:
        return
    out.delete_pods = [(p.name, p.uid, p.resource_version) for p in pods]
    out.delete_services = [(s.name, s.uid) for s in services]
    what = _count(len(pods), "pod") + (
        f" and {_count(len(services), 'Service')}" if services else ""
    )
    out.events.append(
        HousekeepingEvent(
            "Normal",
            constants.REASON_CLEAN_UP,
            f"cleanUpPolicy {policy}: deleting {what} of the finished job",
            # Per policy: the policy may be changed after the job ends, and that is a new action.
            f"clean-up-{policy}",
        )
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _ttl_expired(observed: HousekeepingObserved, out: HousekeepingPlan) -> bool:
    run_policy = observed.spec.run_policy
    ttl = run_policy.ttl_seconds_after_finished if run_policy else None
    finished = parse_time(observed.status.get("completionTime"))
    if ttl is None or finished is None:
        return False
    due = finished + timedelta(seconds=ttl)
    if observed.now < due:
        out.requeue_after = (due - observed.now).total_seconds()
        return False
    out.delete_job = True
    out.events.append(
        HousekeepingEvent(
            "Normal",
            constants.REASON_TTL_EXPIRED,
            f"deleting the job: ttlSecondsAfterFinished ({ttl}s) has passed since it finished",
            "ttl",
        )
    )
    return True


# -- TensorBoard ----------------------------------------------------------------------------------


def _tensorboard(observed: HousekeepingObserved, out: HousekeepingPlan) -> None:
    meta, seen = observed.job_meta, observed.tensorboard
    tensorboard_spec = observed.spec.tensorboard_spec
    if tensorboard_spec is None:
        _remove_tensorboard(observed, out)
        return
    deployment = render_deployment(meta, tensorboard_spec)
    service = render_service(meta)
    for desired, current in ((service, seen.service), (deployment, seen.deployment)):
        if current is None:
            out.create.append(desired)
        elif spec_hash(current) != spec_hash(desired):
            out.update.append((desired, current))
        elif drifted := drifted_fields(desired, current):
            out.update.append((desired, current))
            out.events.append(_restored(current, drifted))
    digest = spec_hash(deployment)
    if seen.deployment is None:
        out.events.append(
            HousekeepingEvent(
                "Normal",
                constants.REASON_TENSORBOARD_CREATED,
                f"creating TensorBoard {deployment['metadata']['name']}",
                f"tensorboard-created-{digest}",
            )
        )
    elif spec_hash(seen.deployment) != digest:
        out.events.append(
            HousekeepingEvent(
                "Normal",
                constants.REASON_TENSORBOARD_UPDATED,
                f"rolling out TensorBoard {deployment['metadata']['name']} for the changed "
                "tensorboardSpec",
                # Per generation: rolling back to an earlier spec is a new action.
                f"tensorboard-updated-{meta.get('generation', 0)}",
            )
        )
    status = tensorboard_status(meta, digest, seen.deployment, seen.service, seen.pods)
    _set_status(observed, out, status)


def _restored(current: dict[str, Any], drifted: list[str]) -> HousekeepingEvent:
    meta = current["metadata"]
    return HousekeepingEvent(
        "Warning",
        constants.REASON_TENSORBOARD_RESTORED,
        f"putting back {', '.join(drifted)} of the TensorBoard's {current['kind']} "
        f"{meta['name']}: it was changed, and it decides which pods the TensorBoard is",
        # Per change seen: a later change is reported again.
        f"tensorboard-restored-{current['kind']}-{meta.get('resourceVersion', '')}",
    )


def _remove_tensorboard(observed: HousekeepingObserved, out: HousekeepingPlan) -> None:
    """tensorboardSpec was removed from the job: so is its TensorBoard."""
    seen = observed.tensorboard
    for kind, obj in (("Deployment", seen.deployment), ("Service", seen.service)):
        if obj is not None and not obj["metadata"].get("deletionTimestamp"):
            out.delete_tensorboard.append((kind, obj["metadata"]["name"], obj["metadata"]["uid"]))
    if seen.deployment is not None and out.delete_tensorboard:
        out.events.append(
            HousekeepingEvent(
                "Normal",
                constants.REASON_TENSORBOARD_DELETED,
                f"deleting TensorBoard {seen.deployment['metadata']['name']}: tensorboardSpec "
                "was removed",
                f"tensorboard-deleted-{seen.deployment['metadata']['uid']}",
            )
        )
    _set_status(observed, out, None)


def _set_status(
    observed: HousekeepingObserved, out: HousekeepingPlan, status: dict[str, Any] | None
) -> None:
    out.tensorboard_status = status
    out.write_tensorboard_status = stored_form(status) != observed.status.get("tensorboard")
