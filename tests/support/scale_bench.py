"""What the scale benches share (tests/bench/scale.py): the big torchrun job, a watch of its
pods' progress (created, bound, Running), and the floor, a plain client creating the job's
objects exactly as the reconciler renders them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from support.jobs import JobBuilder
from support.scheduling import GPU
from torchjob.api import constants
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.kube.client import KubeClient
from torchjob.kube.informer import KubeObject
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
# What the reconciler decides on the scale tier, whose apiserver serves native PodGroups.
NATIVE_SERVED = SchedulingSettings(served=frozenset({"native"}))


def big_job(name: str, replicas: int, gpus: int = 0) -> dict[str, Any]:
    """A torchrun job of `replicas` workers that all must start together (minNodes: all), each
    asking for one CPU and `gpus` GPUs."""
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    if gpus:
        resources["limits"] = {GPU: str(gpus)}
    job = (
        JobBuilder.example("torchrun", name).replica_count(replicas).container(resources=resources)
    )
    manifest = job.build()
    manifest["spec"]["torchrunConfig"]["minNodes"] = replicas
    return manifest


class Progress:
    """The pods of a namespace as the bench's watch sees them: when the last one was seen
    created, bound to a node and Running, counted from `started`."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.started = time.perf_counter()
        self.created: set[str] = set()
        self.bound: set[str] = set()
        self.running: set[str] = set()
        self.reached: dict[str, float] = {}
        self.all_running = asyncio.Event()

    def start(self) -> None:
        self.started = time.perf_counter()

    def seen(self, pod: KubeObject) -> None:
        name = pod["metadata"]["name"]
        self.created.add(name)
        if (pod.get("spec") or {}).get("nodeName"):
            self.bound.add(name)
        if (pod.get("status") or {}).get("phase") == "Running":
            self.running.add(name)
        else:
            self.running.discard(name)
        for stage, names in (("created", self.created), ("bound", self.bound)):
            if stage not in self.reached and len(names) >= self.expected:
                self.reached[stage] = time.perf_counter() - self.started
        if not self.all_running.is_set() and len(self.running) >= self.expected:
            self.reached["running"] = time.perf_counter() - self.started
            self.all_running.set()

    def counts(self) -> str:
        return (
            f"{len(self.created)} created, {len(self.bound)} bound, {len(self.running)} Running "
            f"of {self.expected}"
        )

    def stages(self) -> str:
        """When every pod was created, bound and Running, in seconds from the start."""
        return ", ".join(
            f"all {stage} at {self.reached[stage]:.1f} s"
            for stage in ("created", "bound", "running")
            if stage in self.reached
        )


async def in_parallel(
    senders: int, items: Iterable[T], send: Callable[[T], Awaitable[object]]
) -> None:
    """`send` each item, `senders` at a time, each sender taking the next item when done."""
    pending = iter(items)

    async def sender() -> None:
        for item in pending:
            await send(item)

    await asyncio.gather(*(sender() for _ in range(senders)))


async def create_as_reconciler(plain: KubeClient, job: KubeObject, senders: int) -> None:
    """What the reconciler creates for a new job, in its order and bodies: the native PodGroup,
    every replica's Service, then every Pod; `senders` requests in flight at a time."""
    resources = Resources(plain)
    meta = job["metadata"]
    namespace = meta["namespace"]
    spec = PyTorchTrainingJobSpec.from_dict(job["spec"], "spec")
    gang = gang_of(meta, spec, NATIVE_SERVED)
    assert isinstance(gang, Gang) and gang.mode == "native", gang
    group = render_pod_group(meta, gang, owner_reference(meta), shared_priority_class(spec))
    await resources.create(GROUP_RESOURCES["native"], namespace, group)
    replicas = replicas_of(spec)

    async def create_service(replica: Replica) -> None:
        await resources.create(SERVICES, namespace, render_service(meta, replica))

    async def create_pod(replica: Replica) -> None:
        pod = render_pod(meta, spec, replica, {constants.ANNOTATION_BACKOFF_COUNT: "0"})
        decorate_pod(pod, gang, NATIVE_SERVED)
        await resources.create(PODS, namespace, pod)

    await in_parallel(senders, replicas, create_service)
    await in_parallel(senders, replicas, create_pod)
