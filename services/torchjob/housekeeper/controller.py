"""The housekeeper: informer caches of jobs, of their replica pods and Services (the job-name
label) and of their TensorBoards' Deployments, Services and pods (the tensorboard label) feed a
work queue keyed by job (`JobKey`); `reconcile(key)` reads the caches (never LISTs), asks the
pure `lifecycle.housekeeping.plan_housekeeping` what to do and has the executor carry it out."""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any

import structlog

from torchjob.api import constants
from torchjob.api.job_api import api_of
from torchjob.api.model import ModelError
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.housekeeper.executor import HousekeeperExecutor
from torchjob.kube.client import KubeClient
from torchjob.kube.events import EventRecorder
from torchjob.kube.informer import Informer, controller_uid
from torchjob.kube.reconcile import JobKey, Result, TerminalError
from torchjob.kube.resources import (
    DEPLOYMENTS,
    OWNER_INDEX,
    PODS,
    SERVICES,
    job_resource,
    owner_job_key,
)
from torchjob.kube.workqueue import WorkQueue
from torchjob.lifecycle.housekeeping import (
    HousekeepingObserved,
    TensorBoardObserved,
    plan_housekeeping,
    view_owned,
)
from torchjob.lifecycle.status import is_terminal
from torchjob.render.job_kinds import kind_of, served_apis

log = structlog.get_logger("torchjob.housekeeper")

TENSORBOARD_INDEX = "tensorboard-of"


def tensorboard_job_key(obj: dict[str, Any]) -> list[str]:
    """Index function: the key of the job whose TensorBoard this object is, written as
    `str(JobKey)`."""
    meta = obj.get("metadata") or {}
    job = (meta.get("labels") or {}).get(constants.LABEL_TENSORBOARD)
    return [str(JobKey(str(meta.get("namespace")), job))] if job else []


def _relevant(job: dict[str, Any]) -> tuple[Any, ...]:
    """What the housekeeper's decisions read of a job; the reconciler's status writes about
    running pods change none of it."""
    job = kind_of(api_of(job)).run(job) or job
    meta, status = job.get("metadata") or {}, job.get("status") or {}
    return (
        job.get("spec"),
        meta.get("deletionTimestamp"),
        is_terminal(status),
        status.get("completionTime"),
        status.get("tensorboard"),
    )


class Housekeeper:
    def __init__(self, api: KubeClient, identity: str, *, opted_in: Collection[str] = ()) -> None:
        self.queue: WorkQueue[JobKey] = WorkQueue()
        self.events = EventRecorder(api, constants.REPORTER_HOUSEKEEPER, identity)
        self.executor = HousekeeperExecutor(api, self.events)
        # The jobs of each API served (with `kubeflow`, Kubeflow's PyTorchJobs too: their
        # clean-up and TTL, docs/kubeflow.md).
        self.job_informers = {
            job_api: Informer(
                api, job_resource(job_api), on_add=self._job_added, on_update=self._job_updated
            )
            for job_api in served_apis(opted_in)
        }
        owner = {OWNER_INDEX: controller_uid}
        replicas = constants.LABEL_JOB_NAME
        self.pods = Informer(
            api, PODS, label_selector=replicas, indexers=owner, **self._handlers(self._replica)
        )
        self.services = Informer(
            api, SERVICES, label_selector=replicas, indexers=owner, **self._handlers(self._replica)
        )
        tensorboards = constants.LABEL_TENSORBOARD
        handlers = self._handlers(self._tensorboard)
        self.tensorboard_deployments = Informer(
            api, DEPLOYMENTS, label_selector=tensorboards, indexers=owner, **handlers
        )
        self.tensorboard_services = Informer(
            api, SERVICES, label_selector=tensorboards, indexers=owner, **handlers
        )
        # The TensorBoard's pods belong to its ReplicaSet, so they are found by their label.
        self.tensorboard_pods = Informer(
            api,
            PODS,
            label_selector=tensorboards,
            indexers={TENSORBOARD_INDEX: tensorboard_job_key},
            **handlers,
        )

    @property
    def informers(self) -> list[Informer]:
        return [
            *self.job_informers.values(),
            self.pods,
            self.services,
            self.tensorboard_deployments,
            self.tensorboard_services,
            self.tensorboard_pods,
        ]

    # -- event handlers: map every change to its job's key --------------------------------------

    @staticmethod
    def _handlers(changed: Any) -> dict[str, Any]:
        return {
            "on_add": changed,
            "on_update": lambda _old, new: changed(new),
            "on_delete": changed,
        }

    def _job_added(self, job: dict[str, Any]) -> None:
        self.queue.add(JobKey.of(job))

    def _job_updated(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        if _relevant(old) != _relevant(new):
            self.queue.add(JobKey.of(new))

    def _replica(self, obj: dict[str, Any]) -> None:
        """Replica pods and Services matter once their job has finished (the clean-up)."""
        key = owner_job_key(obj)
        if key is None:
            return  # a labelled object someone else made
        job = self._job(key)
        if job is not None and is_terminal(job.get("status") or {}):
            self.queue.add(key)

    def _tensorboard(self, obj: dict[str, Any]) -> None:
        for key in tensorboard_job_key(obj):
            self.queue.add(JobKey.parse(key))

    # -- reconcile -------------------------------------------------------------------------------

    def _job(self, key: JobKey) -> dict[str, Any] | None:
        """The cached job of `key`; a Kubeflow job as the PyTorchTrainingJob that runs it."""
        jobs = self.job_informers.get(key.api)
        found = jobs.get(key.namespace, key.name) if jobs is not None else None
        return kind_of(key.api).run(found) if found is not None else None

    async def reconcile(self, key: JobKey) -> Result:
        namespace, name = key.namespace, key.name
        job = self._job(key)
        if job is None or (job.get("metadata") or {}).get("deletionTimestamp"):
            return Result()  # the garbage collector removes what the job owned
        try:
            spec = PyTorchTrainingJobSpec.from_dict(job.get("spec"), "spec")
        except ModelError as error:
            raise TerminalError(f"the stored job does not decode: {error}") from error
        meta = job["metadata"]
        with structlog.contextvars.bound_contextvars(
            namespace=namespace, job=name, uid=meta.get("uid")
        ):
            decision = plan_housekeeping(self._observe(key, job, spec))
            await self.executor.execute(job, decision)
        return Result(requeue_after=decision.requeue_after)

    def _observe(
        self, key: JobKey, job: dict[str, Any], spec: PyTorchTrainingJobSpec
    ) -> HousekeepingObserved:
        meta = job["metadata"]
        uid = meta["uid"]
        deployments = self.tensorboard_deployments.by_index(OWNER_INDEX, uid)
        services = self.tensorboard_services.by_index(OWNER_INDEX, uid)
        tensorboard = TensorBoardObserved(
            deployments[0] if deployments else None,
            services[0] if services else None,
            self.tensorboard_pods.by_index(TENSORBOARD_INDEX, str(key)),
        )
        return HousekeepingObserved(
            meta,
            spec,
            dict(job.get("status") or {}),
            [view_owned(p, pod=True) for p in self.pods.by_index(OWNER_INDEX, uid)],
            [view_owned(s, pod=False) for s in self.services.by_index(OWNER_INDEX, uid)],
            tensorboard,
            datetime.now(UTC),
        )
