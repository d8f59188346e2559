"""kueue (tests/bench/scale.py): real Kueue (v0.17, `make kueue-build`, tests/support/kueue.py)
on the scale tier, beside torchjob's webhook and reconciler.

Quotas: J jobs of 8 one-CPU workers (--kueue-jobs, 200 by default) from 4 tenants, each tenant's
LocalQueue on a ClusterQueue of its own that holds 8 of its jobs at once (64 CPUs). Each job
runs until all its pods are Running, then RUN_SECONDS more, after which its pods end with code 0
(kwok's stage, as tests/support/scale.py plays it). From the first submission until every job
says Succeeded, against the same jobs without Kueue (no queue, one native PodGroup each); while
the Kueue run goes, every ClusterQueue's reservation is sampled, never to pass its quota, and it
must hold nothing at the end (Kueue's own figures, `status.flavorsReservation`).

Topology: one job of 64 workers of 2 GPUs each (one rack's 16 nodes of 8 GPUs, exactly) asks
Kueue's topology-aware scheduling for one rack (`kueue.x-k8s.io/podset-required-topology` on its
pods, through the job's pod template); the lines say on which racks its pods landed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from support import ControlPlane
from support.bench import admin_client, delete_namespace, in_parallel, new_namespace, sampled, watch
from support.eventually import eventually, eventually_sync
from support.kueue import API_VERSION, MANAGED_LABEL, KueueManager, quota_objects, quota_sample
from support.scale import EXIT_CODE_ANNOTATION, RACK_LABEL
from support.scale_bench import big_job, create_custom_object
from support.scale_many import torchjob_services
from support.scheduling import GPU
from torchjob.api import constants
from torchjob.kube.informer import KubeObject
from torchjob.kube.resources import JOBS, PODS
from torchjob.render.scheduling import KUEUE_QUEUE_LABEL

TENANTS = 4
WORKERS = 8
TENANT_CPU = 64  # each tenant's ClusterQueue: 8 of its jobs at once
RUN_SECONDS = 5.0
USER_CONCURRENCY = 8
QUEUE = "training"
TAS_WORKERS, TAS_GPUS = 64, 2
TAS_PREFIX = "scale-tas"
TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
KUEUE_GROUP, KUEUE_VERSION = API_VERSION.split("/")


def tenant_job(name: str, queue: str | None) -> dict[str, Any]:
    """A torchrun job of WORKERS one-CPU workers (only CPU: the ClusterQueues cover nothing
    else), in `queue` when given."""
    manifest = big_job(name, WORKERS)
    for replica in manifest["spec"]["replicaSpecs"]:
        for container in replica["template"]["spec"]["containers"]:
            container["resources"] = {"requests": {"cpu": "1"}}
    if queue is not None:
        manifest["metadata"].setdefault("labels", {})[KUEUE_QUEUE_LABEL] = queue
    return manifest


class Finisher:
    """Plays the training: once every pod of a job is Running, RUN_SECONDS later each ends with
    code 0; counts the jobs whose status says Succeeded."""

    def __init__(self, user: client.ApiClient, expected: int) -> None:
        self.core = client.CoreV1Api(user)
        self.expected = expected
        self.running: dict[tuple[str, str], set[str]] = {}
        self.finishing: set[tuple[str, str]] = set()
        self.succeeded: set[tuple[str, str]] = set()
        self.tasks: set[asyncio.Task[None]] = set()

    def pod_seen(self, pod: KubeObject) -> None:
        meta = pod["metadata"]
        job = (meta["namespace"], (meta.get("labels") or {}).get(constants.LABEL_JOB_NAME, ""))
        if (pod.get("status") or {}).get("phase") != "Running" or job in self.finishing:
            return
        self.running.setdefault(job, set()).add(meta["name"])
        if len(self.running[job]) == WORKERS:
            self.finishing.add(job)
            task = asyncio.create_task(self._finish(job[0], sorted(self.running[job])))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _finish(self, namespace: str, pods: list[str]) -> None:
        await asyncio.sleep(RUN_SECONDS)
        ended = {"metadata": {"annotations": {EXIT_CODE_ANNOTATION: "0"}}}
        for name in pods:
            try:
                await self.core.patch_namespaced_pod(name, namespace, ended)
            except client.ApiException as error:
                if error.status != 404:  # stopped by the reconciler once the job succeeded
                    raise

    def job_seen(self, job: KubeObject) -> None:
        if (job.get("status") or {}).get("phase") == "Succeeded":
            self.succeeded.add((job["metadata"]["namespace"], job["metadata"]["name"]))


class QuotaSampler:
    """Every ClusterQueue's CPU reservation, sampled while a run goes: the most each held."""

    def __init__(self, user: client.ApiClient) -> None:
        self.objects = client.CustomObjectsApi(user)
        self.most: dict[str, float] = {}
        self.last: dict[str, float] = {}

    async def sample(self) -> None:
        listed = await self.objects.list_cluster_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, "clusterqueues"
        )
        for queue in listed["items"]:
            name = queue["metadata"]["name"]
            reserved = quota_sample(queue.get("status") or {}).reserved_cpu
            self.last[name] = reserved
            self.most[name] = max(self.most.get(name, 0.0), reserved)

    @contextlib.asynccontextmanager
    async def sampling(self) -> AsyncIterator[QuotaSampler]:
        async with sampled(self.sample, 0.5):
            yield self


