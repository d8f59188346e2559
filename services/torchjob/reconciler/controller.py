"""The reconciler: informer caches of jobs, pods and services feed a work queue keyed by
job (`JobKey`); `reconcile(key)` reads the caches (never LISTs), asks the pure lifecycle for a
plan and has the executor carry it out."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any

import structlog

from torchjob.api import constants
from torchjob.api.job_api import TRAINING_JOB
from torchjob.api.kubeflow import (
    scheduling_policy,
)
from torchjob.api.model import ModelError
from torchjob.api.trainer import RuntimeRef
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.kube.client import KubeClient
from torchjob.kube.events import EventRecorder
from torchjob.kube.expectations import Expectations, ObjectRef
from torchjob.kube.informer import Informer, controller_uid
from torchjob.kube.reconcile import JobKey, Result, TerminalError
from torchjob.kube.resources import (
    AUTOSCALERS,
    GROUP_RESOURCES,
    NODE_INDEX,
    NODES,
    OWNER_INDEX,
    PODS,
    SERVICES,
    job_resource,
    owner_job_key,
    pod_node,
)
from torchjob.kube.slim import slim_node, slim_pod, slim_service
from torchjob.kube.workqueue import LOW, WorkQueue
from torchjob.lifecycle.failures import retry_delay
from torchjob.lifecycle.kueue import workload_to_release
from torchjob.lifecycle.nodes import NodesSeen, view_node
from torchjob.lifecycle.observe import GroupView, PodView, Refusal, view_group, view_pod
from torchjob.lifecycle.plan import plan
from torchjob.lifecycle.round import Observed
from torchjob.lifecycle.status import is_terminal
from torchjob.reconciler import metrics
from torchjob.reconciler.executor import ReconcilerExecutor
from torchjob.reconciler.runtimes import copy_runtime
from torchjob.reconciler.settings import Settings
from torchjob.render.job_kinds import kind_of, opted_in_settings, served_apis
from torchjob.render.kubeflow import autoscaler_differs
from torchjob.render.replica_objects import owner_reference
from torchjob.render.scheduling import (
    GROUP_KINDS,
    Gang,
    GangUnavailable,
    gang_of,
    with_scheduling_policy,
)

log = structlog.get_logger("torchjob.reconciler")


class Reconciler:
    def __init__(self, api: KubeClient, settings: Settings) -> None:
        self.queue: WorkQueue[JobKey] = WorkQueue()
        self.expectations = Expectations()
        self.events = EventRecorder(api, constants.REPORTER_RECONCILER, settings.identity)
        self.metrics = metrics.JobMetrics()
        self.scheduling = settings.scheduling
        self.executor = ReconcilerExecutor(
            api,
            self.events,
            self.expectations,
            settings.scheduling,
            self.metrics,
            in_flight=settings.workers,
        )
        self.rules = settings.restart_rules()
        # Each job's latest refusal and how many rounds in a row had one; the planner observes
        # the refusal until a round creates without one.
        self.refusals: dict[JobKey, tuple[Refusal, int]] = {}
        # The uid of each deleted job whose pods the cache still shows: Kueue may hold them
        # (lifecycle/kueue.py). Forgotten once none is left.
        self.deleted: dict[JobKey, str] = {}
        self._watch_jobs(api, opted_in_settings(settings))
        self._watch_owned(api, settings.scheduling.served)
        self.node_lost_grace = settings.node_lost_grace
        # Every node, slim (kube/slim.py): a node's change is looked at by the jobs with pods on
        # it, which may be lost with it (lifecycle/nodes.py).
        self.nodes = Informer(
            api,
            NODES,
            on_add=self._node_changed,
            on_update=self._node_updated,
            on_delete=self._node_changed,
            transform=slim_node,
        )
        metrics.COLLECTOR.source = self._cached_jobs

    def _watch_jobs(self, api: KubeClient, opted_in: Collection[str]) -> None:
        """The informers on the jobs of each API served (with `opted_in`, Kubeflow's
        PyTorchJobs too, docs/kubeflow.md), all run as the same jobs, and on the
        HorizontalPodAutoscalers of the kinds that have them."""
        self.job_informers = {
            job_api: Informer(
                api,
                job_resource(job_api),
                on_add=self._job_added,
                on_update=self._job_updated,
                on_delete=self._job_deleted,
            )
            for job_api in served_apis(opted_in)
        }
        # torchjob's own jobs, which the job metrics count.
        self.jobs = self.job_informers[TRAINING_JOB]
        autoscaled = any(kind_of(job_api).autoscaled for job_api in self.job_informers)
        self.autoscalers = (
            Informer(
                api,
                AUTOSCALERS,
                label_selector=constants.LABEL_JOB_NAME,
                indexers={OWNER_INDEX: controller_uid},
                on_add=self._owned_changed,
                on_update=self._autoscaler_updated,
                on_delete=self._owned_changed,
            )
            if autoscaled
            else None
        )

    def _watch_owned(self, api: KubeClient, served: Collection[str]) -> None:
        """The informers on what jobs own: pods, Services and the PodGroups of each kind the
        apiserver serves, indexed by their controlling job's uid."""
        selector = constants.LABEL_JOB_NAME
        indexers = {OWNER_INDEX: controller_uid}
        self.pods = Informer(
            api,
            PODS,
            label_selector=selector,
            indexers={**indexers, NODE_INDEX: pod_node},
            on_add=self._pod_added,
            on_update=self._pod_updated,
            on_delete=self._pod_deleted,
            transform=slim_pod,  # only what the lifecycle reads of a pod
        )
        self.services = Informer(
            api,
            SERVICES,
            label_selector=selector,
            indexers=indexers,
            on_add=self._service_added,
            on_update=self._owned_updated,
            on_delete=self._owned_changed,
            transform=slim_service,
        )
        # The job's PodGroups, of each kind the apiserver serves (render/scheduling.py).
        self.groups = {
            mode: Informer(
                api,
                GROUP_RESOURCES[mode],
                label_selector=selector,
                indexers=indexers,
                on_add=self._group_added,
                on_update=self._owned_updated,
                on_delete=self._owned_changed,
            )
            for mode, kind in GROUP_KINDS.items()
            if mode in served
        }

    def _cached_jobs(self) -> list[dict[str, Any]] | None:
        """Every cached job, once the cache has synced (only a leader's does)."""
        if not self.jobs.synced.is_set():
            return None
        return self.jobs.cached()

    @property
    def informers(self) -> list[Informer]:
        autoscalers = [self.autoscalers] if self.autoscalers is not None else []
        return [
            *self.job_informers.values(),
            *autoscalers,
            self.pods,
            self.services,
            *self.groups.values(),
            self.nodes,
        ]

    # -- event handlers: map every change to its job's key --------------------------------------

    def _job_added(self, job: dict[str, Any]) -> None:
        # A job the cache shows for the first time (a new one, or every job after a start) is
        # served after what changed in running jobs: its round is the long one that creates all
        # it owns, and a status that should say a pod now runs would otherwise wait for all of
        # them (kube/workqueue.py).
        self._job_seen(job)
        self.queue.add(JobKey.of(job), LOW)

    def _job_deleted(self, job: dict[str, Any]) -> None:
        uid = str((job.get("metadata") or {}).get("uid", ""))
        self.metrics.forget(uid)
        self.deleted[JobKey.of(job)] = uid
        self.queue.add(JobKey.of(job))

    def _job_updated(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        caught_up = self._job_seen(new)
        if caught_up or job_update_matters(old, new):
            self.queue.add(JobKey.of(new))

    def _job_seen(self, job: dict[str, Any]) -> bool:
        """The cache shows this version of the job, which may hold a status write of ours a
        reconcile waits for; True when it was the last thing the job's reconcile waited for."""
        version = str((job.get("metadata") or {}).get("resourceVersion") or "")
        return self.expectations.observed_job(JobKey.of(job), version)

    def _pod_added(self, pod: dict[str, Any]) -> None:
        self._created(pod, "pod")

    def _service_added(self, service: dict[str, Any]) -> None:
        self._created(service, "service")

    def _group_added(self, group: dict[str, Any]) -> None:
        self._created(group, "podgroup")

    def _created(self, obj: dict[str, Any], kind: str) -> None:
        key = owner_job_key(obj)
        if key:
            self.expectations.observed_creation(key, ObjectRef(kind, obj["metadata"]["name"]))
            self.queue.add(key)

    def _pod_deleted(self, pod: dict[str, Any]) -> None:
        key = owner_job_key(pod)
        if key:
            self.expectations.observed_deletion(key, ObjectRef("pod", pod["metadata"]["name"]))
            self.queue.add(key)

    def _pod_updated(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        key = owner_job_key(new)
        if key:
            version = str(new["metadata"].get("resourceVersion") or "")
            self.expectations.observed_update(
                key, ObjectRef("pod", new["metadata"]["name"]), version
            )
        if key and new["metadata"].get("deletionTimestamp"):
            # A pod being deleted is no current pod to the planner, so the cache has caught up
            # with its deletion: waiting for it to vanish would wait forever on a pod whose node
            # never confirms it (lifecycle/nodes.py force-deletes it).
            self.expectations.observed_deletion(key, ObjectRef("pod", new["metadata"]["name"]))
        self._owned_changed(new)

    def _node_updated(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        if view_node(old) != view_node(new):
            self._node_changed(new)

    def _node_changed(self, node: dict[str, Any]) -> None:
        """The jobs with pods on the node look again."""
        for pod in self.pods.by_index(NODE_INDEX, node["metadata"]["name"]):
            self._owned_changed(pod)

    def _owned_updated(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self._owned_changed(new)

    def _autoscaler_updated(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        # The autoscaler writes its status every sync; only a change of what we wrote matters.
        if autoscaler_differs(old, new):
            self._owned_changed(new)

    def _owned_changed(self, obj: dict[str, Any]) -> None:
        key = owner_job_key(obj)
        if key:
            self.queue.add(key)

    # -- reconcile -------------------------------------------------------------------------------

    def _cached(self, key: JobKey) -> dict[str, Any] | None:
        """The cached job of `key`, as stored."""
        jobs = self.job_informers.get(key.api)
        return jobs.get(key.namespace, key.name) if jobs is not None else None

    async def reconcile(self, key: JobKey) -> Result:
        # Decoded once a round: the cache keeps each job as JSON (kube/informer.py).
        found = self._cached(key)
        kind = kind_of(key.api)
        runtime = kind.runtime_to_copy(found) if found is not None else None
        if runtime is not None and found is not None:
            return await self._copy_runtime(key, found, runtime)
        # The job as its kind runs it (another API's as the PyTorchTrainingJob that runs it).
        job = kind.run(found) if found is not None else None
        if job is None or (job.get("metadata") or {}).get("deletionTimestamp"):
            self.expectations.forget(key)
            self.refusals.pop(key, None)
            # The garbage collector removes what the job owned, unless Kueue holds it.
            return await self._release_deleted(key, job)
        if not self.expectations.satisfied(key):
            log.debug("waiting for the cache to show our own writes")
            return Result()
        try:
            spec = PyTorchTrainingJobSpec.from_dict(job.get("spec"), "spec")
        except ModelError as error:
            raise TerminalError(f"the stored job does not decode: {error}") from error
        last, in_a_row = self.refusals.get(key, (None, 0))
        observed = self._observe(job, spec, () if last is None else (last,))
        decision = plan(observed, self.rules)
        try:
            refusal = await self.executor.execute(key, job, spec, decision, observed.gang)
        finally:
            # Also when the round fails after its status write (a deletion refused, the
            # apiserver gone): no later watch event would show that write again.
            self._cache_caught_up(key)
        if self.autoscalers is not None and not is_terminal(decision.status):
            await self._autoscaler(key, job)
        if refusal is None:
            if decision.create_pods or decision.create_services:
                self.refusals.pop(key, None)  # what it creates now was not refused
            return Result(requeue_after=decision.requeue_after)
        # The planner decides what the refusal means for the job; its plan's actions were just
        # carried out, so only its status is written.
        refused = plan(dataclasses.replace(observed, refusals=(refusal,)), self.rules)
        try:
            await self.executor.write_refused_status(key, job, decision, refused)
        finally:
            self._cache_caught_up(key)
        if refusal.permanent:
            self.refusals.pop(key, None)
            return Result()
        self.refusals[key] = (refusal, in_a_row + 1)
        retry = retry_delay(in_a_row + 1)
        log.info("retrying the refused creation", job=str(key), retry_in=retry)
        if decision.requeue_after is not None:
            retry = min(retry, decision.requeue_after)
        return Result(requeue_after=retry)

    async def _copy_runtime(self, key: JobKey, job: dict[str, Any], runtime: RuntimeRef) -> Result:
        """Copy the job's runtime into its status (reconciler/runtimes.py); the job is looked at
        again once the cache shows the copy, at once where it already does."""
        if not self.expectations.satisfied(key):
            return Result()
        resources = self.executor.resources
        await copy_runtime(resources, self.events, self.expectations, key, job, runtime)
        shown = self._cached(key)
        return Result(requeue_after=0 if shown and self._job_seen(shown) else None)

    async def _release_deleted(self, key: JobKey, job: dict[str, Any] | None) -> Result:
        """The Kueue Workload of a deleted job's pods, released once Kueue holds one of them
        being deleted, as a running job's is (lifecycle/kueue.py): nothing else lets them go."""
        uid = str(job["metadata"]["uid"]) if job is not None else self.deleted.get(key)
        if uid is None:
            return Result()
        pods = [v for p in self.pods.by_index(OWNER_INDEX, uid) if (v := view_pod(p)) is not None]
        if not pods:
            self.deleted.pop(key, None)
            return Result()
        release = workload_to_release(pods, datetime.now(UTC))
        await self.executor.release_workload(key, key.namespace, release.workload, job)
        return Result(requeue_after=release.recheck_after)

    def _cache_caught_up(self, key: JobKey) -> None:
        """The watch may show our status write before its answer came back, and so before it was
        expected: what the cache shows now counts as seen too. Else the job would wait for a
        write it already shows until its expectations expire (kube/expectations.py)."""
        found = self._cached(key)
        if found is not None:
            self._job_seen(found)

    async def _autoscaler(self, key: JobKey, job: dict[str, Any]) -> None:
        """The HorizontalPodAutoscaler a running job asks for, as its kind renders it (a Kubeflow
        job's elasticPolicy.metrics)."""
        meta = job["metadata"]
        desired = kind_of(key.api).autoscaler(job, owner_reference(meta, key.api))
        if desired is None or self.autoscalers is None:
            return
        current = next((a for a in self.autoscalers.by_index(OWNER_INDEX, meta["uid"])), None)
        if current is None or autoscaler_differs(desired, current):
            await self.executor.ensure_autoscaler(key, job, desired, current)

    def _observe(
        self, job: dict[str, Any], spec: PyTorchTrainingJobSpec, refusals: tuple[Refusal, ...]
    ) -> Observed:
        meta = job["metadata"]
        uid = meta["uid"]
        pods = [v for p in self.pods.by_index(OWNER_INDEX, uid) if (v := view_pod(p)) is not None]
        services = frozenset(
            s["metadata"]["name"] for s in self.services.by_index(OWNER_INDEX, uid)
        )
        gang = gang_of(meta, spec, self.scheduling)
        policy = scheduling_policy(job)
        if policy is not None and isinstance(gang, Gang):
            gang = with_scheduling_policy(gang, policy)
        return Observed.of_json(
            meta,
            spec,
            dict(job.get("status") or {}),
            pods,
            services,
            datetime.now(UTC),
            refusals,
            gang,
            self._group(uid, gang),
            self._nodes_of(pods),
        )

    def _nodes_of(self, pods: list[PodView]) -> NodesSeen:
        """The cached nodes the pods are bound to; a node the cache lacks does not exist."""
        names = {p.node for p in pods if p.node}
        cached = {n: view_node(node) for n in names if (node := self.nodes.get("", n))}
        return NodesSeen(cached, self.node_lost_grace)

    def _group(self, uid: str, gang: Gang | GangUnavailable) -> GroupView | None:
        """The job's own group object in the gang's kind, if the cache shows one."""
        informer = self.groups.get(gang.mode) if isinstance(gang, Gang) else None
        if informer is None or not isinstance(gang, Gang):
            return None
        for group in informer.by_index(OWNER_INDEX, uid):
            if group["metadata"]["name"] == gang.name:
                return view_group(group)
        return None


def job_update_matters(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Our own status writes come back as updates, and so do the progress endpoint's reports
    (every few seconds a job): what matters is a change of spec (metadata.generation moves only
    with it), of annotations (the job's restart scope and deadlines), a deletion, and a job's
    first report, from which its progress deadline runs (lifecycle/no_progress.py; the planner
    then asks to look again at the deadline and reads the later reports then)."""
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    if old.get("spec") != new.get("spec") or new_meta.get("deletionTimestamp"):
        return True
    if old_meta.get("annotations") != new_meta.get("annotations"):
        return True
    return bool((old.get("status") or {}).get("trainerStatus")) != bool(
        (new.get("status") or {}).get("trainerStatus")
    )
