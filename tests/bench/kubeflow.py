"""Side by side with Kubeflow: the same workload of Kubeflow PyTorchJobs (kubeflow.org/v1) run by
Kubeflow's training-operator v1.9.3 and by torchjob's reconciler and webhook with Kubeflow's
PyTorchJobs opted in (`--kubeflow`), one after the other on one control plane
(tests/support/controlplane.py), everything of the first run deleted before the second starts.

The workload. N PyTorchJobs of one Master and R-1 Workers, created by the bench as a user (eight
creations at a time) into a namespace of their own; both operators at the same client-side limit
(qps and burst); no kubelet, no scheduler: every pod stays Pending until the bench patches it.

Kubeflow's operator: built from its release source (`make kubeflow-build`), only the PyTorchJob
framework (`--enable-scheme=pytorchjob`), no leader election, no gang scheduling, its default
one controller thread (its manifests set none; `--kubeflow-threads` changes it), logging as in
production (JSON at info); its validating webhook served and registered for PyTorchJobs, with a
certificate the bench makes (tests/support/kubeflow_operator.py says why), so that both runs admit
every job through a webhook. It reads the cluster with the admin's credentials.
torchjob: the webhook and the reconciler as the chart runs them (tests/support/operator.py), the
reconciler's default four workers, both at INFO, run from a venv with the package installed as
the image installs it (`pip install .`, no dev extras: tests/support/installed.py), unless
`--dev-venv`. Both use the CRD torchjob ships for Kubeflow's PyTorchJobs (crds/), whose
subresources (status, scale) are Kubeflow's; it adds printer columns to Kubeflow's State and Age,
and its schema leaves the pod templates unchecked where Kubeflow's spells them out: both cost
the apiserver, not either operator.

Measured, for each:
- time from the first creation until the bench's own watch has seen every pod;
- CPU seconds (/proc/<pid>/stat, user plus system) of the operator's processes (torchjob: the
  reconciler and the webhook together) until every pod exists, until every job's status shows
  Created and an entry for each replica type, and over the whole run (status samples and an idle
  pause included);
- peak (VmHWM) and idle (VmRSS, after a pause with nothing to do) resident set;
- status latency: with every pod Pending, the bench patches one job's Master pod Running as a
  kubelet would and times from just before the patch until its watch of the jobs shows the Master
  active in `replicaStatuses`; one pod at a time, over `--samples` jobs.
Then a table of each figure, torchjob / Kubeflow. Prints figures; the exit status says nothing
about them. Run the full size on a quiet machine:

    make kubeflow-build && .venv/bin/python tests/bench/kubeflow.py   # 500 jobs x 4 replicas
    .venv/bin/python tests/bench/kubeflow.py --jobs 50                  # a quick check
    .venv/bin/python tests/bench/kubeflow.py --qps 0                    # no client-side limit
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from torchjob.api import kubeflow_types
from torchjob.kube.informer import KubeObject
from torchjob.kube.resources import KUBEFLOW_JOBS, PODS
from torchjob.runtime import logging as runtime_logging
from torchjob.runtime.settings import DEFAULT_BURST, DEFAULT_QPS

TESTS_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS_DIR))

from support import ControlPlane  # noqa: E402
from support.bench import (  # noqa: E402
    Row,
    admin_client,
    delete_namespace,
    latency_rows,
    new_namespace,
    print_machine,
    process_cpu_seconds,
    process_memory_mb,
    watch,
)
from support.bench import print_ratios as show_ratios  # noqa: E402
from support.eventually import eventually  # noqa: E402
from support.installed import install, print_interpreter, services_run_by  # noqa: E402
from support.kubeflow import pytorchjob  # noqa: E402
from support.kubeflow_operator import KubeflowOperator, opted_in_namespace  # noqa: E402
from support.kubelet import TestKubelet  # noqa: E402
from support.operator import (  # noqa: E402
    install_crds,
    reconciler_kubeconfig,
    start_reconciler,
    start_webhook,
    stop_webhook,
)
from support.stats import percentile  # noqa: E402

USER_CONCURRENCY = 8
WORKERS = 4  # the reconciler's default --workers
SETTLE_TIMEOUT = 900.0
SAMPLE_TIMEOUT = 10.0
IDLE_PAUSE_S = 5.0
REPLICA_TYPES = ("Master", "Worker")
# When the CPU time is read.
MOMENTS = (
    ("pods", "until every pod exists"),
    ("settled", "until statuses settle"),
    ("idle", "over the whole run"),
)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=500)
    p.add_argument("--replicas", type=int, default=4, help="a Master and replicas-1 Workers")
    p.add_argument("--samples", type=int, default=200, help="status latency samples (<= jobs)")
    p.add_argument("--qps", type=float, default=DEFAULT_QPS, help="for both operators (0: none)")
    p.add_argument("--burst", type=int, default=DEFAULT_BURST, help="for both operators")
    p.add_argument("--kubeflow-threads", type=int, default=1, help="its --controller-threads")
    p.add_argument(
        "--dev-venv",
        action="store_true",
        help="run torchjob's services from the dev .venv rather than an installed package",
    )
    return p.parse_args()


# -- the workload --------------------------------------------------------------------------------


def manifests(jobs: int, replicas: int) -> list[dict[str, Any]]:
    return [pytorchjob(f"bench-{index}", workers=replicas - 1) for index in range(jobs)]


async def create_jobs(user: client.ApiClient, namespace: str, jobs: list[dict[str, Any]]) -> None:
    objects = client.CustomObjectsApi(user)
    pending = iter(jobs)

    async def creator() -> None:
        for manifest in pending:
            await objects.create_namespaced_custom_object(
                kubeflow_types.GROUP,
                kubeflow_types.VERSION,
                namespace,
                kubeflow_types.PLURAL,
                manifest,
            )

    await asyncio.gather(*(creator() for _ in range(USER_CONCURRENCY)))


class PodsSeen:
    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.names: set[str] = set()
        self.all_seen = asyncio.Event()

    def changed(self, pod: KubeObject) -> None:
        self.names.add(pod["metadata"]["name"])
        if len(self.names) >= self.expected:
            self.all_seen.set()


def master_active(job: KubeObject) -> bool:
    statuses = (job.get("status") or {}).get("replicaStatuses") or {}
    return bool((statuses.get("Master") or {}).get("active"))


def settled(job: KubeObject) -> bool:
    """The job's status says Created and has an entry for each of its replica types."""
    status = job.get("status") or {}
    created = any(c.get("type") == "Created" for c in status.get("conditions") or [])
    return created and all(kind in (status.get("replicaStatuses") or {}) for kind in REPLICA_TYPES)


