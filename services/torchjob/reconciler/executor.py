"""Carries out a lifecycle plan against the apiserver: status first (it is the restart ledger),
then deletions, then creations. Every write is made with our field manager."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import structlog
from kubernetes_asyncio import client

from torchjob.api import constants
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.kube.errors import Conflict, Forbidden, Invalid, KubeError, NotFound, translated
from torchjob.kube.events import EventRecorder
from torchjob.kube.expectations import Expectations
from torchjob.kube.jobs import patch_status
from torchjob.lifecycle.failures import pod_creation_failed
from torchjob.lifecycle.plan import Plan
from torchjob.lifecycle.status import ours
from torchjob.render.replica import render_pod, render_service
from torchjob.render.topology import replica_name

log = structlog.get_logger("torchjob.reconciler")


class Executor:
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
        self, key: str, job: dict[str, Any], spec: PyTorchTrainingJobSpec, plan: Plan
    ) -> None:
        meta = job["metadata"]
        if plan.status != ours(job.get("status") or {}):
            await self.write_status(meta, plan.status)
        for event in plan.events:
            await self.events.record(job, event.type, event.reason, event.message)
        await self._delete_pods(key, meta, plan)
        await self._create_services(key, meta, plan)
        await self._create_pods(key, job, spec, plan)

    async def write_status(self, meta: dict[str, Any], status: dict[str, Any]) -> None:
        # Lists (conditions, tasks) are replaced as a whole; status.tensorboard, which the
        # housekeeper writes, is never in `status` (lifecycle.status.ours), so it is left alone.
        await patch_status(self.objects, meta, status)

    async def _delete_pods(self, key: str, meta: dict[str, Any], plan: Plan) -> None:
        if not plan.delete_pods:
            return
        self.expectations.expect_deletions(key, [name for name, _ in plan.delete_pods])
        for name, uid in plan.delete_pods:
            try:
                async with translated():
                    await self.core.delete_namespaced_pod(
                        name,
                        meta["namespace"],
                        body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)),
                    )
            except (NotFound, Conflict):
                # Already gone, or already replaced: the informer reports what is there now.
                self.expectations.observed_deletion(key, name)

    async def _create_services(self, key: str, meta: dict[str, Any], plan: Plan) -> None:
        if not plan.create_services:
            return
        names = [replica_name(meta["name"], r.type, r.index) for r in plan.create_services]
        self.expectations.expect_creations(key, [f"service/{n}" for n in names])
        for replica, name in zip(plan.create_services, names, strict=True):
            try:
                async with translated():
                    body: Any = render_service(meta, replica)  # the client sends dicts as is
                    await self.core.create_namespaced_service(
                        meta["namespace"],
                        body,
                        field_manager=constants.FIELD_MANAGER,
                    )
            except Conflict:
                self.expectations.observed_creation(key, f"service/{name}")
            except KubeError:
                self.expectations.observed_creation(key, f"service/{name}")
                raise

    async def _create_pods(
        self, key: str, job: dict[str, Any], spec: PyTorchTrainingJobSpec, plan: Plan
    ) -> None:
        meta = job["metadata"]
        if not plan.create_pods:
            return
        names = [
            replica_name(meta["name"], p.replica.type, p.replica.index) for p in plan.create_pods
        ]
        self.expectations.expect_creations(key, [f"pod/{n}" for n in names])
        for item, name in zip(plan.create_pods, names, strict=True):
            pod: Any = render_pod(meta, spec, item.replica, item.annotations, self.scheduler_name)
            try:
                async with translated():
                    await self.core.create_namespaced_pod(
                        meta["namespace"], pod, field_manager=constants.FIELD_MANAGER
                    )
            except Conflict:
                self.expectations.observed_creation(key, f"pod/{name}")
            except (Invalid, Forbidden) as error:
                self.expectations.forget(key)
                await self._creation_refused(job, plan.status, name, error)
                return

    async def _creation_refused(
        self, job: dict[str, Any], status: dict[str, Any], name: str, error: KubeError
    ) -> None:
        """An invalid template fails the job; a refusal (quota, webhook) is retried with backoff."""
        permanent = isinstance(error, Invalid)
        message = f"creating pod {name}: {error.message}"
        meta = job["metadata"]
        await self.events.record(job, "Warning", constants.REASON_POD_CREATION_FAILED, message)
        new_status = pod_creation_failed(
            status, message, permanent, int(meta.get("generation") or 0), datetime.now(UTC)
        )
        await self.write_status(meta, new_status)
        if not permanent:
            raise error
