"""The scale tier's many-jobs benches (tests/bench/scale.py).

many: J torchrun jobs of 8 workers submitted at once to torchjob's webhook and reconciler.
kubeflow: the same J jobs x 8 as Kubeflow PyTorchJobs (one Master, seven Workers), run first by
Kubeflow's training-operator v1.9 (`make kubeflow-build`), then by torchjob (`--kubeflow`, as
the chart's `kubeflow.enabled` runs it), on the same tier at the same client limit; the lines
give the ratios, torchjob over Kubeflow.

Each run: from the first submission until every pod is Running, and until every job's status
shows all its replicas Running; the status latency, pod by pod, from the bench's watch seeing a
pod Running until its watch of the jobs sees the job's status count it; each process's CPU
seconds over the run, its peak resident set (VmHWM) and its resident set when idle after it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from support import ControlPlane
from support.bench import (
    Row,
    admin_client,
    delete_namespace,
    in_parallel,
    latency_rows,
    new_namespace,
    process_cpu_seconds,
    process_memory_mb,
    watch,
)
from support.bench import print_ratios as show_ratios
from support.eventually import eventually
from support.kubeflow import pytorchjob
from support.kubeflow_operator import KubeflowOperator, opted_in_namespace
from support.operator import start_reconciler, start_webhook, stop_webhook
from support.scale_bench import (
    Progress,
    StatusTimes,
    big_job,
    close_reporting_exit,
    create_custom_object,
    until_running,
)
from support.stats import percentile
from torchjob.kube.informer import KubeObject, ResourceKind
from torchjob.kube.resources import JOBS, KUBEFLOW_JOBS, PODS

MANY_REPLICAS = 8
USER_CONCURRENCY = 8  # job submissions in flight
IDLE_PAUSE_S = 5.0
GOAL_P99_S = 1.0
Limit = tuple[float, int]


class Statuses(Protocol):
    """When each pod was seen Running and when its job's status was seen showing it."""

    shown_running: dict[str, float]

    def pod_seen(self, pod: KubeObject) -> None: ...
    def job_seen(self, job: KubeObject) -> None: ...
    def latencies(self) -> list[float]: ...


class ActiveShown(StatusTimes):
    """StatusTimes for Kubeflow's status, which counts a replica type's running pods
    (`replicaStatuses.<Type>.active`) instead of naming them: the first `active` pods of a job's
    type seen Running are the ones it shows."""

    def __init__(self) -> None:
        super().__init__()
        self.running_by_type: dict[str, list[str]] = {}  # "<job>-<type>": pods, as seen Running

    def pod_seen(self, pod: KubeObject) -> None:
        name = pod["metadata"]["name"]
        known = name in self.pod_running
        super().pod_seen(pod)
        if not known and name in self.pod_running:
            self.running_by_type.setdefault(name.rsplit("-", 1)[0], []).append(name)

    def job_seen(self, job: KubeObject) -> None:
        now = time.perf_counter()
        name = job["metadata"]["name"]
        replica_statuses = (job.get("status") or {}).get("replicaStatuses") or {}
        for replica_type, counts in replica_statuses.items():
            running = self.running_by_type.get(f"{name}-{replica_type.lower()}", [])
            for pod in running[: int(counts.get("active") or 0)]:
                self.shown_running.setdefault(pod, now)


@dataclass
class Run:
    """What one run submits and watches: the job API, each job's manifest, how its status shows
    a pod Running."""

    jobs: ResourceKind
    manifest: Callable[[int], dict[str, Any]]
    statuses: Callable[[], Statuses]


@dataclass
class ManyFigures:
    running: float | None = None  # seconds from the first submission to every pod Running
    shown: float | None = None  # ... until every job's status shows every replica Running
    latencies: list[float] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)  # process: seconds over the run
    memory: dict[str, dict[str, float]] = field(default_factory=dict)  # process: VmHWM, VmRSS

    def peak_mb(self) -> float:
        return sum(m["VmHWM"] for m in self.memory.values())

    def idle_mb(self) -> float:
        return sum(m["VmRSS"] for m in self.memory.values())


def torchrun_jobs() -> Run:
    return Run(JOBS, lambda i: big_job(f"job-{i}", MANY_REPLICAS), StatusTimes)


def kubeflow_jobs() -> Run:
    return Run(
        KUBEFLOW_JOBS,
        lambda i: pytorchjob(f"job-{i}", workers=MANY_REPLICAS - 1),
        ActiveShown,
    )


async def submitted(
    plane: ControlPlane, namespace: str, jobs: int, run: Run, timeout: float
) -> ManyFigures:
    """Every job submitted at once (USER_CONCURRENCY creations in flight), until every pod is
    Running and every job's status shows all its replicas Running."""
    figures = ManyFigures()
    expected = jobs * MANY_REPLICAS
    progress, statuses = Progress(expected), run.statuses()

    def pod_seen(pod: KubeObject) -> None:
        progress.seen(pod)
        statuses.pod_seen(pod)

    async with (
        await admin_client(plane) as user,
        watch(user, PODS, namespace, pod_seen),
        watch(user, run.jobs, namespace, statuses.job_seen),
    ):
        progress.start()
        await in_parallel(
            USER_CONCURRENCY,
            range(jobs),
            lambda index: create_custom_object(user, run.jobs, namespace, run.manifest(index)),
        )
        figures.running = await until_running(progress, "", "submission", timeout)
        await eventually(
            lambda: len(statuses.shown_running) >= expected,
            "every job's status to show its replicas Running",
            timeout=timeout,
            interval=0.5,
            explain=lambda: f"{len(statuses.shown_running)} of {expected} shown",
        )
        figures.shown = time.perf_counter() - progress.started
    figures.latencies = statuses.latencies()
    return figures


