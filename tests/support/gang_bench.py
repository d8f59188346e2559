"""What tests/bench/gang_restart.py's runs share: the gang's job, its pods as a watch shows them
(until every one is replaced), the kubelet the bench plays (and, for restarts in place, each pod's
restart agent), and the status it checks afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, TypeVar

from kubernetes_asyncio import client

from support.bench import in_parallel
from support.eventually import eventually
from support.jobs import JobBuilder
from support.kubelet import TestKubelet
from torchjob.api import constants, types
from torchjob.kube.informer import KubeObject
from torchjob.render.in_place import AGENT, RESTARTED_ALL_REASON

JOB_NAME = "gang"
TINY = {"requests": {"cpu": "1m", "memory": "1Mi"}}
KUBELET_CONCURRENCY = 16
SETUP_TIMEOUT = 900.0
SANITY_TIMEOUT = 30.0
T = TypeVar("T")


def job_manifest(replicas: int) -> dict[str, Any]:
    """Workers of a plain (not torchrun) job, restarted as a gang; backoffLimit allows the one."""
    return (
        JobBuilder.example("basic", JOB_NAME)
        .replica_count(replicas)
        .metadata(annotations={constants.ANNOTATION_RESTART_SCOPE: constants.RESTART_SCOPE_GANG})
        .container(resources=TINY)
        .run_policy(backoffLimit=3)
        .build()
    )


async def create_job(user: client.ApiClient, namespace: str, replicas: int) -> dict[str, Any]:
    objects = client.CustomObjectsApi(user)
    job: dict[str, Any] = await objects.create_namespaced_custom_object(
        types.GROUP, types.VERSION, namespace, types.PLURAL, job_manifest(replicas)
    )
    return job


def container_names(replicas: int) -> list[str]:
    (spec,) = job_manifest(replicas)["spec"]["replicaSpecs"]
    return [container["name"] for container in spec["template"]["spec"]["containers"]]


class GangWatch:
    """The job's pods as the bench's watch shows them: their uids by name, whether R of them
    exist, and, after `fail`, when R pods with uids not seen before the failure exist and none of
    the old ones is left."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.uids: dict[str, str] = {}
        self.old: frozenset[str] | None = None
        self.all_exist = asyncio.Event()
        self.replaced = asyncio.Event()
        self.replaced_at = 0.0

    def seen(self, pod: KubeObject) -> None:
        self.uids[pod["metadata"]["name"]] = pod["metadata"]["uid"]
        self._check()

    def gone(self, pod: KubeObject) -> None:
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        if self.uids.get(name) == uid:
            del self.uids[name]
        self._check()

    def fail(self) -> float:
        """Every pod there now is old; the clock starts."""
        self.old = frozenset(self.uids.values())
        return time.perf_counter()

    def counts(self) -> tuple[int, int]:
        """New pods and old pods there now."""
        old = self.old or frozenset()
        left = sum(1 for uid in self.uids.values() if uid in old)
        return len(self.uids) - left, left

    def _check(self) -> None:
        if len(self.uids) >= self.expected:
            self.all_exist.set()
        if self.old is None or self.replaced.is_set():
            return
        new, left = self.counts()
        if new >= self.expected and not left:
            self.replaced_at = time.perf_counter()
            self.replaced.set()


class JobWatch:
    """The job as the bench's watch last showed it."""

    def __init__(self) -> None:
        self.job: KubeObject = {}

    def seen(self, job: KubeObject) -> None:
        self.job = job

    def status(self) -> dict[str, Any]:
        return dict(self.job.get("status") or {})


async def until_replaced(pods: GangWatch, started: float, timeout: float) -> float | None:
    """Seconds from `started` until the gang was replaced; None, and what was seen, if it was
    not within `timeout`."""
    try:
        await asyncio.wait_for(pods.replaced.wait(), timeout)
    except TimeoutError:
        new, left = pods.counts()
        print(
            f"            not replaced within {timeout:.0f} s: {new} new pods, "
            f"{left} old ones left",
            flush=True,
        )
        return None
    return pods.replaced_at - started


