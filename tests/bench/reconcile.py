"""Reconcile throughput, status latency and memory, each next to what it is measured against.

Throughput. The bench, as a user with a client of its own, creates N jobs of R replicas (eight
creations at a time) and times from the first creation until its own watch has seen every pod.
The floor is the same run with no reconciler: as each job is created, a client as the reconciler
makes one (kube/client.py), with its client-side limit (the same qps and burst, and as many
concurrent workers as the reconciler has) creates the job's Services and then its Pods, rendered
exactly as the reconciler renders them. The floor is a controller with nothing to do but create:
no watch to wait on, no status, no Events. The figure is the ratio. The webhook is registered in
both runs, so every job and every pod is admitted by it in both.

Status latency. With every pod Pending, the bench patches one pod's status to Running as a
kubelet would and times from just before the patch until its own watch of the jobs shows that
replica Running in the job's status; one pod at a time, over many pods.

CPU. The user plus system CPU time (/proc/<pid>/stat) of the reconciler and of the webhook
from the first creation until every job's status shows all its replicas Pending (every pod and
Service created, every status written), divided by the jobs; the webhook's is also given for the
floor run, which admits the same jobs and pods.

Memory. Each service's peak resident set (VmHWM) once every pod is cached, and its resident set
when idle (VmRSS, after the status samples and a pause with nothing to do). Memory per cached pod:
the reconciler's resident set once everything is cached less its resident set before the first
job, divided by the pods (each pod's Service and a quarter of a job included); and the size of
one pod as the slim transform leaves it (a walk of sys.getsizeof over the decoded object) and as
the cache keeps it (its JSON).

The floor run has a webhook of its own; the measured run starts a webhook and a reconciler of
its own, so neither's figures include the floor's load.

Baseline. `--baseline REV` then measures the reconciler and the webhook of an earlier revision of
this repository the same way on the same control plane: its `services` tree, taken with `git
archive` (tests/support/baseline.py), started with the same flags from the same .venv, once the
current run's namespace is deleted (no service caches the other run's objects), in a namespace of
its own. The floor is not run again. Last, a table prints each figure (time until every pod
exists; CPU a job of the reconciler and of the webhook until every pod exists and until statuses
settle; peak and idle resident set of each; status latency) for both, and current / baseline.
`make bench BASELINE=REV` passes it. The current tree runs first, the baseline second.

Prints figures; the exit status says nothing about them. Run the full size on a quiet machine:

    .venv/bin/python tests/bench/reconcile.py                  # 500 jobs x 4 replicas
    .venv/bin/python tests/bench/reconcile.py --qps 0          # no client-side rate limit
    .venv/bin/python tests/bench/reconcile.py --jobs 5000 --qps 0   # 20,000 pods
    .venv/bin/python tests/bench/reconcile.py --jobs 50        # a quick check
    .venv/bin/python tests/bench/reconcile.py --baseline 22b00e9   # and the services of 22b00e9
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from kubernetes_asyncio import client

from torchjob.api import constants, types
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.kube.client import REQUESTS, KubeClient, new_kube_client
from torchjob.kube.informer import KubeObject
from torchjob.kube.resources import JOBS, PODS, SERVICES
from torchjob.kube.rest import Resources
from torchjob.render.replica_objects import render_pod, render_service
from torchjob.render.topology import replica_name, replicas_of
from torchjob.runtime import logging as runtime_logging
from torchjob.runtime.settings import DEFAULT_BURST, DEFAULT_QPS

TESTS_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS_DIR))

from support import ControlPlane  # noqa: E402
from support.baseline import (  # noqa: E402
    Compared,
    add_baseline_option,
    describe,
    extract_services,
    print_comparison,
    services_from,
)
from support.bench import (  # noqa: E402
    admin_client,
    cpu_seconds,
    delete_namespace,
    difference,
    memory_mb,
    new_namespace,
    print_machine,
    reconciler_counts,
    watch,
)
from support.eventually import eventually  # noqa: E402
from support.jobs import JobBuilder  # noqa: E402
from support.kubelet import TestKubelet  # noqa: E402
from support.operator import (  # noqa: E402
    install_crds,
    reconciler_kubeconfig,
    start_reconciler,
    start_webhook,
    stop_webhook,
)
from support.processes import ServiceProcess  # noqa: E402
from support.stats import percentile  # noqa: E402

USER_CONCURRENCY = 8
WORKERS = 4  # the reconciler's default --workers
SETTLE_TIMEOUT = 600.0
SAMPLE_TIMEOUT = 10.0

GOAL_RATIO = 1.3
GOAL_P99_S = 0.2
# Both services' resident sets together, by the pods cached (issue 18).
GOAL_TOTAL_RSS_MB = {2000: 110.0, 20000: 250.0}
IDLE_PAUSE_S = 5.0


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=500)
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--samples", type=int, default=200, help="status latency samples")
    p.add_argument(
        "--skip-floor",
        action="store_true",
        help="no floor run (no ratio): for the memory and CPU figures of a large size",
    )
    p.add_argument(
        "--qps", type=float, default=DEFAULT_QPS, help="for reconciler and floor (0: no limit)"
    )
    p.add_argument("--burst", type=int, default=DEFAULT_BURST, help="for reconciler and floor")
    add_baseline_option(p, "the reconciler and the webhook")
    return p.parse_args()


# -- watching ------------------------------------------------------------------------------------


class PodsSeen:
    """Counts the pods a watch has seen; `all_seen` is set once there are `expected`."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.names: set[str] = set()
        self.all_seen = asyncio.Event()
        self.last: KubeObject | None = None  # as the apiserver sent it, managedFields aside

    def changed(self, pod: KubeObject) -> None:
        self.last = pod
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


