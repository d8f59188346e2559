"""Carries out a housekeeping plan: the events first (each names its action, so it is recorded
once however often the action is planned), then the clean-up or the job's deletion, then the
TensorBoard and `status.tensorboard`. Every deletion is conditional on the uid that was observed, so
an object replaced meanwhile under the same name is never deleted by mistake."""

from __future__ import annotations

from typing import Any

import structlog
from prometheus_client import Counter

from torchjob.api import constants
from torchjob.api.job_api import api_of
from torchjob.kube.client import KubeClient
from torchjob.kube.errors import Conflict, Invalid, KubeError, NotFound
from torchjob.kube.events import EventRecorder
from torchjob.kube.informer import ResourceKind
from torchjob.kube.jobs import patch_status
from torchjob.kube.resources import DEPLOYMENTS, PODS, SERVICES, job_resource
from torchjob.kube.rest import JSON_PATCH, Resources
from torchjob.lifecycle.housekeeping import HousekeepingPlan
from torchjob.lifecycle.tensorboard import failed_status, stored_form
from torchjob.render.tensorboard import spec_hash

log = structlog.get_logger("torchjob.housekeeper")

ACTIONS = Counter(
    "torchjob_housekeeper_actions_total",
    "Writes the housekeeper made, by action (a deletion of something already gone is not one)",
    ["action"],
)


def _resource_of(kind: str) -> ResourceKind:
    """Where a TensorBoard object of ours of `kind` lives: a Deployment or a Service."""
    return DEPLOYMENTS if kind == "Deployment" else SERVICES


