"""Scale: one job of many replicas on thousands of fake GPU nodes, against the floor.

The tier (tests/support/scale.py): the real control plane, the real kube-scheduler with native
gang scheduling (scheduling.k8s.io/v1beta1 PodGroups, GenericWorkload) and kwok playing the
kubelet of N fake nodes of 8 GPUs (--nodes, 1,000 by default), which takes every pod bound to one
to Running. The webhook and the reconciler run as processes, as tests/bench/reconcile.py starts
them; the webhook is registered in every run, so every job and pod is admitted by it.

Create to all Running. One torchrun job of R workers (--replicas, 10,000 by default) that must
all start together (minNodes: R): the reconciler's default gang setting makes it one native
PodGroup of R, which kube-scheduler places whole or not at all. The clock runs from just before
the bench creates the job until its own watch of the namespace sees all R pods Running; the
lines also say when the watch saw the last pod created and the last bound.

The floor: the same with no reconciler. As the job is created, a client as the reconciler makes
one (kube/client.py: the same qps and burst) creates the objects the reconciler creates, rendered
as it renders them, in its order: the PodGroup, the R Services, then the R Pods, with as many
requests in flight as the reconciler has workers. Then the same scheduler and kwok take them to
Running. The figure is the ratio, at each client limit of --limits (the chart's default, 50 qps
with bursts of 100, and 500 / 1,000).

Each run has a namespace of its own, deleted (and its pods gone) before the next run; the
reconciler is started for its run only, with the limit of that run.

Prints figures; the exit status says nothing about them. A full run wants a quiet machine:

    .venv/bin/python tests/bench/scale.py                        # 10,000 replicas, 1,000 nodes
    .venv/bin/python tests/bench/scale.py --replicas 1000 --nodes 200   # a quick check
    .venv/bin/python tests/bench/scale.py --nodes 5000 --gpus-per-replica 1
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from torchjob.api import types
from torchjob.kube.client import KubeClient, new_kube_client
from torchjob.kube.resources import PODS
from torchjob.runtime import logging as runtime_logging
from torchjob.runtime.settings import DEFAULT_BURST, DEFAULT_QPS

TESTS_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS_DIR))

from support import ControlPlane  # noqa: E402
from support.bench import (  # noqa: E402
    admin_client,
    delete_namespace,
    difference,
    new_namespace,
    print_machine,
    reconciler_counts,
    watch,
)
from support.operator import (  # noqa: E402
    reconciler_kubeconfig,
    start_reconciler,
    start_webhook,
    stop_webhook,
)
from support.scale import ScaleTier  # noqa: E402
from support.scale_bench import Progress, big_job, create_as_reconciler  # noqa: E402

WORKERS = 4  # the reconciler's default --workers
JOB_NAME = "big"
GOAL_RATIO = 1.1
Limit = tuple[float, int]


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nodes", type=int, default=1000, help="fake nodes of 8 GPUs")
    p.add_argument("--replicas", type=int, default=10000, help="workers of the job")
    p.add_argument(
        "--limits",
        type=limits,
        default=[(DEFAULT_QPS, DEFAULT_BURST), (500.0, 1000)],
        help=f"client limits as QPS:BURST,... (default {DEFAULT_QPS:g}:{DEFAULT_BURST},500:1000)",
    )
    p.add_argument(
        "--gpus-per-replica",
        type=int,
        default=0,
        help="GPUs each worker asks for (0: one CPU only, so that 10,000 fit on 1,000 nodes)",
    )
    p.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds a run may take to all Running"
    )
    return p.parse_args()


def limits(text: str) -> list[Limit]:
    pairs = (item.split(":") for item in text.split(","))
    return [(float(qps), int(burst)) for qps, burst in pairs]


# -- one run -------------------------------------------------------------------------------------


async def create_job(user: client.ApiClient, namespace: str, args: argparse.Namespace) -> Any:
    objects = client.CustomObjectsApi(user)
    manifest = big_job(JOB_NAME, args.replicas, args.gpus_per_replica)
    return await objects.create_namespaced_custom_object(
        types.GROUP, types.VERSION, namespace, types.PLURAL, manifest
    )


async def timed_run(
    plane: ControlPlane, namespace: str, args: argparse.Namespace, floor: KubeClient | None
) -> Progress:
    """From the job's creation until every pod is Running; with `floor`, that client creates
    what the reconciler would (no reconciler runs then)."""
    progress = Progress(args.replicas)
    async with await admin_client(plane) as user, watch(user, PODS, namespace, progress.seen):
        progress.start()
        job = await create_job(user, namespace, args)
        if floor is not None:
            await create_as_reconciler(floor, job, WORKERS)
        try:
            await asyncio.wait_for(progress.all_running.wait(), args.timeout)
        except TimeoutError:
            print(f"            not all Running within {args.timeout:.0f} s: {progress.counts()}")
    return progress


def measure_floor(
    plane: ControlPlane, kubeconfig: Path, args: argparse.Namespace, limit: Limit
) -> float | None:
    namespace = new_namespace(plane, f"scale-floor-{limit[0]:g}")

    async def run() -> Progress:
        qps, burst = limit
        async with await new_kube_client(str(kubeconfig), qps=qps, burst=burst) as plain:
            return await timed_run(plane, namespace, args, plain)

    progress = asyncio.run(run())
    print(f"floor:      {figure(progress)} ({progress.stages()})", flush=True)
    delete_namespace(plane, namespace)
    return progress.reached.get("running")


def measure_reconciler(
    plane: ControlPlane, kubeconfig: Path, args: argparse.Namespace, limit: Limit
) -> float | None:
    qps, burst = limit
    lease = f"scale-{qps:g}"
    settings = [
        *("--lease-name", lease, "--log-level", "INFO", "--workers", str(WORKERS)),
        *("--qps", f"{qps:g}", "--burst", str(burst)),
    ]
    reconciler = start_reconciler(plane, kubeconfig, lease, *settings)
    try:
        namespace = new_namespace(plane, f"scale-reconciler-{qps:g}")
        before = reconciler_counts(reconciler)
        progress = asyncio.run(timed_run(plane, namespace, args, None))
        counts = difference(reconciler_counts(reconciler), before)
    finally:
        reconciler.close()
    print(f"reconciler: {figure(progress)} ({progress.stages()})", flush=True)
    print(f"            meanwhile: {counts} (Lease renewals included)", flush=True)
    delete_namespace(plane, namespace)
    return progress.reached.get("running")


def figure(progress: Progress) -> str:
    elapsed = progress.reached.get("running")
    if elapsed is None:
        return f"not all Running: {progress.counts()}"
    return f"{elapsed:7.1f} s from create to all {progress.expected} Running"


def print_ratio(floor: float | None, measured: float | None) -> str:
    if floor is None or measured is None:
        return "ratio:      none (a run did not finish)"
    ratio = measured / floor
    verdict = "meets" if ratio <= GOAL_RATIO else "misses"
    return f"ratio:      {ratio:.2f}x the floor ({verdict} goal <= {GOAL_RATIO}x)"


# -- main ----------------------------------------------------------------------------------------


def main() -> None:
    args = parse()
    runtime_logging.configure("bench", "WARNING")  # the bench's own watches: problems only
    # SIGTERM unwinds like Ctrl-C, through the clean-up of every process and directory.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    print_machine()
    gpus = f"{args.gpus_per_replica} GPU" if args.gpus_per_replica else "no GPU"
    print(
        f"size:       one torchrun job of {args.replicas} workers (1 CPU, {gpus} each; one "
        f"native PodGroup of all) on {args.nodes} fake nodes of 8 GPUs; {WORKERS} workers or "
        "senders; webhook registered in every run"
    )
    started = time.monotonic()
    with ScaleTier(args.nodes) as tier:
        plane = tier.plane
        kubeconfig = reconciler_kubeconfig(plane)
        webhook = start_webhook(plane)
        try:
            for limit in args.limits:
                print(f"\nlimit:      {limit[0]:g} qps, burst {limit[1]}", flush=True)
                floor = measure_floor(plane, kubeconfig, args, limit)
                measured = measure_reconciler(plane, kubeconfig, args, limit)
                print(print_ratio(floor, measured), flush=True)
        finally:
            stop_webhook(plane, webhook)
    print(f"\nthe bench took {time.monotonic() - started:.0f} s")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
