"""Reconcile throughput, status latency and memory, each next to what it is measured against.

Throughput. The bench, as a user with a client of its own, creates N jobs of R replicas (eight
creations at a time) and times from the first creation until its own watch has seen every pod.
The floor is the same run with no reconciler: as each job is created, a plain kubernetes-asyncio
client with the reconciler's client-side limit (the same qps and burst, and as many concurrent
workers as the reconciler has) creates the job's Services and then its Pods, rendered exactly as
the reconciler renders them. The floor is a controller with nothing to do but create: no watch to
wait on, no status, no Events. The figure is the ratio. The webhook is registered in both runs,
so every job and every pod is admitted by it in both.

Status latency. With every pod Pending, the bench patches one pod's status to Running as a
kubelet would and times from just before the patch until its own watch of the jobs shows that
replica Running in the job's status; one pod at a time, over many pods.

Memory. The reconciler's peak resident set (VmHWM) once every pod is cached, and its current
one (VmRSS).

Prints figures; the exit status says nothing about them. Run the full size on a quiet machine:

    .venv/bin/python tests/bench/reconcile.py                  # 500 jobs x 4 replicas
    .venv/bin/python tests/bench/reconcile.py --jobs 50        # a quick check
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import signal
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config

from torchjob.api import constants, types
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.kube.client import REQUESTS, new_api_client
from torchjob.kube.informer import Informer, KubeObject, ResourceKind
from torchjob.kube.resources import JOBS, PODS
from torchjob.reconciler.settings import DEFAULT_BURST, DEFAULT_QPS
from torchjob.render.replica_objects import render_pod, render_service
from torchjob.render.topology import replica_name, replicas_of
from torchjob.runtime import logging as runtime_logging

TESTS_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS_DIR))

from support import ControlPlane  # noqa: E402
from support.eventually import eventually  # noqa: E402
from support.informers import running  # noqa: E402
from support.jobs import JobBuilder  # noqa: E402
from support.kubelet import TestKubelet  # noqa: E402
from support.operator import (  # noqa: E402
    OPT_IN_LABEL,
    reconciler_kubeconfig,
    start_reconciler,
    start_webhook,
    stop_webhook,
    wait_until_admitting,
)
from support.processes import ServiceProcess  # noqa: E402

from bench.admission import install_crd, print_machine  # noqa: E402

USER_CONCURRENCY = 8
WORKERS = 4  # the reconciler's default --workers
SETTLE_TIMEOUT = 600.0
SAMPLE_TIMEOUT = 10.0

GOAL_RATIO = 1.3
GOAL_P99_S = 1.0
GOAL_RSS_MB = 250.0


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=500)
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--samples", type=int, default=200, help="status latency samples")
    p.add_argument("--qps", type=float, default=DEFAULT_QPS, help="for reconciler and floor")
    p.add_argument("--burst", type=int, default=DEFAULT_BURST, help="for reconciler and floor")
    return p.parse_args()


# -- watching ------------------------------------------------------------------------------------


def watch(
    api: client.ApiClient, kind: ResourceKind, namespace: str, changed: Callable[[KubeObject], None]
) -> contextlib.AbstractAsyncContextManager[Informer]:
    """The bench's own informer on one namespace, calling `changed` after every add and update."""
    informer = Informer(
        api, kind, namespace=namespace, on_add=changed, on_update=lambda _, new: changed(new)
    )
    return running(informer, sync_timeout=60)


class PodsSeen:
    """Counts the pods a watch has seen; `all_seen` is set once there are `expected`."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.names: set[str] = set()
        self.all_seen = asyncio.Event()

    def changed(self, pod: KubeObject) -> None:
        self.names.add(pod["metadata"]["name"])
        if len(self.names) >= self.expected:
            self.all_seen.set()


# -- creating ------------------------------------------------------------------------------------


def manifests(jobs: int, replicas: int) -> list[dict[str, Any]]:
    torchrun = JobBuilder.example("torchrun").replica_count(replicas)
    return [torchrun.name(f"bench-{index}").build() for index in range(jobs)]


async def create_jobs(
    user: client.ApiClient,
    namespace: str,
    jobs: list[dict[str, Any]],
    created: asyncio.Queue[dict[str, Any] | None] | None = None,
) -> None:
    """Create every job, USER_CONCURRENCY at a time; hand each created object on."""
    objects = client.CustomObjectsApi(user)
    pending = iter(jobs)

    async def creator() -> None:
        for manifest in pending:
            job = await objects.create_namespaced_custom_object(
                types.GROUP, types.VERSION, namespace, types.PLURAL, manifest
            )
            if created is not None:
                await created.put(job)

    await asyncio.gather(*(creator() for _ in range(USER_CONCURRENCY)))


async def floor_worker(plain: client.ApiClient, created: asyncio.Queue[Any]) -> None:
    """What a reconciler with nothing else to do would send: each job's Services, then its
    Pods, in the reconciler's order and bodies."""
    core = client.CoreV1Api(plain)
    while (job := await created.get()) is not None:
        meta = job["metadata"]
        spec = PyTorchTrainingJobSpec.from_dict(job["spec"], "spec")
        replicas = replicas_of(spec)
        for replica in replicas:
            service: Any = render_service(meta, replica)
            await core.create_namespaced_service(
                meta["namespace"], service, field_manager=constants.FIELD_MANAGER
            )
        for replica in replicas:
            annotations = {constants.ANNOTATION_BACKOFF_COUNT: "0"}
            pod: Any = render_pod(meta, spec, replica, annotations)
            await core.create_namespaced_pod(
                meta["namespace"], pod, field_manager=constants.FIELD_MANAGER
            )


