"""Carries out a lifecycle plan against the apiserver: status first (it is the restart ledger),
then deletions, then creations. A status the plan lets wait (it only describes creations in
flight) is left to the reconcile that observing them triggers, unless a creation fails. Every
write is made with our field manager.

A creation the apiserver refuses (any answer but success, lifecycle/failures.py) ends the
round's creations and is returned as a `Refusal`: the reconciler feeds it back to the planner,
which decides what the status says of it. Every action is logged at INFO with the job's key and
recorded as an Event on the job (SuccessfulCreate, SuccessfulDelete), as the built-in
controllers do."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, Literal

import structlog

from torchjob.api import constants
from torchjob.api.job_api import api_of
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.kube.client import KubeClient
from torchjob.kube.errors import Conflict, KubeError, NotFound
from torchjob.kube.events import EventRecorder
from torchjob.kube.expectations import Expectations, ObjectRef
from torchjob.kube.informer import ResourceKind
from torchjob.kube.jobs import patch_status
from torchjob.kube.reconcile import JobKey
from torchjob.kube.resources import AUTOSCALERS, GROUP_RESOURCES, KUEUE_WORKLOADS, PODS, SERVICES
from torchjob.kube.rest import Resources
from torchjob.lifecycle.diagnosis import FIELD
from torchjob.lifecycle.in_place import restart_patch
from torchjob.lifecycle.observe import Refusal
from torchjob.lifecycle.plan import Plan
from torchjob.lifecycle.status import ours
from torchjob.lifecycle.times import format_time
from torchjob.reconciler.diagnoses import Diagnoses
from torchjob.reconciler.metrics import JobMetrics
from torchjob.render.job_kinds import kind_of
from torchjob.render.replica_objects import owner_reference, render_pod, render_service
from torchjob.render.scheduling import (
    Gang,
    GangUnavailable,
    SchedulingSettings,
    decorate_pod,
    kueue_group_ended_patch,
    min_count_patch,
    render_pod_group,
    shared_priority_class,
)
from torchjob.render.topology import replica_name

log = structlog.get_logger("torchjob.reconciler")

CreatedKind = Literal["pod", "service", "podgroup"]


class ReconcilerExecutor:
    def __init__(
        self,
        api: KubeClient,
        events: EventRecorder,
        expectations: Expectations,
        scheduling: SchedulingSettings,
        metrics: JobMetrics | None = None,
        in_flight: int = 1,
    ) -> None:
        self.resources = Resources(api)
        self.diagnoses = Diagnoses(self.resources, events)
        # How many of one job's creations are sent at once (the reconciler's workers): one at a
        # time, one round trip (admission included) would set the pace rather than the limit.
        self.in_flight = max(1, in_flight)
        self.events = events
        self.expectations = expectations
        self.scheduling = scheduling
        # Jobs whose T9k queue is a Kueue queue are placed by the cluster's scheduler instead.
        self.t9k_scheduler = None if scheduling.t9k_queues == "kueue" else scheduling.t9k_scheduler
        self.metrics = metrics if metrics is not None else JobMetrics()

    async def execute(
        self,
        key: JobKey,
        job: dict[str, Any],
        spec: PyTorchTrainingJobSpec,
        plan: Plan,
        gang: Gang | GangUnavailable | None = None,
    ) -> Refusal | None:
        """Carry out `plan`; the apiserver's refusal of a creation, if one was refused (the
        creations after it are not sent). A refused round's status is left to the caller, which
        plans it again knowing the refusal."""
        if plan.collect_diagnosis is not None:
            record = await self.diagnoses.collect(key, job, plan.collect_diagnosis, plan.status)
            plan.status = {**plan.status, FIELD: record}
            plan.status_can_wait = False
        unwritten = plan.status != ours(job.get("status") or {})
        if unwritten and not plan.status_can_wait:
            await self.write_planned_status(key, job, plan)
            unwritten = False
        for event in plan.events:
            log.info("job event", job=str(key), reason=event.reason, event_message=event.message)
            self.events.emit(job, event.type, event.reason, event.message)
        member = gang if isinstance(gang, Gang) else None
        try:
            await self._delete_pods(key, job, plan)
            await self._restart_in_place(key, job, plan)
            if plan.ask_diagnosis is not None:
                await self.diagnoses.ask(key, job, plan.ask_diagnosis)
            await self._end_group(key, job, plan)
            await self.release_workload(
                key, job["metadata"]["namespace"], plan.release_workload, job
            )
            await self._delete_services(key, job, plan)
            refusal = await self._group(key, job, spec, plan, member)
            if refusal is None:
                refusal = await self._create_services(key, job, plan)
            if refusal is None:
                refusal = await self._create_pods(key, job, spec, plan, member)
        except Exception:
            if unwritten:
                # No reconcile will come of observing these creations: show the status now.
                await self.write_planned_status(key, job, plan)
            raise
        if refusal is not None:
            await self._refused(key, job, refusal)
        return refusal

    async def write_planned_status(self, key: JobKey, job: dict[str, Any], plan: Plan) -> None:
        """The plan's status, unless the job already shows it, and its Events."""
        if plan.status == ours(job.get("status") or {}):
            return
        await self.write_status(key, job, plan.status, job.get("status") or {})
        for event in plan.status_events:
            log.info("job event", job=str(key), reason=event.reason, event_message=event.message)
            self.events.emit(job, event.type, event.reason, event.message)

    async def write_refused_status(
        self, key: JobKey, job: dict[str, Any], carried: Plan, refused: Plan
    ) -> None:
        """The status of `refused`, the plan made again knowing a refusal, after `carried` was
        carried out; the Events `carried` recorded with its own status write are not repeated."""
        stored = ours(job.get("status") or {})
        written = carried.status != stored and not carried.status_can_wait
        if refused.status == (carried.status if written else stored):
            return
        before = carried.status if written else stored
        await self.write_status(key, job, refused.status, before)
        for event in refused.status_events:
            if written and event in carried.status_events:
                continue
            log.info("job event", job=str(key), reason=event.reason, event_message=event.message)
            self.events.emit(job, event.type, event.reason, event.message)

    async def write_status(
        self, key: JobKey, job: dict[str, Any], status: dict[str, Any], before: dict[str, Any]
    ) -> None:
        """Write `status` over `before` (what the job showed) and count what it records. A
        Kubeflow job's status is Kubeflow's, rendered from `status`, which it keeps too."""
        # Lists (conditions, tasks) are replaced as a whole; status.tensorboard, which the
        # housekeeper writes, and status.trainerStatus, which the progress endpoint writes, are
        # never in `status` (lifecycle.status.ours), so they are left alone.
        meta, api, now = job["metadata"], api_of(job), datetime.now(UTC)
        kind = kind_of(api)
        written = kind.shown_status(job, status, format_time(now))
        # A second write in the same round (after a refusal) moves on from this one.
        kind.remember_shown(job, written)
        version = await patch_status(self.resources, meta, written, api)
        # The next round must read this status back, not the one before it (the restart ledger).
        self.expectations.expect_status(key, version)
        self.metrics.written(meta, before, status, now)

    async def ensure_autoscaler(
        self,
        key: JobKey,
        job: dict[str, Any],
        desired: dict[str, Any],
        current: dict[str, Any] | None,
    ) -> None:
        """A Kubeflow job's HorizontalPodAutoscaler: created, or brought back to what the job asks
        for (render/kubeflow.py). A refusal (an invalid metric, an autoscaler of that name that is
        not the job's) is a Warning Event on the job; the job itself runs on."""
        meta = desired["metadata"]
        name = meta["name"]
        try:
            if current is None:
                await self.resources.create(AUTOSCALERS, meta["namespace"], desired)
            else:
                changes = {
                    "metadata": {"annotations": meta["annotations"]},
                    "spec": desired["spec"],
                }
                await self.resources.patch(AUTOSCALERS, meta["namespace"], name, changes)
        except KubeError as error:
            said = error.message or str(error)
            if isinstance(error, Conflict):
                said = f"a HorizontalPodAutoscaler named {name} exists and is not the job's"
            message = f"elasticPolicy.metrics: the HorizontalPodAutoscaler was refused: {said}"
            log.warning("autoscaler refused", job=str(key), said=said)
            self.events.emit(job, "Warning", constants.REASON_AUTOSCALER_FAILED, message)
            return
        created = current is None
        reason = (
            constants.REASON_SUCCESSFUL_CREATE if created else constants.REASON_SUCCESSFUL_UPDATE
        )
        what = "Created" if created else "Updated"
        self._done(key, job, reason, f"{what} horizontalpodautoscaler: {name}")

    async def _delete_pods(self, key: JobKey, job: dict[str, Any], plan: Plan) -> None:
        """The planned deletions: graceful ones, then forced ones (gracePeriodSeconds 0) of pods
        stuck being deleted on a node whose kubelet will never confirm it."""
        deletions: list[tuple[str, str, int | None]] = [
            (name, uid, None) for name, uid in plan.delete_pods
        ]
        deletions += [(name, uid, 0) for name, uid in plan.force_delete_pods]
        if not deletions:
            return
        meta = job["metadata"]
        refs = [ObjectRef("pod", name) for name, _, _ in deletions]
        self.expectations.expect_deletions(key, refs)
        for sent, (name, uid, grace) in enumerate(deletions):
            try:
                await self.resources.delete(
                    PODS, meta["namespace"], name, uid=uid, grace_period=grace
                )
            except (NotFound, Conflict):
                # Already gone, or already replaced: the informer reports what is there now.
                self.expectations.observed_deletion(key, refs[sent])
            except BaseException:
                # Neither this deletion nor those not sent will ever be observed.
                for unsent in refs[sent:]:
                    self.expectations.observed_deletion(key, unsent)
                raise
            else:
                done = "Deleted" if grace is None else "Force-deleted"
                self._done(key, job, constants.REASON_SUCCESSFUL_DELETE, f"{done} pod: {name}")

    async def _restart_in_place(self, key: JobKey, job: dict[str, Any], plan: Plan) -> None:
        """Ask the planned pods to restart in place (lifecycle/in_place.py): a merge patch of two
        annotations, on the pod of that uid only. A pod gone or replaced since needs nothing: the
        next round sees what is there. The next round waits until the cache shows each patch:
        a pod of the gang before, seen without its new count, would be asked again."""
        namespace = job["metadata"]["namespace"]
        for ask in plan.restart_in_place:
            ref = ObjectRef("pod", ask.name)
            self.expectations.expect_update(key, ref)
            version = None
            try:
                version = await self.resources.patch(PODS, namespace, ask.name, restart_patch(ask))
            except (NotFound, Conflict):
                continue
            finally:
                self.expectations.patched(key, ref, version)
            log.info("asked to restart in place", job=str(key), pod=ask.name, asked=ask.asked)

    async def _end_group(self, key: JobKey, job: dict[str, Any], plan: Plan) -> None:
        """Tell Kueue the ended job's pod group is over, on each pod the plan names (a merge
        patch of one annotation; the pod's own watch event shows it to the next round). A pod
        already gone needs nothing."""
        namespace = job["metadata"]["namespace"]
        for name, _ in plan.end_group:
            try:
                await self.resources.patch(PODS, namespace, name, kueue_group_ended_patch())
            except NotFound:
                continue
            log.info("told Kueue the pod group is over", job=str(key), pod=name)

    async def release_workload(
        self, key: JobKey, namespace: str, name: str | None, job: dict[str, Any] | None = None
    ) -> None:
        """Delete Kueue's Workload `name`, so that Kueue lets go the pods of the group it holds
        (lifecycle/kueue.py); recorded on `job`, when it still exists. A Workload already gone,
        or a cluster that serves no Workloads, needs nothing."""
        if name is None:
            return
        try:
            await self.resources.delete(KUEUE_WORKLOADS, namespace, name)
        except NotFound:
            return
        message = (
            f"Deleted Kueue Workload: {name} (Kueue lets go the pods it holds only then; the "
            "pods created next wait to be admitted again)"
        )
        if job is None:
            log.info(message, job=str(key), reason=constants.REASON_SUCCESSFUL_DELETE)
        else:
            self._done(key, job, constants.REASON_SUCCESSFUL_DELETE, message)

    async def _delete_services(self, key: JobKey, job: dict[str, Any], plan: Plan) -> None:
        # Not expected: a Service the cache still shows is only deleted again (NotFound).
        for name in plan.delete_services:
            try:
                await self.resources.delete(SERVICES, job["metadata"]["namespace"], name)
            except NotFound:
                continue
            self._done(key, job, constants.REASON_SUCCESSFUL_DELETE, f"Deleted service: {name}")

    def _done(self, key: JobKey, job: dict[str, Any], reason: str, message: str) -> None:
        """An action carried out: logged, and recorded as a Normal Event on the job."""
        log.info(message, job=str(key), reason=reason)
        self.events.emit(job, "Normal", reason, message)

    async def _refused(self, key: JobKey, job: dict[str, Any], refusal: Refusal) -> None:
        """A refusal is logged and, unless it fails the job (whose Failed Event names it), recorded
        as a Warning Event; repeats of it join one Event's series."""
        log.warning(
            "creation refused",
            job=str(key),
            kind=refusal.kind,
            name=refusal.name,
            status=refusal.status,
            said=refusal.said,
            permanent=refusal.permanent,
        )
        if not refusal.permanent:
            self.events.emit(job, "Warning", refusal.reason, refusal.message)

    async def _create_services(
        self, key: JobKey, job: dict[str, Any], plan: Plan
    ) -> Refusal | None:
        meta = job["metadata"]
        create = self._creator(SERVICES, meta["namespace"])
        rendered = [render_service(meta, r, api_of(job)) for r in plan.create_services]
        services = [(s["metadata"]["name"], s) for s in rendered]
        return await self._create_each(key, job, "service", services, create)

    async def _create_pods(
        self,
        key: JobKey,
        job: dict[str, Any],
        spec: PyTorchTrainingJobSpec,
        plan: Plan,
        gang: Gang | None,
    ) -> Refusal | None:
        meta = job["metadata"]
        create = self._creator(PODS, meta["namespace"])
        pods = []
        for p in plan.create_pods:
            pod = render_pod(
                meta, spec, p.replica, p.annotations, self.t9k_scheduler, api_of(job), p.avoid
            )
            if gang is not None:
                decorate_pod(pod, gang, self.scheduling)
            pods.append((replica_name(meta["name"], p.replica.type, p.replica.index), pod))
        return await self._create_each(key, job, "pod", pods, create)

    async def _group(
        self,
        key: JobKey,
        job: dict[str, Any],
        spec: PyTorchTrainingJobSpec,
        plan: Plan,
        gang: Gang | None,
    ) -> Refusal | None:
        """The job's group object: deleted, created (before any pod) or resized, as planned."""
        groups = GROUP_RESOURCES.get(gang.mode) if gang is not None else None
        if gang is None or groups is None:
            return None
        meta = job["metadata"]
        if plan.delete_group:
            try:
                await self.resources.delete(groups, meta["namespace"], gang.name)
            except NotFound:
                return None
            self._done(key, job, constants.REASON_SUCCESSFUL_DELETE, _what(gang, "Deleted"))
        if plan.resize_group:
            await self.resources.patch(groups, meta["namespace"], gang.name, min_count_patch(gang))
        if not plan.create_group:
            return None
        owner = owner_reference(meta, api_of(job))
        body = render_pod_group(meta, gang, owner, shared_priority_class(spec))
        if body is None:
            return None
        create = self._creator(groups, meta["namespace"])
        return await self._create_each(key, job, "podgroup", [(gang.name, body)], create)

    def _creator(self, kind: ResourceKind, namespace: str) -> Callable[[Any], Awaitable[None]]:
        return functools.partial(self.resources.create, kind, namespace)

    async def _create_each(
        self,
        key: JobKey,
        job: dict[str, Any],
        kind: CreatedKind,
        objects: list[tuple[str, dict[str, Any]]],
        create: Callable[[Any], Awaitable[None]],
    ) -> Refusal | None:
        """Create every `(name, body)` of `kind`, at most `in_flight` at a time (in no promised
        order), each expected until the informer reports it. After a failure neither the failed
        object nor those not sent will ever be reported, so they are no longer expected. The
        apiserver's refusal (any status, 409 AlreadyExists included: the cache shows no such
        object of ours) ends the sending; once those in flight are answered the first refusal is
        returned. Any other failure (the connection) is raised, also once those in flight are
        answered, so that what they created stays expected."""
        if not objects:
            return None
        creations = _Creations(key, kind, self.expectations)
        creations.expect(objects)

        async def create_one(name: str, body: dict[str, Any]) -> None:
            if await creations.sent(name, create(body)):
                self._done(key, job, constants.REASON_SUCCESSFUL_CREATE, f"Created {kind}: {name}")

        return await creations.run(objects, create_one, self.in_flight)