async def floor_worker(plain: KubeClient, created: asyncio.Queue[Any]) -> None:
    """What a reconciler with nothing else to do would send: each job's Services, then its
    Pods, in the reconciler's order and bodies."""
    resources = Resources(plain)
    while (job := await created.get()) is not None:
        meta = job["metadata"]
        spec = PyTorchTrainingJobSpec.from_dict(job["spec"], "spec")
        replicas = replicas_of(spec)
        for replica in replicas:
            await resources.create(SERVICES, meta["namespace"], render_service(meta, replica))
        for replica in replicas:
            annotations = {constants.ANNOTATION_BACKOFF_COUNT: "0"}
            pod = render_pod(meta, spec, replica, annotations)
            await resources.create(PODS, meta["namespace"], pod)


async def floor_run(
    user: client.ApiClient, kubeconfig: Path, namespace: str, args: argparse.Namespace
) -> tuple[float, float]:
    """Seconds until every pod exists, and the requests the plain client sent."""
    plain = await new_kube_client(str(kubeconfig), qps=args.qps, burst=args.burst)
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


async def reconciler_run(
    user: client.ApiClient, namespace: str, args: argparse.Namespace
) -> tuple[float, PodsSeen]:
    """Seconds until every pod exists, and what the bench's watch saw."""
    seen = PodsSeen(args.jobs * args.replicas)
    async with watch(user, PODS, namespace, seen.changed):
        started = time.perf_counter()
        await create_jobs(user, namespace, manifests(args.jobs, args.replicas))
        await asyncio.wait_for(seen.all_seen.wait(), SETTLE_TIMEOUT)
        return time.perf_counter() - started, seen


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
    user: client.ApiClient,
    namespace: str,
    args: argparse.Namespace,
    settled: Callable[[], None],
) -> tuple[list[float], int]:
    """Waits until every job's status shows its replicas Pending, calls `settled`, then samples."""
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
        settled()
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


def deep_size(obj: object) -> int:
    """Bytes of a decoded JSON object: every dict, list, string and number in it."""
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(deep_size(key) + deep_size(value) for key, value in obj.items())
    elif isinstance(obj, list):
        size += sum(deep_size(item) for item in obj)
    return size