async def floor_run(
    user: client.ApiClient, kubeconfig: Path, namespace: str, args: argparse.Namespace
) -> tuple[float, float]:
    """Seconds until every pod exists, and the requests the plain client sent."""
    plain = await new_api_client(str(kubeconfig), qps=args.qps, burst=args.burst)
    seen = PodsSeen(args.jobs * args.replicas)
    created: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    sent_before = requests_sent()
    async with plain, watch(user, PODS, namespace, seen.changed):
        started = time.perf_counter()
        workers = [asyncio.create_task(floor_worker(plain, created)) for _ in range(WORKERS)]
        await create_jobs(user, namespace, manifests(args.jobs, args.replicas), created)
        for _ in workers:
            await created.put(None)
        await asyncio.wait_for(seen.all_seen.wait(), SETTLE_TIMEOUT)
        elapsed = time.perf_counter() - started
        await asyncio.gather(*workers)
    return elapsed, requests_sent() - sent_before


def requests_sent() -> float:
    return sum(
        sample.value
        for metric in REQUESTS.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    )


async def reconciler_run(user: client.ApiClient, namespace: str, args: argparse.Namespace) -> float:
    seen = PodsSeen(args.jobs * args.replicas)
    async with watch(user, PODS, namespace, seen.changed):
        started = time.perf_counter()
        await create_jobs(user, namespace, manifests(args.jobs, args.replicas))
        await asyncio.wait_for(seen.all_seen.wait(), SETTLE_TIMEOUT)
        return time.perf_counter() - started


# -- status latency ------------------------------------------------------------------------------


def replica_phase(job: KubeObject, pod_name: str) -> str | None:
    for task in (job.get("status") or {}).get("tasks") or []:
        for replica in task.get("replicas") or []:
            if replica.get("name") == pod_name:
                phase = replica.get("phase")
                return str(phase) if phase else None
    return None


class StatusWatch:
    """The jobs as the bench's watch shows them, and waiters for one replica's phase."""

    def __init__(self) -> None:
        self.jobs: dict[str, KubeObject] = {}
        self.waiters: dict[tuple[str, str], asyncio.Future[float]] = {}

    def changed(self, job: KubeObject) -> None:
        name = job["metadata"]["name"]
        self.jobs[name] = job
        for (job_name, pod_name), waiter in list(self.waiters.items()):
            if job_name == name and not waiter.done() and replica_phase(job, pod_name) == "Running":
                waiter.set_result(time.perf_counter())

    def settled(self, replicas: int) -> bool:
        """Every job shows all its replicas Pending."""
        return all(
            ((job.get("status") or {}).get("aggregate") or {}).get("pending") == replicas
            for job in self.jobs.values()
        )

    def reflected(self, job_name: str, pod_name: str) -> asyncio.Future[float]:
        waiter: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.waiters[(job_name, pod_name)] = waiter
        return waiter


async def status_latencies(
    user: client.ApiClient, namespace: str, args: argparse.Namespace
) -> tuple[list[float], int]:
    statuses = StatusWatch()
    kubelet = TestKubelet(user, namespace)
    latencies: list[float] = []
    missed = 0
    async with watch(user, JOBS, namespace, statuses.changed):
        await eventually(
            lambda: len(statuses.jobs) == args.jobs and statuses.settled(args.replicas),
            "the jobs' status to settle",
            timeout=SETTLE_TIMEOUT,
            interval=0.2,
        )
        targets = [(j, r) for r in range(args.replicas) for j in range(args.jobs)]
        for job_index, index in targets[: args.samples]:
            job_name = f"bench-{job_index}"
            pod_name = replica_name(job_name, "worker", index)
            reflected = statuses.reflected(job_name, pod_name)
            started = time.perf_counter()
            await kubelet.run_containers(pod_name, ["pytorch"])
            try:
                latencies.append(await asyncio.wait_for(reflected, SAMPLE_TIMEOUT) - started)
            except TimeoutError:
                missed += 1
    return latencies, missed


# -- the reconciler process ----------------------------------------------------------------------