class _Creations:
    """One kind's creations of one round: what is expected of them, and how they ended."""

    def __init__(self, key: JobKey, kind: CreatedKind, expectations: Expectations) -> None:
        self.key = key
        self.kind = kind
        self.expectations = expectations
        self.refusal: Refusal | None = None
        self.failure: BaseException | None = None

    def expect(self, objects: list[tuple[str, dict[str, Any]]]) -> None:
        self.expectations.expect_creations(self.key, [self._ref(name) for name, _ in objects])

    def stopped(self) -> bool:
        return self.refusal is not None or self.failure is not None

    async def sent(self, name: str, creation: Awaitable[None]) -> bool:
        """Whether `creation` created the object; a refusal or failure is kept, the first one
        of each returned or raised by `run`."""
        try:
            await creation
        except KubeError as error:
            self.expectations.observed_creation(self.key, self._ref(name))
            said = error.message or str(error)
            self.refusal = self.refusal or Refusal(self.kind, name, said, error.status)
            return False
        except Exception as error:
            self.expectations.observed_creation(self.key, self._ref(name))
            self.failure = self.failure or error
            return False
        except BaseException:
            self.expectations.observed_creation(self.key, self._ref(name))
            raise
        return True

    async def run(
        self,
        objects: list[tuple[str, dict[str, Any]]],
        create_one: Callable[[str, dict[str, Any]], Coroutine[Any, Any, None]],
        in_flight: int,
    ) -> Refusal | None:
        pending: set[asyncio.Task[None]] = set()
        unsent = list(reversed(objects))
        try:
            while unsent and not self.stopped():
                if len(pending) >= in_flight:
                    _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    continue
                name, body = unsent.pop()
                pending.add(asyncio.create_task(create_one(name, body)))
            if pending:
                await asyncio.wait(pending)
        except BaseException:
            for task in pending:
                task.cancel()
            raise
        finally:
            for name, _ in unsent:
                self.expectations.observed_creation(self.key, self._ref(name))
        if self.failure is not None:
            raise self.failure
        return self.refusal

    def _ref(self, name: str) -> ObjectRef:
        return ObjectRef(self.kind, name)


def _what(gang: Gang, done: str) -> str:
    kind = gang.kind.kind if gang.kind else "group"
    return f"{done} {gang.mode} {kind}: {gang.name}"