class HousekeeperExecutor:
    def __init__(self, api: KubeClient, events: EventRecorder) -> None:
        self.resources = Resources(api)
        self.events = events

    async def execute(self, job: dict[str, Any], plan: HousekeepingPlan) -> None:
        for event in plan.events:
            if await self.events.record_once(
                job, event.type, event.reason, event.message, event.key
            ):
                ACTIONS.labels("event").inc()
        if plan.delete_job:
            await self._delete_job(job)
            return
        # Clean-up first: a TensorBoard that cannot be made must not keep a job's pods alive.
        namespace = job["metadata"]["namespace"]
        for name, uid, version in plan.delete_pods:
            await self._delete("pod", PODS, namespace, name, uid, version)
        for name, uid in plan.delete_services:
            await self._delete("service", SERVICES, namespace, name, uid)
        accepted = await self._tensorboard(job, plan)
        if accepted and plan.write_tensorboard_status:
            await self._write_tensorboard_status(job, plan.tensorboard_status)

    # -- TensorBoard -----------------------------------------------------------------------------

    async def _tensorboard(self, job: dict[str, Any], plan: HousekeepingPlan) -> bool:
        """False when the apiserver refused what was rendered: that is reported (event and
        status) instead, and waits for the spec to change."""
        try:
            for obj in plan.create:
                await self._create(job, obj)
            for desired, current in plan.update:
                await self._update(desired, current)
        except Invalid as error:
            await self._refused(job, error)
            return False
        namespace = job["metadata"]["namespace"]
        for kind, name, uid in plan.delete_tensorboard:
            where = _resource_of(kind)
            await self._delete(f"tensorboard_{kind.lower()}", where, namespace, name, uid)
        return True

    async def _create(self, job: dict[str, Any], obj: dict[str, Any]) -> None:
        try:
            await self.resources.create(
                _resource_of(obj["kind"]), obj["metadata"]["namespace"], obj
            )
            ACTIONS.labels(f"tensorboard_{obj['kind'].lower()}_created").inc()
        except Conflict:
            await self._check_ours(job, obj)

    async def _check_ours(self, job: dict[str, Any], obj: dict[str, Any]) -> None:
        """The name is taken: by our own object the cache has not shown yet (nothing to do), or
        by someone else's, which is reported and retried with backoff until it is gone."""
        meta = obj["metadata"]
        try:
            existing = await self.resources.get(
                _resource_of(obj["kind"]), meta["namespace"], meta["name"]
            )
        except NotFound:
            raise Conflict(409, "Conflict", f"{meta['name']} was deleted; creating again") from None
        owners = existing.get("metadata", {}).get("ownerReferences") or []
        uid = job["metadata"]["uid"]
        if any(r.get("controller") and r.get("uid") == uid for r in owners):
            # Ours, yet out of the cache: its label was taken off, which hides it from the
            # informers (and from `torchjob tensorboard`); it is put back as rendered.
            await self._update(obj, existing)
            return
        message = (
            f"a {obj['kind']} named {meta['name']} already exists and does not belong to the job"
        )
        await self.events.record(job, "Warning", constants.REASON_TENSORBOARD_FAILED, message)
        await self._write_tensorboard_status(job, failed_status(message) | {"reason": "NameTaken"})
        raise Conflict(409, "AlreadyExists", message)

    async def _update(self, desired: dict[str, Any], current: dict[str, Any]) -> None:
        """Replace every field we render under `spec` (a JSON Patch `add` replaces a member that
        exists), on the condition that the object is still the one observed."""
        meta = current["metadata"]
        annotations = {
            **(meta.get("annotations") or {}),
            constants.ANNOTATION_SPEC_HASH: spec_hash(desired),
        }
        labels = {**(meta.get("labels") or {}), **desired["metadata"]["labels"]}
        ops: Any = [
            {"op": "test", "path": "/metadata/uid", "value": meta["uid"]},
            {"op": "add", "path": "/metadata/annotations", "value": annotations},
            {"op": "add", "path": "/metadata/labels", "value": labels},
            *({"op": "add", "path": f"/spec/{k}", "value": v} for k, v in desired["spec"].items()),
        ]
        await self.resources.patch(
            _resource_of(desired["kind"]),
            meta["namespace"],
            meta["name"],
            ops,
            content_type=JSON_PATCH,
        )
        ACTIONS.labels(f"tensorboard_{desired['kind'].lower()}_updated").inc()

    async def _refused(self, job: dict[str, Any], error: KubeError) -> None:
        """An invalid rendering (a bad resources field, say) waits for the spec to change."""
        message = f"the TensorBoard was refused: {error.message}"
        log.warning("tensorboard refused", error=error.message)
        await self.events.record(job, "Warning", constants.REASON_TENSORBOARD_FAILED, message)
        await self._write_tensorboard_status(job, failed_status(message))

    async def _write_tensorboard_status(
        self, job: dict[str, Any], status: dict[str, Any] | None
    ) -> None:
        if stored_form(status) == (job.get("status") or {}).get("tensorboard"):
            return
        await patch_status(self.resources, job["metadata"], {"tensorboard": status}, api_of(job))
        ACTIONS.labels("status_written").inc()

    # -- deletions -------------------------------------------------------------------------------

    async def _delete(
        self,
        what: str,
        kind: ResourceKind,
        namespace: str,
        name: str,
        uid: str,
        resource_version: str | None = None,
    ) -> None:
        try:
            await self.resources.delete(
                kind, namespace, name, uid=uid, resource_version=resource_version or None
            )
        except (NotFound, Conflict):
            # Already gone, replaced under the same name, or changed since it was seen (its
            # update brings the job back to be decided again).
            return
        ACTIONS.labels(f"{what}_deleted").inc()
        log.info("deleted", kind=what, name=name)

    async def _delete_job(self, job: dict[str, Any]) -> None:
        meta, jobs = job["metadata"], job_resource(api_of(job))
        try:
            # Background: the job goes at once and the garbage collector removes what it owned.
            await self.resources.delete(
                jobs, meta["namespace"], meta["name"], uid=meta["uid"], propagation="Background"
            )
        except (NotFound, Conflict):
            return
        ACTIONS.labels("job_deleted").inc()
        log.info("deleted the job after its TTL")
