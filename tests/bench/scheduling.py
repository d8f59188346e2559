"""Gang scheduling: how long jobs take to be placed, with and without native PodGroups.

Everything is real but the nodes: a control plane whose apiserver serves Kubernetes' own
PodGroups (scheduling.k8s.io/v1beta1, GenericWorkload), the real kube-scheduler with that feature
gate, and the webhook and the reconciler as processes, as production runs them. The nodes are
fake (Node objects with GPUs and no kubelet); the bench plays the kubelet where pods must run.
Pods go straight to the scheduler: no scheduling gate holds them back.

Placement. For each mode, in a namespace of its own, the bench submits J jobs of R one-GPU
replicas (eight submissions at a time) onto nodes of R GPUs, one node per job, so that every
replica fits. It times, from its first submission, until its own watch of the pods has seen every
replica bound to a node (spec.nodeName set), and per job from that job's submission until its
last replica is bound. Beside these, when the watch saw the last pod created, and per pod the
time from seen created to seen bound: what waiting for the scheduler adds to the reconciler's
pace of creation. The modes:
- none: each job's annotation batch.tensorstack.dev/gang-scheduling: none; pods are placed one
  by one, as the default scheduler places them. This is what native is measured against.
- native: the reconciler's default on this control plane: a PodGroup per job, created before its
  pods, which kube-scheduler binds together or not at all.
The figure is the ratio native / none: what placing each job whole costs when GPUs are plenty.
A warm-up job of each mode is placed first, so that neither mode pays for a cold start.

Contention. Capacity for one job only (one node of R GPUs) and 3 jobs (--contended-jobs)
submitted at once. The bench plays the kubelet: it runs every pod bound to the node and, once all
of a job's replicas run, ends them with exit code 0, as a training that has finished; the job then
Succeeds and frees its GPUs for the next. Native: the time from the first submission until all 3
jobs Succeeded. None: whether the jobs all Succeeded within a limit (--limit, 120 s); if not, the
pods of each job bound at the end: jobs each holding part of the GPUs, none of them able to start,
is a deadlock.

Prints figures; the exit status says nothing about them.

    .venv/bin/python tests/bench/scheduling.py                 # 20 jobs x 4 replicas
    .venv/bin/python tests/bench/scheduling.py --jobs 5        # a quick check
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config

from torchjob.api import constants, types
from torchjob.kube.informer import Informer, KubeObject, ResourceKind
from torchjob.kube.resources import JOBS, PODS
from torchjob.runtime import logging as runtime_logging

TESTS_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS_DIR))

from support import ControlPlane  # noqa: E402
from support.bench import print_machine  # noqa: E402
from support.informers import client_like, running  # noqa: E402
from support.kubelet import TestKubelet  # noqa: E402
from support.operator import (  # noqa: E402
    OPT_IN_LABEL,
    reconciler_kubeconfig,
    start_reconciler,
    start_webhook,
    stop_webhook,
    wait_until_admitting,
)
from support.scheduling import (  # noqa: E402
    GENERIC_WORKLOAD_GATE,
    add_gpu_nodes,
    gang_control_plane,
    gpu_job,
)
from support.stats import percentile  # noqa: E402

SCHEDULER = "bench-scheduler"
MODES = ("none", "native")
USER_CONCURRENCY = 8
PLACEMENT_TIMEOUT = 600.0
CLEANUP_TIMEOUT = 60.0


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=20, help="jobs placed in each mode")
    p.add_argument("--replicas", type=int, default=4, help="one-GPU replicas per job")
    p.add_argument("--contended-jobs", type=int, default=3, help="jobs sharing one job's GPUs")
    p.add_argument(
        "--limit", type=float, default=120.0, help="seconds the contended jobs get to succeed"
    )
    return p.parse_args()


# -- the cluster ---------------------------------------------------------------------------------


def new_namespace(plane: ControlPlane, name: str) -> str:
    plane.kubectl("create", "namespace", name)
    plane.kubectl("label", "namespace", name, f"{OPT_IN_LABEL}=on")
    wait_until_admitting(plane, name)
    return name


def clean_up(plane: ControlPlane, namespace: str) -> None:
    """Jobs first, so that nothing creates pods again; then the pods, forcibly: a pod bound to a
    node is deleted gracefully by its kubelet, and these nodes have none. Returns once the
    namespace has no pods left, so that their GPUs are free for what comes next."""
    plane.kubectl("delete", "pytorchtrainingjobs", "--all", "-n", namespace, "--timeout=60s")
    deadline = time.monotonic() + CLEANUP_TIMEOUT
    while True:
        plane.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force")
        left = plane.kubectl("get", "pods", "-n", namespace, "-o", "name").stdout.strip()
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    plane.kubectl("delete", "namespace", namespace, "--wait=false")


def delete_nodes(plane: ControlPlane, names: list[str]) -> None:
    plane.kubectl("delete", "nodes", *names)


def job_manifest(name: str, replicas: int, mode: str) -> dict[str, Any]:
    """A torchrun job of one-GPU workers placed by the bench's kube-scheduler; with mode none,
    the job opts out of gang scheduling. Its pods go straight to the scheduler."""
    annotations = {constants.ANNOTATION_GANG_SCHEDULING: "none"} if mode == "none" else {}
    manifest = gpu_job(name, replicas, SCHEDULER, annotations)
    for replica_spec in manifest["spec"]["replicaSpecs"]:
        del replica_spec["template"]["spec"]["schedulingGates"]
    return manifest


async def admin_client(plane: ControlPlane) -> client.ApiClient:
    return await config.new_client_from_config(
        config_file=str(plane.kubeconfig), persist_config=False
    )


async def submit(
    api: client.ApiClient, namespace: str, manifests: list[dict[str, Any]]
) -> dict[str, float]:
    """Create every job, USER_CONCURRENCY at a time; when each creation was sent, by job."""
    objects = client.CustomObjectsApi(api)
    pending = iter(manifests)
    sent: dict[str, float] = {}

    async def submitter() -> None:
        for manifest in pending:
            sent[manifest["metadata"]["name"]] = time.perf_counter()
            await objects.create_namespaced_custom_object(
                types.GROUP, types.VERSION, namespace, types.PLURAL, manifest
            )

    await asyncio.gather(*(submitter() for _ in range(USER_CONCURRENCY)))
    return sent


# -- watching ------------------------------------------------------------------------------------


class Watched:
    """The objects of one namespace as the bench's own watch shows them, when each pod was
    first seen bound to a node, and an event set after every change."""

    def __init__(self) -> None:
        self.objects: dict[str, KubeObject] = {}
        self.seen_at: dict[str, float] = {}
        self.bound_at: dict[str, float] = {}
        self.changed = asyncio.Event()

    def seen(self, obj: KubeObject) -> None:
        name = obj["metadata"]["name"]
        self.objects[name] = obj
        self.seen_at.setdefault(name, time.perf_counter())
        if obj.get("spec", {}).get("nodeName") and name not in self.bound_at:
            self.bound_at[name] = time.perf_counter()
        self.changed.set()

    def gone(self, obj: KubeObject) -> None:
        self.objects.pop(obj["metadata"]["name"], None)
        self.changed.set()

    async def until(self, check: Callable[[], bool], timeout: float) -> bool:
        """Wait until `check()` is true after a change; False if it is not within `timeout`."""
        deadline = time.perf_counter() + timeout
        while True:
            self.changed.clear()
            if check():
                return True
            left = deadline - time.perf_counter()
            if left <= 0:
                return False
            await changed_or_timeout(self.changed, min(left, 1.0))


async def changed_or_timeout(changed: asyncio.Event, timeout: float) -> None:
    """Until `changed` is set or `timeout` passes. Not asyncio.wait_for: on Python 3.11 it can
    swallow the cancellation of a task whose wait ends at the same moment."""
    waiter = asyncio.ensure_future(changed.wait())
    try:
        await asyncio.wait({waiter}, timeout=timeout)
    finally:
        waiter.cancel()


@contextlib.asynccontextmanager
async def watch(
    api: client.ApiClient, kind: ResourceKind, namespace: str, watched: Watched
) -> AsyncIterator[Informer]:
    async with client_like(api) as ours:
        informer = Informer(
            ours,
            kind,
            namespace=namespace,
            on_add=watched.seen,
            on_update=lambda _, new: watched.seen(new),
            on_delete=watched.gone,
        )
        async with running(informer, sync_timeout=60) as started:
            yield started


def job_of(pod: KubeObject) -> str:
    return str(pod["metadata"].get("labels", {}).get(constants.LABEL_JOB_NAME, "?"))


# -- placement -----------------------------------------------------------------------------------


@dataclass
class Placement:
    mode: str
    pods: int
    total: float = float("nan")
    per_job: list[float] = field(default_factory=list)
    bound: int = 0
    created: float = float("nan")
    per_pod: list[float] = field(default_factory=list)


async def place(
    plane: ControlPlane, namespace: str, mode: str, jobs: int, replicas: int
) -> Placement:
    """Submit the jobs and time until every replica is bound."""
    names = [f"job-{index:03d}" for index in range(jobs)]
    result = Placement(mode, jobs * replicas)
    pods = Watched()
    async with await admin_client(plane) as api, watch(api, PODS, namespace, pods):
        sent = await submit(api, namespace, [job_manifest(n, replicas, mode) for n in names])
        await pods.until(lambda: len(pods.bound_at) >= result.pods, PLACEMENT_TIMEOUT)
        result.bound = len(pods.bound_at)
        if result.bound < result.pods:
            return result
        result.total = max(pods.bound_at.values()) - min(sent.values())
        last_bound: dict[str, float] = {}
        for pod_name, when in pods.bound_at.items():
            job = job_of(pods.objects[pod_name])
            last_bound[job] = max(last_bound.get(job, 0.0), when)
        result.per_job = [last_bound[name] - sent[name] for name in names]
        result.created = max(pods.seen_at.values()) - min(sent.values())
        result.per_pod = [when - pods.seen_at[name] for name, when in pods.bound_at.items()]
    return result


def measure_placement(plane: ControlPlane, args: argparse.Namespace) -> None:
    nodes = add_gpu_nodes(plane, "wide", count=args.jobs, gpus=args.replicas)
    for mode in MODES:
        warm_up = new_namespace(plane, f"bench-warm-up-{mode}")
        asyncio.run(place(plane, warm_up, mode, 1, args.replicas))
        clean_up(plane, warm_up)
    print()
    print(
        f"placement: {args.jobs} jobs x {args.replicas} one-GPU replicas, submitted "
        f"{USER_CONCURRENCY} at a time, on {len(nodes)} nodes of {args.replicas} GPUs "
        f"({args.jobs * args.replicas} GPUs: room for all)"
    )
    results: dict[str, Placement] = {}
    for mode in MODES:
        namespace = new_namespace(plane, f"bench-place-{mode}")
        results[mode] = result = asyncio.run(
            place(plane, namespace, mode, args.jobs, args.replicas)
        )
        clean_up(plane, namespace)
        if result.bound < result.pods:
            print(
                f"  {mode:<7} only {result.bound} of {result.pods} pods bound within "
                f"{PLACEMENT_TIMEOUT:.0f} s",
                flush=True,
            )
            continue
        p50, p99 = percentile(result.per_job, 50), percentile(result.per_job, 99)
        print(
            f"  {mode:<7} {result.total:6.2f} s from the first submission until all "
            f"{result.pods} pods are bound; per job, submission to last replica bound: "
            f"p50 {p50:.2f} s, p99 {p99:.2f} s",
        )
        p50, p99 = percentile(result.per_pod, 50), percentile(result.per_pod, 99)
        print(
            f"  {'':<7} of which the last pod was created at {result.created:6.2f} s; per pod, "
            f"seen created -> seen bound: p50 {p50:.2f} s, p99 {p99:.2f} s",
            flush=True,
        )
    none, native = results["none"], results["native"]
    if none.per_job and native.per_job:
        print(
            f"  native / none: total {native.total / none.total:.2f}x, per-job p50 "
            f"{percentile(native.per_job, 50) / percentile(none.per_job, 50):.2f}x, p99 "
            f"{percentile(native.per_job, 99) / percentile(none.per_job, 99):.2f}x"
        )
    delete_nodes(plane, nodes)


# -- contention ----------------------------------------------------------------------------------


@dataclass
class Contention:
    mode: str
    jobs: list[str]
    succeeded_at: dict[str, float] = field(default_factory=dict)
    bound: dict[str, int] = field(default_factory=dict)
    running: dict[str, int] = field(default_factory=dict)
    elapsed: float = float("nan")


class Kubelet:
    """Plays the kubelet of the fake nodes: runs every pod bound to one, and ends a job's pods
    with exit code 0 once all its replicas run."""

    def __init__(self, api: client.ApiClient, namespace: str, replicas: int) -> None:
        self.kubelet = TestKubelet(api, namespace)
        self.replicas = replicas
        self.started: set[str] = set()
        self.finished: set[str] = set()

    async def act(self, pods: dict[str, KubeObject]) -> None:
        for name, pod in sorted(pods.items()):
            phase = (pod.get("status") or {}).get("phase")
            if pod["spec"].get("nodeName") and phase == "Pending" and name not in self.started:
                self.started.add(name)
                await self.tolerate_gone(self.kubelet.run(name))
        by_job: dict[str, list[KubeObject]] = {}
        for pod in pods.values():
            by_job.setdefault(job_of(pod), []).append(pod)
        for mine in by_job.values():
            names = sorted((p["metadata"]["name"] for p in mine), reverse=True)  # worker-0 last
            running = [p for p in mine if (p.get("status") or {}).get("phase") == "Running"]
            if len(running) == self.replicas and not set(names) & self.finished:
                for name in names:
                    self.finished.add(name)
                    await self.tolerate_gone(self.kubelet.finish(name, 0))

    @staticmethod
    async def tolerate_gone(patch: Coroutine[Any, Any, None]) -> None:
        """A pod deleted meanwhile has nothing left to run or end."""
        try:
            await patch
        except client.ApiException as error:
            if error.status != 404:
                raise


async def contend(
    plane: ControlPlane, namespace: str, mode: str, jobs: int, replicas: int, limit: float
) -> Contention:
    names = [f"job-{index}" for index in range(jobs)]
    result = Contention(mode, names)
    pods, job_objects = Watched(), Watched()
    async with contextlib.AsyncExitStack() as stack:
        api = await stack.enter_async_context(await admin_client(plane))
        await stack.enter_async_context(watch(api, PODS, namespace, pods))
        await stack.enter_async_context(watch(api, JOBS, namespace, job_objects))
        kubelet = Kubelet(api, namespace, replicas)
        # One event for both watches: the kubelet acts on any change.
        job_objects.changed = pods.changed

        def all_succeeded() -> bool:
            now = time.perf_counter()
            for name, job in job_objects.objects.items():
                phase = (job.get("status") or {}).get("phase")
                if phase == "Succeeded" and name not in result.succeeded_at:
                    result.succeeded_at[name] = now
            return len(result.succeeded_at) == jobs

        async def kubelet_loop() -> None:
            while True:
                pods.changed.clear()
                await kubelet.act(dict(pods.objects))
                await changed_or_timeout(pods.changed, 1.0)

        sent = await submit(api, namespace, [job_manifest(n, replicas, mode) for n in names])
        started = min(sent.values())
        playing = asyncio.create_task(kubelet_loop())
        try:
            done = await wait_until(all_succeeded, started + limit)
        finally:
            playing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await playing
        if done:
            result.elapsed = max(result.succeeded_at.values()) - started
        for pod in pods.objects.values():
            job = job_of(pod)
            if pod["spec"].get("nodeName"):
                result.bound[job] = result.bound.get(job, 0) + 1
            if (pod.get("status") or {}).get("phase") == "Running":
                result.running[job] = result.running.get(job, 0) + 1
        result.succeeded_at = {n: t - started for n, t in result.succeeded_at.items()}
    return result


async def wait_until(check: Callable[[], bool], deadline: float) -> bool:
    while not check():
        if time.perf_counter() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def measure_contention(plane: ControlPlane, args: argparse.Namespace) -> None:
    nodes = add_gpu_nodes(plane, "narrow", count=1, gpus=args.replicas)
    print()
    print(
        f"contention: {args.contended_jobs} jobs x {args.replicas} one-GPU replicas submitted "
        f"at once, on one node of {args.replicas} GPUs (room for one job at a time); the bench "
        f"runs the pods bound and ends a job once all its replicas run; limit {args.limit:.0f} s"
    )
    for mode in ("native", "none"):
        namespace = new_namespace(plane, f"bench-contend-{mode}")
        result = asyncio.run(
            contend(plane, namespace, mode, args.contended_jobs, args.replicas, args.limit)
        )
        clean_up(plane, namespace)
        order = ", ".join(
            f"{name} at {when:.2f} s"
            for name, when in sorted(result.succeeded_at.items(), key=lambda item: item[1])
        )
        if len(result.succeeded_at) == len(result.jobs):
            print(
                f"  {mode:<7} all {len(result.jobs)} jobs Succeeded {result.elapsed:6.2f} s after "
                f"the first submission ({order})",
                flush=True,
            )
            continue
        held = ", ".join(
            f"{name} {result.bound.get(name, 0)}/{args.replicas} bound "
            f"({result.running.get(name, 0)} running)"
            for name in result.jobs
            if name not in result.succeeded_at
        )
        stuck = sum(result.bound.get(name, 0) for name in result.jobs)
        verdict = (
            "deadlocked"
            if stuck >= args.replicas
            and all(result.bound.get(n, 0) < args.replicas for n in result.jobs)
            else "not finished"
        )
        print(
            f"  {mode:<7} {verdict}: {len(result.succeeded_at)} of {len(result.jobs)} jobs "
            f"Succeeded within {args.limit:.0f} s{f' ({order})' if order else ''}; at the end: "
            f"{held}",
            flush=True,
        )
    delete_nodes(plane, nodes)


# -- main ----------------------------------------------------------------------------------------


def main() -> None:
    args = parse()
    runtime_logging.configure("bench", "WARNING")  # the bench's own watches: problems only
    # SIGTERM unwinds like Ctrl-C, through the clean-up of every process and directory.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    print_machine()
    with gang_control_plane(SCHEDULER) as plane:
        served = plane.kubectl("api-resources", "--api-group=scheduling.k8s.io", "-o", "name")
        print(
            f"served:  {', '.join(served.stdout.split())}; kube-scheduler {GENERIC_WORKLOAD_GATE}"
        )
        webhook = start_webhook(plane)
        try:
            # The chart's default gang setting (auto): native here, since PodGroups are served.
            settings = ("--lease-name", "bench", "--log-level", "INFO")
            reconciler = start_reconciler(plane, reconciler_kubeconfig(plane), "bench", *settings)
            try:
                measure_placement(plane, args)
                measure_contention(plane, args)
            finally:
                reconciler.close()
        finally:
            stop_webhook(plane, webhook)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