def cached_pod_bytes(pod: KubeObject) -> str:
    """The size of one pod as the reconciler's cache keeps it: without managedFields (what the
    informer always dropped), and as the pod transform keeps it when there is one."""
    full = {**pod, "metadata": {k: v for k, v in pod["metadata"].items() if k != "managedFields"}}
    sizes = f"{deep_size(full)} bytes without managedFields"
    try:
        from torchjob.kube.slim import slim_pod
    except ImportError:  # a version of the reconciler without a slim cache
        return sizes
    slim = slim_pod(full)
    return (
        f"{sizes}, {deep_size(slim)} bytes of it kept by the slim transform, "
        f"{len(orjson.dumps(slim))} bytes as JSON in the cache"
    )


# -- one run -------------------------------------------------------------------------------------

SERVICE_NAMES = ("reconciler", "webhook")
# When the CPU time is read: every pod exists, every job's status shows its replicas Pending.
MOMENTS = (("pods", "until every pod exists"), ("settled", "until statuses settle"))


def measure_floor(plane: ControlPlane, kubeconfig: Path, args: argparse.Namespace) -> float:
    """The floor run, admitted by a webhook of its own (the runs measured later start theirs)."""
    webhook = start_webhook(plane)
    try:
        namespace = new_namespace(plane, "bench-floor")
        return asyncio.run(floor_admitted_by(webhook, plane, kubeconfig, namespace, args))
    finally:
        stop_webhook(plane, webhook)
        delete_namespace(plane, "bench-floor")


async def floor_admitted_by(
    webhook: ServiceProcess,
    plane: ControlPlane,
    kubeconfig: Path,
    namespace: str,
    args: argparse.Namespace,
) -> float:
    webhook_cpu = cpu_seconds(webhook)
    async with await admin_client(plane) as user:
        floor, sent = await floor_run(user, kubeconfig, namespace, args)
    webhook_cpu = cpu_seconds(webhook) - webhook_cpu
    print(f"floor:      {floor:7.1f} s until every pod exists ({sent:.0f} requests)", flush=True)
    print(f"            webhook CPU {per_job(webhook_cpu, args.jobs)} meanwhile", flush=True)
    return floor


def per_job(seconds: float, jobs: int) -> str:
    return f"{seconds:.1f} s ({seconds / jobs * 1000:.1f} ms a job)"


class Services:
    """The reconciler and the webhook, and their CPU time since `mark`."""

    def __init__(self, reconciler: ServiceProcess, webhook: ServiceProcess) -> None:
        self.processes = {"reconciler": reconciler, "webhook": webhook}
        self.marked: dict[str, float] = {}

    def mark(self) -> None:
        self.marked = {name: cpu_seconds(p) for name, p in self.processes.items()}

    def cpu_since_mark(self) -> dict[str, float]:
        return {name: cpu_seconds(p) - self.marked[name] for name, p in self.processes.items()}

    def memory(self) -> dict[str, dict[str, float]]:
        return {name: memory_mb(p) for name, p in self.processes.items()}


@dataclass
class RunFigures:
    """What one run of a reconciler and a webhook measured."""

    elapsed: float = math.nan  # seconds from the first creation until every pod exists
    cpu_at: dict[str, dict[str, float]] = field(default_factory=dict)  # moment, service: seconds
    memory_at: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # MB
    latencies: list[float] = field(default_factory=list)  # seconds, pod Running -> job status
    last_pod: KubeObject | None = None  # as the bench's watch last saw one

    def peak_mb(self, name: str) -> float:
        return self.memory_at["idle"][name]["VmHWM"]