async def play_kubelet_until_running(
    user: client.ApiClient,
    namespace: str,
    pods: GangWatch,
    job: JobWatch,
    replicas: int,
) -> TestKubelet:
    """Once every pod exists, every one is marked Running; returns once the job's status says
    Running."""
    await asyncio.wait_for(pods.all_exist.wait(), SETUP_TIMEOUT)
    kubelet = TestKubelet(user, namespace)
    containers = container_names(replicas)
    await in_parallel(
        KUBELET_CONCURRENCY,
        sorted(pods.uids),
        lambda name: kubelet.run_containers(name, containers),
    )
    await eventually(
        lambda: job.status().get("phase") == "Running",
        "the job's status to say Running",
        timeout=SETUP_TIMEOUT,
        interval=0.2,
        explain=lambda: job.status().get("phase"),
    )
    return kubelet


async def print_sanity(job: JobWatch) -> None:
    def shown() -> bool:
        status = job.status()
        return bool(status.get("backoffCount")) and bool(status.get("gangRestarts"))

    with contextlib.suppress(AssertionError, TimeoutError):
        await eventually(shown, "the restart in the status", timeout=SANITY_TIMEOUT, interval=0.2)
    status = job.status()
    print(
        f"status:     backoffCount {status.get('backoffCount', 'absent')}, gangRestarts "
        f"{status.get('gangRestarts', 'absent')} after the restart (expected 1 and 1)",
        flush=True,
    )


class RestartAgents:
    """Plays every pod's restart agent and kubelet for restarts in place (render/in_place.py): a
    pod whose restarts-asked annotation is above its agent's restartCount has every container
    restarted, reported as the kubelet reports it (the agent's restartCount raised to the ask,
    each container's by one, its last state RestartingAllContainers). After `fail`, `restarted`
    is set once every pod of the gang has done so."""

    def __init__(self, core: client.CoreV1Api, namespace: str, expected: int) -> None:
        self.core, self.namespace, self.expected = core, namespace, expected
        self.done: set[str] = set()
        self.failed = False
        self.restarted = asyncio.Event()
        self.restarted_at = 0.0
        self._tasks: set[asyncio.Task[None]] = set()
        self._asked: dict[str, int] = {}

    def seen(self, pod: KubeObject) -> None:
        meta = pod["metadata"]
        asked = int((meta.get("annotations") or {}).get(constants.ANNOTATION_RESTARTS_ASKED, "0"))
        if asked <= agent_restarts(pod):
            if asked and self.failed:
                self.done.add(meta["name"])
                if len(self.done) >= self.expected and not self.restarted.is_set():
                    self.restarted_at = time.perf_counter()
                    self.restarted.set()
            return
        if self._asked.get(meta["name"], 0) >= asked:
            return  # under way
        self._asked[meta["name"]] = asked
        task = asyncio.create_task(self._restart(pod, asked))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _restart(self, pod: KubeObject, asked: int) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ended = {"exitCode": 137, "reason": RESTARTED_ALL_REASON, "finishedAt": now}
        containers = [
            container_status(s["name"], s.get("restartCount", 0) + 1, now, ended)
            for s in (pod.get("status") or {}).get("containerStatuses") or []
        ]
        agent = container_status(AGENT, asked, now, ended)
        status = {"initContainerStatuses": [agent], "containerStatuses": containers}
        meta = pod["metadata"]
        body = {"metadata": {"uid": meta["uid"]}, "status": status}
        with contextlib.suppress(client.ApiException):
            await self.core.patch_namespaced_pod_status(meta["name"], self.namespace, body)

    async def fail_in_place(self, name: str) -> float:
        """The training container of pod `name` exits 1 and its rule restarts it where it
        stands; the clock starts."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ended = {"exitCode": 1, "reason": "Error", "startedAt": now, "finishedAt": now}
        pod = await self.core.read_namespaced_pod(name, self.namespace)
        containers = [container_status(c.name, 1, now, ended) for c in pod.spec.containers]
        self.failed = True
        started = time.perf_counter()
        body = {"status": {"containerStatuses": containers}}
        await self.core.patch_namespaced_pod_status(name, self.namespace, body)
        return started


def agent_restarts(pod: KubeObject) -> int:
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if status.get("name") == AGENT:
            return int(status.get("restartCount") or 0)
    return 0


def container_status(name: str, restarts: int, now: str, ended: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "ready": True,
        "restartCount": restarts,
        "image": "i",
        "imageID": "",
        "state": {"running": {"startedAt": now}},
        "lastState": {"terminated": ended},
    }
