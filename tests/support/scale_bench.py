"""What the scale benches share (tests/bench/scale.py): the big torchrun job, a watch of its
pods' progress (created, bound, Running), and the floor, a plain client creating the job's
objects exactly as the reconciler renders them."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

from kubernetes_asyncio import client

from support.bench import in_parallel
from support.jobs import JobBuilder
from support.processes import ServiceProcess
from support.scheduling import GPU
from torchjob.api import constants
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.kube.client import KubeClient
from torchjob.kube.informer import KubeObject, ResourceKind
from torchjob.kube.resources import GROUP_RESOURCES, PODS, SERVICES
from torchjob.kube.rest import Resources
from torchjob.render.replica_objects import owner_reference, render_pod, render_service
from torchjob.render.scheduling import (
    Gang,
    SchedulingSettings,
    decorate_pod,
    gang_of,
    render_pod_group,
    shared_priority_class,
)
from torchjob.render.topology import Replica, replicas_of

T = TypeVar("T")
Annotations = Mapping[str, str]
# What the reconciler puts on a new job's pods, and on those of its first gang restart: the
# restart charged once, none of the replica's own in a row, the gang restart they are created
# under.
FIRST: Annotations = {constants.ANNOTATION_BACKOFF_COUNT: "0"}
GANG_RESTARTED: Annotations = {
    constants.ANNOTATION_BACKOFF_COUNT: "1",
    constants.ANNOTATION_CONSECUTIVE_RESTARTS: "0",
    constants.ANNOTATION_GANG_RESTARTS: "1",
}
# What the reconciler decides on the scale tier, whose apiserver serves native PodGroups.
NATIVE_SERVED = SchedulingSettings(served=frozenset({"native"}))


def big_job(
    name: str, replicas: int, gpus: int = 0, service_scope: str = constants.SERVICE_SCOPE_REPLICA
) -> dict[str, Any]:
    """A torchrun job of `replicas` workers that all must start together (minNodes: all), each
    asking for one CPU and `gpus` GPUs, named under Services of `service_scope`; a failed worker
    restarts them all (a gang restart), and the job may restart so three times."""
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    if gpus:
        resources["limits"] = {GPU: str(gpus)}
    job = (
        JobBuilder.example("torchrun", name)
        .replica_count(replicas)
        .container(resources=resources)
        .metadata(
            annotations={
                constants.ANNOTATION_RESTART_SCOPE: constants.RESTART_SCOPE_GANG,
                constants.ANNOTATION_SERVICE_SCOPE: service_scope,
            }
        )
        .run_policy(backoffLimit=3)
    )
    manifest = job.build()
    manifest["spec"]["torchrunConfig"]["minNodes"] = replicas
    return manifest


async def create_custom_object(
    user: client.ApiClient, kind: ResourceKind, namespace: str, manifest: dict[str, Any]
) -> Any:
    objects = client.CustomObjectsApi(user)
    return await objects.create_namespaced_custom_object(
        kind.group, kind.version, namespace, kind.plural, manifest
    )


async def until_running(progress: Progress, who: str, what: str, timeout: float) -> float | None:
    """Seconds from the start until every pod is Running, printed with when all were created
    and bound; None (and what was seen) when not within `timeout`."""
    try:
        await asyncio.wait_for(progress.all_running.wait(), timeout)
    except TimeoutError:
        print(f"{who:11} not all Running within {timeout:.0f} s: {progress.counts()}", flush=True)
        return None
    elapsed = progress.reached["running"]
    print(
        f"{who:11} {elapsed:7.1f} s from {what} to all {progress.expected} Running "
        f"({progress.stages()})",
        flush=True,
    )
    return elapsed


class Progress:
    """The pods of a namespace as the bench's watch sees them: when the last one was seen
    created, bound to a node and Running, counted from `start`. After `restart`, only the pods
    created since count, and the old ones are awaited gone."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.uids: dict[str, str] = {}  # by name, every pod there now
        self.old: frozenset[str] = frozenset()
        self.old_left = 0
        self.all_gone = asyncio.Event()
        self.failed = asyncio.Event()  # an old pod was seen Failed
        self.start()

    def start(self) -> None:
        self.started = time.perf_counter()
        self.created: set[str] = set()
        self.bound: set[str] = set()
        self.running: set[str] = set()
        self.reached: dict[str, float] = {}
        self.all_running = asyncio.Event()

    def restart(self) -> None:
        """Every pod there now is old; the clock starts again for their replacements."""
        self.old = frozenset(self.uids.values())
        self.old_left = len(self.old)
        self.start()

    def seen(self, pod: KubeObject) -> None:
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        self.uids[name] = uid
        phase = (pod.get("status") or {}).get("phase")
        if uid in self.old:
            if phase == "Failed":
                self.failed.set()
            return
        self.created.add(name)
        if (pod.get("spec") or {}).get("nodeName"):
            self.bound.add(name)
        if phase == "Running":
            self.running.add(name)
        else:
            self.running.discard(name)
        for stage, names in (("created", self.created), ("bound", self.bound)):
            if stage not in self.reached and len(names) >= self.expected:
                self.reached[stage] = time.perf_counter() - self.started
        if not self.all_running.is_set() and len(self.running) >= self.expected:
            self.reached["running"] = time.perf_counter() - self.started
            self.all_running.set()

    def gone(self, pod: KubeObject) -> None:
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        if self.uids.get(name) == uid:
            del self.uids[name]
        if uid in self.old:
            self.old_left -= 1
            if not self.old_left:
                self.all_gone.set()

    def counts(self) -> str:
        return (
            f"{len(self.created)} created, {len(self.bound)} bound, {len(self.running)} Running "
            f"of {self.expected}, {self.old_left} old pods left"
        )

    def stages(self) -> str:
        """When every pod was created, bound and Running, in seconds from the start."""
        return ", ".join(
            f"all {stage} at {self.reached[stage]:.1f} s"
            for stage in ("created", "bound", "running")
            if stage in self.reached
        )