def memory_mb(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


def label(labels: str, name: str) -> str:
    match = re.search(rf'{name}="([^"]*)"', labels)
    return match.group(1) if match else "?"


def reconciler_counts(reconciler: ServiceProcess) -> dict[str, float]:
    """Requests by method, reconciles by result, and seconds waited for the rate limiter."""
    counts = {
        f"{label(k, 'method')} requests": v
        for k, v in reconciler.samples("torchjob_kube_client_requests_total").items()
    }
    counts |= {
        f"{label(k, 'result')} reconciles": v
        for k, v in reconciler.samples("torchjob_reconcile_total").items()
    }
    waited = reconciler.samples("torchjob_kube_client_rate_limiter_wait_seconds_sum")
    counts["seconds waited for the rate limiter"] = sum(waited.values())
    return counts


def difference(after: dict[str, float], before: dict[str, float]) -> str:
    return ", ".join(
        f"{value - before.get(key, 0):.0f} {key}" for key, value in sorted(after.items())
    )


# -- main ----------------------------------------------------------------------------------------


def new_namespace(plane: ControlPlane, name: str) -> str:
    plane.kubectl("create", "namespace", name)
    plane.kubectl("label", "namespace", name, f"{OPT_IN_LABEL}=on")
    wait_until_admitting(plane, name)
    return name


async def admin_client(plane: ControlPlane) -> client.ApiClient:
    return await config.new_client_from_config(
        config_file=str(plane.kubeconfig), persist_config=False
    )


async def measure_floor(plane: ControlPlane, kubeconfig: Path, args: argparse.Namespace) -> float:
    namespace = new_namespace(plane, "bench-floor")
    async with await admin_client(plane) as user:
        floor, sent = await floor_run(user, kubeconfig, namespace, args)
    print(f"floor:      {floor:7.1f} s until every pod exists ({sent:.0f} requests)", flush=True)
    # Gone before the reconciler starts, so that it caches nothing of the floor's.
    plane.kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=600s", timeout=660)
    return floor


async def measure_reconciler(
    plane: ControlPlane, reconciler: ServiceProcess, args: argparse.Namespace, floor: float
) -> None:
    namespace = new_namespace(plane, "bench-reconciler")
    counts_before = reconciler_counts(reconciler)
    async with await admin_client(plane) as user:
        elapsed = await reconciler_run(user, namespace, args)
        counts = difference(reconciler_counts(reconciler), counts_before)
        ratio = elapsed / floor
        print(
            f"reconciler: {elapsed:7.1f} s until every pod exists, {ratio:.2f}x the floor "
            f"({goal(ratio <= GOAL_RATIO, f'goal <= {GOAL_RATIO}x')})",
            flush=True,
        )
        print(f"            meanwhile: {counts} (Lease renewals included)", flush=True)
        latencies, missed = await status_latencies(user, namespace, args)
    assert reconciler.process is not None
    memory = memory_mb(reconciler.process.pid)
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    print(
        f"status:     pod Running -> job status shows it: p50 {p50 * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms over {len(latencies)} pods, {missed} not within "
        f"{SAMPLE_TIMEOUT:.0f} s ({goal(p99 < GOAL_P99_S and not missed, 'goal p99 < 1 s')})"
    )
    pods = args.jobs * args.replicas
    print(
        f"memory:     reconciler peak RSS {memory['VmHWM']:.0f} MB, now {memory['VmRSS']:.0f} MB, "
        f"with {pods} pods, {pods} services and {args.jobs} jobs cached "
        f"({goal(memory['VmHWM'] < GOAL_RSS_MB, f'goal < {GOAL_RSS_MB:.0f} MB')})"
    )


def percentile(values: list[float], percent: int) -> float:
    if len(values) < 2:
        return float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[percent - 1]


def goal(met: bool, what: str) -> str:
    return f"meets {what}" if met else f"misses {what}"


def main() -> None:
    args = parse()
    runtime_logging.configure("bench", "WARNING")  # the bench's own watches: problems only
    # SIGTERM unwinds like Ctrl-C, through the clean-up of every process and directory.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    print_machine()
    print(
        f"size:       {args.jobs} jobs x {args.replicas} replicas = {args.jobs * args.replicas} "
        f"pods and as many services; client limit {args.qps:g} qps, burst {args.burst} for "
        f"reconciler and floor; {WORKERS} workers each; webhook registered in both runs"
    )
    with ControlPlane() as plane:
        install_crd(plane)
        webhook = start_webhook(plane)
        try:
            kubeconfig = reconciler_kubeconfig(plane)
            floor = asyncio.run(measure_floor(plane, kubeconfig, args))
            settings = [
                *("--lease-name", "bench", "--log-level", "INFO", "--workers", str(WORKERS)),
                *("--qps", str(args.qps), "--burst", str(args.burst)),
            ]
            reconciler = start_reconciler(plane, kubeconfig, "bench", *settings)
            try:
                asyncio.run(measure_reconciler(plane, reconciler, args, floor))
            finally:
                reconciler.close()
        finally:
            stop_webhook(plane, webhook)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