class StatusWatch:
    """The jobs as the bench's watch last saw them; futures resolved once a Master is active."""

    def __init__(self) -> None:
        self.jobs: dict[str, KubeObject] = {}
        self.waiters: dict[str, asyncio.Future[float]] = {}

    def changed(self, job: KubeObject) -> None:
        name = job["metadata"]["name"]
        self.jobs[name] = job
        waiter = self.waiters.get(name)
        if waiter is not None and not waiter.done() and master_active(job):
            waiter.set_result(time.perf_counter())

    def reflected(self, job_name: str) -> asyncio.Future[float]:
        waiter: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.waiters[job_name] = waiter
        return waiter


# -- one run -------------------------------------------------------------------------------------


@dataclass
class RunFigures:
    elapsed: float = math.nan
    cpu_at: dict[str, dict[str, float]] = field(default_factory=dict)  # moment, process: s
    memory: dict[str, dict[str, float]] = field(default_factory=dict)  # process: VmHWM, VmRSS
    latencies: list[float] = field(default_factory=list)
    missed: int = 0
    services: int = 0

    def cpu(self, moment: str) -> float:
        return sum(self.cpu_at[moment].values())

    def peak_mb(self) -> float:
        return sum(m["VmHWM"] for m in self.memory.values())

    def idle_mb(self) -> float:
        return sum(m["VmRSS"] for m in self.memory.values())