def measured(
    plane: ControlPlane, namespace: str, pids: dict[str, int], run: Run, args: Any
) -> ManyFigures:
    """One run, with the CPU seconds of `pids` over it and their memory once idle after it."""
    before = {name: process_cpu_seconds(pid) for name, pid in pids.items()}
    figures = asyncio.run(submitted(plane, namespace, args.jobs, run, args.timeout))
    figures.cpu = {name: process_cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    time.sleep(IDLE_PAUSE_S)
    figures.memory = {name: process_memory_mb(pid) for name, pid in pids.items()}
    print_figures(figures)
    return figures


@contextlib.contextmanager
def torchjob_services(
    plane: ControlPlane, kubeconfig: Path, settings: list[str]
) -> Iterator[dict[str, int]]:
    """A webhook and a reconciler of their own (their peaks are this workload's)."""
    with contextlib.ExitStack() as stack:
        webhook = start_webhook(plane)
        stack.callback(stop_webhook, plane, webhook)
        reconciler = start_reconciler(plane, kubeconfig, "scale-many", *settings)
        stack.callback(close_reporting_exit, reconciler)
        assert reconciler.process is not None and webhook.process is not None
        yield {"reconciler": reconciler.process.pid, "webhook": webhook.process.pid}


def measure_many(plane: ControlPlane, kubeconfig: Path, args: Any, settings: list[str]) -> None:
    """`args.jobs` torchrun jobs run by torchjob, at the first limit of --limits."""
    print_size("many", "torchrun jobs", args)
    with torchjob_services(plane, kubeconfig, settings) as pids:
        namespace = new_namespace(plane, "scale-many")
        measured(plane, namespace, pids, torchrun_jobs(), args)
    delete_namespace(plane, namespace)


def measure_side_by_side(
    plane: ControlPlane, kubeconfig: Path, args: Any, settings: list[str]
) -> None:
    """The same PyTorchJobs run by Kubeflow's operator, then by torchjob; the ratios."""
    qps, burst = args.limits[0]
    print_size("kubeflow", "PyTorchJobs (1 Master, 7 Workers)", args)
    print("kubeflow:   training-operator v1.9.3, one thread (its manifests set none)", flush=True)
    with contextlib.closing(KubeflowOperator(plane, qps, burst, threads=1)) as operator:
        operator.start()
        assert operator.process is not None
        namespace = opted_in_namespace(plane, "scale-kubeflow")
        pids = {"training-operator": operator.process.pid}
        theirs = measured(plane, namespace, pids, kubeflow_jobs(), args)
    delete_namespace(plane, namespace)
    print("torchjob:   webhook and reconciler with --kubeflow", flush=True)
    with torchjob_services(plane, kubeconfig, [*settings, "--kubeflow"]) as pids:
        namespace = new_namespace(plane, "scale-torchjob")
        ours = measured(plane, namespace, pids, kubeflow_jobs(), args)
    delete_namespace(plane, namespace)
    print_ratios(ours, theirs)


def print_size(bench: str, what: str, args: Any) -> None:
    qps, burst = args.limits[0]
    print(
        f"\n{bench + ':':11} {args.jobs} {what} x {MANY_REPLICAS} = {args.jobs * MANY_REPLICAS} "
        f"pods, submitted at once; {qps:g} qps, burst {burst}",
        flush=True,
    )


def print_figures(figures: ManyFigures) -> None:
    if figures.shown is not None:
        print(f"            every job's status shows all Running at {figures.shown:.1f} s")
    p50, p99 = (percentile(figures.latencies, p) for p in (50, 99))
    verdict = "meets" if p99 <= GOAL_P99_S else "misses"
    print(
        f"status:     pod seen Running -> its job's status seen showing it: p50 "
        f"{p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms over {len(figures.latencies)} pods "
        f"({verdict} goal p99 <= {GOAL_P99_S:g} s)"
    )
    for name, memory in figures.memory.items():
        print(
            f"{name + ':':11} CPU {figures.cpu[name]:.1f} s until every status shows all "
            f"Running; peak RSS {memory['VmHWM']:.0f} MB, idle {memory['VmRSS']:.0f} MB"
        )
    print(f"together:   CPU {sum(figures.cpu.values()):.1f} s, peak RSS {figures.peak_mb():.0f} MB")


def print_ratios(ours: ManyFigures, theirs: ManyFigures) -> None:
    rows: list[Row] = [
        ("time to every pod Running, s", ours.running, theirs.running),
        ("time to every status showing it, s", ours.shown, theirs.shown),
        ("CPU, s", sum(ours.cpu.values()), sum(theirs.cpu.values())),
        ("peak RSS, MB", ours.peak_mb(), theirs.peak_mb()),
        ("idle RSS, MB", ours.idle_mb(), theirs.idle_mb()),
    ]
    show_ratios([*rows, *latency_rows(ours.latencies, theirs.latencies)])