async def measure_reconciler(
    plane: ControlPlane,
    services: Services,
    args: argparse.Namespace,
    floor: float,
    namespace: str,
) -> RunFigures:
    reconciler = services.processes["reconciler"]
    counts_before = reconciler_counts(reconciler)
    rss_before = memory_mb(reconciler)["VmRSS"]
    figures = RunFigures()

    def settled() -> None:
        figures.cpu_at["settled"] = services.cpu_since_mark()
        figures.memory_at["settled"] = services.memory()

    async with await admin_client(plane) as user:
        services.mark()
        figures.elapsed, seen = await reconciler_run(user, namespace, args)
        figures.last_pod = seen.last
        figures.cpu_at["pods"] = services.cpu_since_mark()
        counts = difference(reconciler_counts(reconciler), counts_before)
        print_throughput(figures.elapsed, floor, counts)
        figures.latencies, missed = await status_latencies(user, namespace, args, settled)
        await asyncio.sleep(IDLE_PAUSE_S)
        figures.memory_at["idle"] = services.memory()
    print_cpu(figures.cpu_at, args.jobs)
    p50, p99 = percentile(figures.latencies, 50), percentile(figures.latencies, 99)
    print(
        f"status:     pod Running -> job status shows it: p50 {p50 * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms over {len(figures.latencies)} pods, {missed} not within "
        f"{SAMPLE_TIMEOUT:.0f} s ({goal(p99 < GOAL_P99_S and not missed, 'goal p99 < 200 ms')})"
    )
    pods = args.jobs * args.replicas
    print_memory(figures.memory_at, pods, args.jobs)
    cached = figures.memory_at["settled"]["reconciler"]["VmRSS"] - rss_before
    print(
        f"per pod:    reconciler RSS {cached * 2**20 / pods:.0f} bytes a cached pod (its Service "
        f"and a share of its job included: {cached:.0f} MB over {pods} pods)"
    )
    return figures


def print_throughput(elapsed: float, floor: float, counts: str) -> None:
    ratio = elapsed / floor
    against = (
        f"{ratio:.2f}x the floor ({goal(ratio <= GOAL_RATIO, f'goal <= {GOAL_RATIO}x')})"
        if floor == floor  # not NaN: the floor was measured
        else "(no floor run)"
    )
    print(f"reconciler: {elapsed:7.1f} s until every pod exists, {against}", flush=True)
    print(f"            meanwhile: {counts} (Lease renewals included)", flush=True)


def print_cpu(cpu_at: dict[str, dict[str, float]], jobs: int) -> None:
    for moment, what in MOMENTS:
        cpu = cpu_at[moment]
        total = sum(cpu.values())
        print(
            f"cpu:        {what}: reconciler {per_job(cpu['reconciler'], jobs)}, "
            f"webhook {per_job(cpu['webhook'], jobs)}, together {per_job(total, jobs)}"
        )


def print_memory(memory_at: dict[str, dict[str, dict[str, float]]], pods: int, jobs: int) -> None:
    settled, idle = memory_at["settled"], memory_at["idle"]
    for name in SERVICE_NAMES:
        print(
            f"memory:     {name:10} peak RSS {idle[name]['VmHWM']:5.0f} MB, "
            f"{settled[name]['VmRSS']:5.0f} MB once settled, {idle[name]['VmRSS']:5.0f} MB idle"
        )
    peak = sum(idle[name]["VmHWM"] for name in idle)
    limit = GOAL_TOTAL_RSS_MB.get(pods)
    target = f" ({goal(peak <= limit, f'goal <= {limit:.0f} MB')})" if limit else ""
    print(
        f"            together peak {peak:.0f} MB, idle "
        f"{sum(idle[name]['VmRSS'] for name in idle):.0f} MB with {pods} pods, {pods} services "
        f"and {jobs} jobs cached{target}"
    )


def goal(met: bool, what: str) -> str:
    return f"meets {what}" if met else f"misses {what}"


# -- the services of a revision ------------------------------------------------------------------