async def submit_and_finish(
    plane: ControlPlane, namespaces: list[str], jobs: int, queued: bool, timeout: float
) -> tuple[float, QuotaSampler]:
    """Jobs spread over the tenants' namespaces, submitted at once; seconds until every one says
    Succeeded, and the ClusterQueues as sampled meanwhile."""
    async with await admin_client(plane) as user, contextlib.AsyncExitStack() as stack:
        finisher = Finisher(user, jobs)
        for namespace in namespaces:
            await stack.enter_async_context(watch(user, PODS, namespace, finisher.pod_seen))
            await stack.enter_async_context(watch(user, JOBS, namespace, finisher.job_seen))
        sampler = QuotaSampler(user)
        if queued:  # Kueue's API is served only then
            await stack.enter_async_context(sampler.sampling())
        started = time.perf_counter()

        async def submit(index: int) -> None:
            namespace = namespaces[index % len(namespaces)]
            manifest = tenant_job(f"job-{index}", QUEUE if queued else None)
            await create_custom_object(user, JOBS, namespace, manifest)

        await in_parallel(USER_CONCURRENCY, range(jobs), submit)
        await eventually(
            lambda: len(finisher.succeeded) >= jobs,
            "every job to say Succeeded",
            timeout=timeout,
            interval=0.5,
            explain=lambda: f"{len(finisher.succeeded)} of {jobs} Succeeded",
        )
        elapsed = time.perf_counter() - started
        if queued:
            await eventually(
                lambda: _released(sampler), "every ClusterQueue to hold nothing", interval=0.5
            )
    return elapsed, sampler


async def _released(sampler: QuotaSampler) -> bool:
    await sampler.sample()
    return not any(sampler.last.values())


def apply_list(plane: ControlPlane, items: list[dict[str, Any]]) -> None:
    plane.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )


def tenants(plane: ControlPlane, prefix: str, managed: bool) -> list[str]:
    names = [new_namespace(plane, f"{prefix}-{tenant}") for tenant in range(TENANTS)]
    if managed:
        for name in names:
            plane.kubectl("label", "namespace", name, f"{MANAGED_LABEL}=on")
            objects = list(quota_objects(name, str(TENANT_CPU), {name: QUEUE}))
            plane.kubectl(
                "apply",
                "-f",
                "-",
                input=json.dumps({"kind": "List", "apiVersion": "v1", "items": objects}),
            )
    return names


def measure_kueue(plane: ControlPlane, kubeconfig: Path, args: Any, settings: list[str]) -> None:
    jobs = args.kueue_jobs
    print(
        f"\nkueue:      {jobs} torchrun jobs x {WORKERS} one-CPU workers from {TENANTS} tenants, "
        f"each job {RUN_SECONDS:g} s Running; each tenant's ClusterQueue {TENANT_CPU} CPUs",
        flush=True,
    )
    with torchjob_services(plane, kubeconfig, settings):
        namespaces = tenants(plane, "scale-plain", managed=False)
        plain, _ = asyncio.run(submit_and_finish(plane, namespaces, jobs, False, args.timeout))
        print(f"no Kueue:   {plain:7.1f} s from submission to all {jobs} Succeeded", flush=True)
        for name in namespaces:
            delete_namespace(plane, name)
        with contextlib.closing(KueueManager(plane).start()):
            namespaces = tenants(plane, "scale-kueue", managed=True)
            queued, sampler = asyncio.run(
                submit_and_finish(plane, namespaces, jobs, True, args.timeout)
            )
            print(
                f"Kueue:      {queued:7.1f} s from submission to all {jobs} Succeeded, "
                f"{queued / plain:.2f}x the run without it",
                flush=True,
            )
            most = max(sampler.most.values(), default=0.0)
            verdict = "never passed" if most <= TENANT_CPU else "PASSED"
            print(
                f"quota:      the most a ClusterQueue reserved: {most:g} of {TENANT_CPU} CPUs "
                f"({verdict} its quota); all hold nothing at the end",
                flush=True,
            )
            place_in_one_rack(plane)
            for name in namespaces:
                delete_namespace(plane, name)