class Processes:
    """The operator's processes by name, and their CPU time since `mark`."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.marked: dict[str, float] = {}

    def mark(self) -> None:
        self.marked = {name: process_cpu_seconds(pid) for name, pid in self.pids.items()}

    def cpu_since_mark(self) -> dict[str, float]:
        return {n: process_cpu_seconds(p) - self.marked[n] for n, p in self.pids.items()}

    def memory(self) -> dict[str, dict[str, float]]:
        return {name: process_memory_mb(pid) for name, pid in self.pids.items()}


async def measure(
    plane: ControlPlane, namespace: str, processes: Processes, args: argparse.Namespace
) -> RunFigures:
    figures = RunFigures()
    seen = PodsSeen(args.jobs * args.replicas)
    statuses = StatusWatch()
    async with (
        await admin_client(plane) as user,
        watch(user, PODS, namespace, seen.changed),
        watch(user, KUBEFLOW_JOBS, namespace, statuses.changed),
    ):
        processes.mark()
        started = time.perf_counter()
        await create_jobs(user, namespace, manifests(args.jobs, args.replicas))
        await asyncio.wait_for(seen.all_seen.wait(), SETTLE_TIMEOUT)
        figures.elapsed = time.perf_counter() - started
        figures.cpu_at["pods"] = processes.cpu_since_mark()
        print(f"            {figures.elapsed:.1f} s until every pod exists", flush=True)
        await eventually(
            lambda: len(statuses.jobs) == args.jobs and all(map(settled, statuses.jobs.values())),
            "every job's status to show Created and its replica types",
            timeout=SETTLE_TIMEOUT,
            interval=0.2,
        )
        figures.cpu_at["settled"] = processes.cpu_since_mark()
        figures.latencies, figures.missed = await status_latencies(user, namespace, statuses, args)
        await asyncio.sleep(IDLE_PAUSE_S)
        figures.cpu_at["idle"] = processes.cpu_since_mark()
        figures.memory = processes.memory()
        listed = await client.CoreV1Api(user).list_namespaced_service(namespace)
        figures.services = len(listed.items)
    return figures


async def status_latencies(
    user: client.ApiClient, namespace: str, statuses: StatusWatch, args: argparse.Namespace
) -> tuple[list[float], int]:
    kubelet = TestKubelet(user, namespace)
    latencies: list[float] = []
    missed = 0
    for index in range(min(args.samples, args.jobs)):
        job_name = f"bench-{index}"
        reflected = statuses.reflected(job_name)
        started = time.perf_counter()
        await kubelet.run_containers(f"{job_name}-master-0", ["pytorch"])
        try:
            latencies.append(await asyncio.wait_for(reflected, SAMPLE_TIMEOUT) - started)
        except TimeoutError:
            missed += 1
    return latencies, missed


def report(figures: RunFigures, args: argparse.Namespace) -> None:
    pods = args.jobs * args.replicas
    print(f"            {figures.services} Services for {pods} pods")
    for moment, what in MOMENTS:
        parts = ", ".join(f"{n} {s:.1f} s" for n, s in figures.cpu_at[moment].items())
        print(f"cpu:        {what}: {figures.cpu(moment):.1f} s ({parts})")
    for process, memory in figures.memory.items():
        print(
            f"memory:     {process:18} peak RSS {memory['VmHWM']:5.0f} MB, "
            f"idle {memory['VmRSS']:5.0f} MB"
        )
    p50, p99 = percentile(figures.latencies, 50), percentile(figures.latencies, 99)
    print(
        f"status:     Master Running -> job status shows it: p50 {p50 * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms over {len(figures.latencies)} jobs, {figures.missed} not "
        f"within {SAMPLE_TIMEOUT:.0f} s",
        flush=True,
    )


# -- the two operators ---------------------------------------------------------------------------


def run_kubeflow(plane: ControlPlane, args: argparse.Namespace) -> RunFigures:
    print("\nkubeflow:   training-operator v1.9.3", flush=True)
    operator = KubeflowOperator(plane, args.qps, args.burst, args.kubeflow_threads)
    try:
        operator.start()
        assert operator.process is not None
        namespace = opted_in_namespace(plane, "bench-kubeflow")
        processes = Processes({"training-operator": operator.process.pid})
        figures = asyncio.run(measure(plane, namespace, processes, args))
    finally:
        operator.close()
    report(figures, args)
    return figures


def run_torchjob(plane: ControlPlane, args: argparse.Namespace, python: Path | None) -> RunFigures:
    print("\ntorchjob:   reconciler and webhook with --kubeflow", flush=True)
    settings = [
        *("--lease-name", "bench", "--log-level", "INFO", "--workers", str(WORKERS)),
        *("--qps", str(args.qps), "--burst", str(args.burst), "--kubeflow"),
    ]
    kubeconfig = reconciler_kubeconfig(plane)
    with contextlib.ExitStack() as stack:
        with services_run_by(python):
            webhook = start_webhook(plane)
            stack.callback(stop_webhook, plane, webhook)
            reconciler = start_reconciler(plane, kubeconfig, "bench", *settings)
            stack.callback(reconciler.close)
        assert webhook.process is not None and reconciler.process is not None
        namespace = new_namespace(plane, "bench-torchjob")
        pids = {"reconciler": reconciler.process.pid, "webhook": webhook.process.pid}
        figures = asyncio.run(measure(plane, namespace, Processes(pids), args))
    report(figures, args)
    return figures


# -- the comparison ------------------------------------------------------------------------------


def print_ratios(ours: RunFigures, theirs: RunFigures) -> None:
    rows: list[Row] = [("time until every pod exists, s", ours.elapsed, theirs.elapsed)]
    rows += [(f"CPU {what}, s", ours.cpu(m), theirs.cpu(m)) for m, what in MOMENTS]
    rows += [
        ("peak RSS, MB", ours.peak_mb(), theirs.peak_mb()),
        ("idle RSS, MB", ours.idle_mb(), theirs.idle_mb()),
    ]
    show_ratios([*rows, *latency_rows(ours.latencies, theirs.latencies)])


def main() -> None:
    args = parse()
    runtime_logging.configure("bench", "WARNING")
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    print_machine()
    limit = f"{args.qps:g} qps, burst {args.burst}" if args.qps > 0 else "none"
    print(
        f"size:       {args.jobs} PyTorchJobs x {args.replicas} replicas (1 Master, "
        f"{args.replicas - 1} Workers) = {args.jobs * args.replicas} pods; client limit {limit} "
        f"for both; Kubeflow {args.kubeflow_threads} thread(s), torchjob {WORKERS} workers"
    )
    started = time.monotonic()
    with ControlPlane() as plane, tempfile.TemporaryDirectory(prefix="torchjob-bench-") as tmp:
        install_crds(plane)
        python = None if args.dev_venv else install(Path(tmp))
        print_interpreter(python)
        theirs = run_kubeflow(plane, args)
        delete_namespace(plane, "bench-kubeflow")
        ours = run_torchjob(plane, args, python)
        print_ratios(ours, theirs)
    print(f"\nthe bench took {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