class StatusTimes:
    """When the bench's watches saw each pod Running, and each job's status show that replica
    Running: the reconciler's status latency, pod by pod."""

    def __init__(self) -> None:
        self.pod_running: dict[str, float] = {}
        self.shown_running: dict[str, float] = {}

    def pod_seen(self, pod: KubeObject) -> None:
        name = pod["metadata"]["name"]
        if (pod.get("status") or {}).get("phase") == "Running" and name not in self.pod_running:
            self.pod_running[name] = time.perf_counter()

    def job_seen(self, job: KubeObject) -> None:
        now = time.perf_counter()
        for task in (job.get("status") or {}).get("tasks") or []:
            for replica in task.get("replicas") or []:
                name = replica.get("name")
                if replica.get("phase") == "Running" and name not in self.shown_running:
                    self.shown_running[name] = now

    def latencies(self) -> list[float]:
        """Seconds from each pod seen Running until its job's status was seen showing it."""
        return [
            shown - self.pod_running[name]
            for name, shown in self.shown_running.items()
            if name in self.pod_running
        ]


def alive(process: ServiceProcess) -> bool:
    return process.process is not None and process.process.poll() is None


def close_reporting_exit(process: ServiceProcess) -> None:
    """Stop the service; one that had exited by itself says so, with its log's last lines (the
    log is removed with it)."""
    if process.process is not None and not alive(process):
        print(
            f"{process.module} had exited with code {process.process.returncode}; its log ends:\n"
            f"{process.log_tail(40)}",
            file=sys.stderr,
            flush=True,
        )
    process.close()


def reconcile_times(reconciler: ServiceProcess) -> str:
    """How long the reconciler's reconciles took since it started, from its histogram."""
    metric = "torchjob_reconcile_duration_seconds"
    buckets = reconciler.samples(f"{metric}_bucket")
    count = sum(reconciler.samples(f"{metric}_count").values())
    total = sum(reconciler.samples(f"{metric}_sum").values())

    def over(seconds: str) -> float:
        return count - sum(v for k, v in buckets.items() if f'le="{seconds}"' in k)

    return (
        f"{count:.0f} reconciles took {total:.1f} s in all, {over('1.0'):.0f} of them over "
        f"1 s, {over('10.0'):.0f} over 10 s"
    )


class ServiceExited(RuntimeError):
    pass


async def while_alive(process: ServiceProcess, work: Awaitable[T]) -> T:
    """`work`, unless the service exits first: then ServiceExited, and `work` is cancelled."""
    task = asyncio.ensure_future(work)
    while not task.done():
        if not alive(process):
            task.cancel()
            raise ServiceExited(f"{process.module} exited")
        await asyncio.wait({task}, timeout=1.0)
    return task.result()


async def create_as_reconciler(plain: KubeClient, job: KubeObject, senders: int) -> None:
    """What the reconciler creates for a new job, in its order and bodies: the native PodGroup,
    every Service (one per replica, or the job's), then every Pod; `senders` requests in flight
    at a time."""
    resources = Resources(plain)
    meta = job["metadata"]
    namespace = meta["namespace"]
    spec = PyTorchTrainingJobSpec.from_dict(job["spec"], "spec")
    gang = gang_of(meta, spec, NATIVE_SERVED)
    assert isinstance(gang, Gang) and gang.mode == "native", gang
    group = render_pod_group(meta, gang, owner_reference(meta), shared_priority_class(spec))
    await resources.create(GROUP_RESOURCES["native"], namespace, group)
    replicas = replicas_of(spec)

    services = {s["metadata"]["name"]: s for s in (render_service(meta, r) for r in replicas)}

    async def create_service(service: KubeObject) -> None:
        await resources.create(SERVICES, namespace, service)

    await in_parallel(senders, list(services.values()), create_service)
    await in_parallel(senders, replicas, lambda r: create_pod(resources, job, gang, r, FIRST))


async def create_pod(
    resources: Resources, job: KubeObject, gang: Gang, replica: Replica, annotations: Annotations
) -> None:
    meta = job["metadata"]
    spec = PyTorchTrainingJobSpec.from_dict(job["spec"], "spec")
    pod = render_pod(meta, spec, replica, dict(annotations))
    decorate_pod(pod, gang, NATIVE_SERVED)
    await resources.create(PODS, meta["namespace"], pod)


async def restart_as_reconciler(
    plain: KubeClient, job: KubeObject, progress: Progress, senders: int
) -> None:
    """What the reconciler does for a full-gang restart once it sees a pod Failed: every pod
    deleted (its uid as precondition), then, once all are gone, every replacement created."""
    resources = Resources(plain)
    namespace = job["metadata"]["namespace"]
    await progress.failed.wait()
    old = sorted(progress.uids.items())
    await in_parallel(
        senders, old, lambda pod: resources.delete(PODS, namespace, pod[0], uid=pod[1])
    )
    await progress.all_gone.wait()
    spec = PyTorchTrainingJobSpec.from_dict(job["spec"], "spec")
    gang = gang_of(job["metadata"], spec, NATIVE_SERVED)
    assert isinstance(gang, Gang)
    await in_parallel(
        senders,
        replicas_of(spec),
        lambda r: create_pod(resources, job, gang, r, GANG_RESTARTED),
    )
