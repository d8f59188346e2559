"""Carries out a lifecycle plan against the apiserver: status first (it is the restart ledger),
then deletions, then creations. A status the plan lets wait (it only describes creations in
flight) is left to the reconcile that observing them triggers, unless a creation fails. Every
write is made with our field manager."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Literal

import structlog
from kubernetes_asyncio import client

from torchjob.api import constants
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.kube.errors import Conflict, Forbidden, Invalid, KubeError, NotFound, translated
from torchjob.kube.events import EventRecorder
from torchjob.kube.expectations import Expectations, ObjectRef
from torchjob.kube.jobs import patch_status
from torchjob.kube.reconcile import JobKey
from torchjob.lifecycle.failures import Refusal, creation_failed
from torchjob.lifecycle.plan import Plan
from torchjob.lifecycle.status import ours
from torchjob.render.replica_objects import render_pod, render_service
from torchjob.render.topology import replica_name

log = structlog.get_logger("torchjob.reconciler")


class CreationRefused(Exception):
    """The apiserver refused to create a replica's pod (invalid, or forbidden) or Service
    (forbidden: a quota, say)."""

    def __init__(self, kind: Literal["pod", "service"], name: str, error: KubeError) -> None:
        super().__init__(f"creating {kind} {name}: {error}")
        self.kind = kind
        self.name = name
        self.error = error


class ReconcilerExecutor:
    def __init__(
        self,
        api: client.ApiClient,
        events: EventRecorder,
        expectations: Expectations,
        scheduler_name: str,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.objects = client.CustomObjectsApi(api)
        self.events = events
        self.expectations = expectations
        self.scheduler_name = scheduler_name

    async def execute(
        self, key: JobKey, job: dict[str, Any], spec: PyTorchTrainingJobSpec, plan: Plan
    ) -> None:
        meta = job["metadata"]
        unwritten = plan.status != ours(job.get("status") or {})
        if unwritten and not plan.status_can_wait:
            await self._write_planned_status(job, plan)
            unwritten = False
        for event in plan.events:
            await self.events.record(job, event.type, event.reason, event.message)
        try:
            await self._delete_pods(key, meta, plan)
            await self._delete_services(meta, plan)
            await self._create_services(key, meta, plan)
            await self._create_pods(key, job, spec, plan)
        except CreationRefused as refused:
            await self._creation_refused(job, plan.status, refused)
        except Exception:
            if unwritten:
                # No reconcile will come of observing these creations: show the status now.
                await self._write_planned_status(job, plan)
            raise

    async def _write_planned_status(self, job: dict[str, Any], plan: Plan) -> None:
        await self.write_status(job["metadata"], plan.status)
        for event in plan.status_events:
            await self.events.record(job, event.type, event.reason, event.message)

    async def write_status(self, meta: dict[str, Any], status: dict[str, Any]) -> None:
        # Lists (conditions, tasks) are replaced as a whole; status.tensorboard, which the
        # housekeeper writes, is never in `status` (lifecycle.status.ours), so it is left alone.
        await patch_status(self.objects, meta, status)

    async def _delete_pods(self, key: JobKey, meta: dict[str, Any], plan: Plan) -> None:
        if not plan.delete_pods:
            return
        refs = [ObjectRef("pod", name) for name, _ in plan.delete_pods]
        self.expectations.expect_deletions(key, refs)
        for sent, (name, uid) in enumerate(plan.delete_pods):
            try:
                async with translated():
                    await self.core.delete_namespaced_pod(
                        name,
                        meta["namespace"],
                        body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)),
                    )
            except (NotFound, Conflict):
                # Already gone, or already replaced: the informer reports what is there now.
                self.expectations.observed_deletion(key, refs[sent])
            except BaseException:
                # Neither this deletion nor those not sent will ever be observed.
                for unsent in refs[sent:]:
                    self.expectations.observed_deletion(key, unsent)
                raise

    async def _delete_services(self, meta: dict[str, Any], plan: Plan) -> None:
        # Not expected: a Service the cache still shows is only deleted again (NotFound).
        for name in plan.delete_services:
            with contextlib.suppress(NotFound):
                async with translated():
                    await self.core.delete_namespaced_service(name, meta["namespace"])

    async def _create_services(self, key: JobKey, meta: dict[str, Any], plan: Plan) -> None:
        async def create(body: Any) -> None:
            await self.core.create_namespaced_service(
                meta["namespace"], body, field_manager=constants.FIELD_MANAGER
            )

        services = [
            (replica_name(meta["name"], r.type, r.index), render_service(meta, r))
            for r in plan.create_services
        ]
        await self._create_each(key, "service", services, create, refusals=(Forbidden,))

    async def _create_pods(
        self, key: JobKey, job: dict[str, Any], spec: PyTorchTrainingJobSpec, plan: Plan
    ) -> None:
        meta = job["metadata"]

        async def create(body: Any) -> None:
            await self.core.create_namespaced_pod(
                meta["namespace"], body, field_manager=constants.FIELD_MANAGER
            )

        pods = [
            (
                replica_name(meta["name"], p.replica.type, p.replica.index),
                render_pod(meta, spec, p.replica, p.annotations, self.scheduler_name),
            )
            for p in plan.create_pods
        ]
        await self._create_each(key, "pod", pods, create, refusals=(Invalid, Forbidden))

    async def _create_each(
        self,
        key: JobKey,
        kind: Literal["pod", "service"],
        objects: list[tuple[str, dict[str, Any]]],
        create: Callable[[Any], Awaitable[None]],
        refusals: tuple[type[KubeError], ...] = (),
    ) -> None:
        """Create each `(name, body)` of `kind` in turn, expecting the informer to report it.
        After a failure neither the failed object nor those not sent will ever be reported, so
        they are no longer expected; a refusal of one of the `refusals` kinds is raised as
        CreationRefused."""
        if not objects:
            return
        expected = [ObjectRef(kind, name) for name, _ in objects]
        self.expectations.expect_creations(key, expected)
        for sent, (name, body) in enumerate(objects):
            try:
                async with translated():
                    await create(body)  # the client sends a dict as it is
            except Conflict:
                self.expectations.observed_creation(key, expected[sent])  # it exists already
            except BaseException as error:
                for unsent in expected[sent:]:
                    self.expectations.observed_creation(key, unsent)
                if isinstance(error, refusals):
                    raise CreationRefused(kind, name, error) from error
                raise

    async def _creation_refused(
        self, job: dict[str, Any], status: dict[str, Any], refused: CreationRefused
    ) -> None:
        """Shown in the status and as an Event; a refusal that is not permanent (lifecycle.
        failures) is raised again, so the job is retried with backoff."""
        error = refused.error
        refusal = Refusal(
            refused.kind, refused.name, error.message, invalid=isinstance(error, Invalid)
        )
        meta = job["metadata"]
        await self.events.record(job, "Warning", refusal.reason, refusal.message)
        generation = int(meta.get("generation") or 0)
        new_status = creation_failed(status, refusal, generation, datetime.now(UTC))
        await self.write_status(meta, new_status)
        if not refusal.permanent:
            raise error