def measure_services(
    plane: ControlPlane,
    kubeconfig: Path,
    args: argparse.Namespace,
    floor: float,
    sources: Path | None = None,
) -> RunFigures:
    """A webhook and a reconciler started for this run, from `sources` (else the current tree)
    with the same flags, measured in a namespace of their own, stopped after it. The namespace is
    left for the caller: `delete_namespace` before the next run's services start."""
    lease = "bench" if sources is None else "bench-baseline"
    settings = [
        *("--lease-name", lease, "--log-level", "INFO", "--workers", str(WORKERS)),
        *("--qps", str(args.qps), "--burst", str(args.burst)),
    ]
    with contextlib.ExitStack() as stack:
        with services_from(sources):
            webhook = start_webhook(plane)
            stack.callback(stop_webhook, plane, webhook)
            reconciler = start_reconciler(plane, kubeconfig, lease, *settings)
            stack.callback(reconciler.close)
        namespace = new_namespace(plane, run_namespace(sources))
        services = Services(reconciler, webhook)
        figures = asyncio.run(measure_reconciler(plane, services, args, floor, namespace))
    if sources is None and figures.last_pod is not None:  # the current tree's slim transform
        print(f"            one pod: {cached_pod_bytes(figures.last_pod)}")
    return figures


def run_namespace(sources: Path | None) -> str:
    return "bench-reconciler" if sources is None else "bench-baseline"


def compared(current: RunFigures, baseline: RunFigures, jobs: int) -> list[Compared]:
    """Each figure of the two runs, for the table of ratios."""
    rows = [Compared("time until every pod exists", "s", current.elapsed, baseline.elapsed)]
    for moment, what in MOMENTS:
        for name in SERVICE_NAMES:
            rows.append(
                Compared(
                    f"{name} CPU a job {what}",
                    "ms",
                    current.cpu_at[moment][name] / jobs * 1000,
                    baseline.cpu_at[moment][name] / jobs * 1000,
                )
            )
    for name in SERVICE_NAMES:
        for field_name, what in (("VmHWM", "peak"), ("VmRSS", "idle")):
            rows.append(
                Compared(
                    f"{name} {what} RSS",
                    "MB",
                    current.memory_at["idle"][name][field_name],
                    baseline.memory_at["idle"][name][field_name],
                )
            )
    peaks = [sum(run.peak_mb(name) for name in SERVICE_NAMES) for run in (current, baseline)]
    rows.append(Compared("both services' peak RSS together", "MB", *peaks))
    for percent in (50, 99):
        rows.append(
            Compared(
                f"status latency p{percent}",
                "ms",
                percentile(current.latencies, percent) * 1000,
                percentile(baseline.latencies, percent) * 1000,
            )
        )
    return rows


# -- main ----------------------------------------------------------------------------------------


def main() -> None:
    args = parse()
    runtime_logging.configure("bench", "WARNING")  # the bench's own watches: problems only
    # SIGTERM unwinds like Ctrl-C, through the clean-up of every process and directory.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    print_machine()
    limit = f"{args.qps:g} qps, burst {args.burst}" if args.qps > 0 else "none"
    print(
        f"size:       {args.jobs} jobs x {args.replicas} replicas = {args.jobs * args.replicas} "
        f"pods and as many services; client limit {limit} for "
        f"reconciler and floor; {WORKERS} workers each; webhook registered in both runs"
    )
    started = time.monotonic()
    with ControlPlane() as plane, tempfile.TemporaryDirectory(prefix="torchjob-bench-") as tmp:
        install_crds(plane)
        kubeconfig = reconciler_kubeconfig(plane)
        floor = math.nan if args.skip_floor else measure_floor(plane, kubeconfig, args)
        current = measure_services(plane, kubeconfig, args, floor)
        if args.baseline:
            sources = extract_services(args.baseline, Path(tmp))
            delete_namespace(plane, run_namespace(None))
            print(f"\nbaseline:   the reconciler and the webhook of {describe(args.baseline)}")
            baseline = measure_services(plane, kubeconfig, args, floor, sources)
            print_comparison(args.baseline, compared(current, baseline, args.jobs))
    print(f"\nthe bench took {time.monotonic() - started:.0f} s")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