def topology_objects(namespace: str) -> list[dict[str, Any]]:
    """A Topology of blocks, racks and hosts over the fake nodes, a flavor of it, a ClusterQueue
    covering CPUs and GPUs of that flavor, and a LocalQueue on it in `namespace`."""
    levels = [{"nodeLabel": label} for label in ("cloud.provider.com/topology-block", RACK_LABEL)]
    levels.append({"nodeLabel": "kubernetes.io/hostname"})
    quota = [{"name": name, "nominalQuota": "100000"} for name in ("cpu", GPU)]
    group = {
        "coveredResources": ["cpu", GPU],
        "flavors": [{"name": TAS_PREFIX, "resources": quota}],
    }
    named = {"name": TAS_PREFIX}
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "Topology",
            "metadata": named,
            "spec": {"levels": levels},
        },
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceFlavor",
            "metadata": named,
            "spec": {"nodeLabels": {"type": "kwok"}, "topologyName": TAS_PREFIX},
        },
        {
            "apiVersion": API_VERSION,
            "kind": "ClusterQueue",
            "metadata": named,
            "spec": {"namespaceSelector": {}, "resourceGroups": [group]},
        },
        {
            "apiVersion": API_VERSION,
            "kind": "LocalQueue",
            "metadata": {"name": QUEUE, "namespace": namespace},
            "spec": {"clusterQueue": TAS_PREFIX},
        },
    ]


def rack_job() -> dict[str, Any]:
    """TAS_WORKERS workers of TAS_GPUS GPUs each, all of them in one rack."""
    manifest = big_job("racked", TAS_WORKERS, gpus=TAS_GPUS)
    manifest["metadata"].setdefault("labels", {})[KUEUE_QUEUE_LABEL] = QUEUE
    for replica in manifest["spec"]["replicaSpecs"]:
        template = replica["template"]
        template.setdefault("metadata", {})["annotations"] = {TOPOLOGY_ANNOTATION: RACK_LABEL}
        for container in template["spec"]["containers"]:
            container["resources"] = {"requests": {"cpu": "1"}, "limits": {GPU: str(TAS_GPUS)}}
    return manifest


def place_in_one_rack(plane: ControlPlane) -> None:
    namespace = new_namespace(plane, TAS_PREFIX)
    plane.kubectl("label", "namespace", namespace, f"{MANAGED_LABEL}=on")
    items = topology_objects(namespace)
    plane.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )
    plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(rack_job()))
    started = time.perf_counter()

    def pods() -> list[dict[str, Any]]:
        listed = plane.kubectl("get", "pods", "-n", namespace, "-o", "json")
        return list(json.loads(listed.stdout)["items"])

    def all_running() -> bool:
        found = pods()
        return len(found) == TAS_WORKERS and all(
            p["status"].get("phase") == "Running" for p in found
        )

    eventually_sync(
        all_running, f"the {TAS_WORKERS} racked workers Running", timeout=600, interval=1
    )
    elapsed = time.perf_counter() - started
    nodes = json.loads(plane.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    rack_of = {n["metadata"]["name"]: n["metadata"]["labels"].get(RACK_LABEL) for n in nodes}
    placed = [p["spec"]["nodeName"] for p in pods()]
    racks = sorted({rack_of[node] for node in placed})
    print(
        f"topology:   {TAS_WORKERS} workers x {TAS_GPUS} GPUs asking for one rack: all Running at "
        f"{elapsed:.1f} s on {len(set(placed))} nodes of rack(s) {', '.join(racks)}",
        flush=True,
    )
    delete_namespace(plane, namespace)
    for kind in ("clusterqueue", "resourceflavor", "topology"):
        plane.kubectl("delete", kind, TAS_PREFIX, "--wait=false", check=False)
