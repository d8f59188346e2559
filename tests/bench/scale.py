"""Scale: one job of many replicas and many jobs at once, on thousands of fake GPU nodes.

The tier (tests/support/scale.py): the real control plane, the real kube-scheduler with native
gang scheduling (scheduling.k8s.io/v1beta1 PodGroups, GenericWorkload) and kwok playing the
kubelet of N fake nodes of 8 GPUs (--nodes, 1,000 by default), which takes every pod bound to one
to Running. The webhook and the reconciler run as processes, as tests/bench/reconcile.py starts
them, under a venv with only the package installed (`pip install .`, as the image installs it;
--dev-venv: the dev .venv's); the webhook admits every job and pod of every run.

big: one torchrun job of R workers (--replicas, 10,000 by default) that must all start together
(minNodes: R): the reconciler's default gang setting makes it one native PodGroup of R, which
kube-scheduler places whole or not at all. At each client limit of --limits (the chart's default,
50 qps with bursts of 100, and 500 / 1,000):
- create to all Running: from just before the bench creates the job until its own watch of the
  namespace sees all R pods Running; the lines also say when it saw the last pod created and the
  last bound.
- gang restart: once the job's status says Running, the bench annotates worker 1's pod and kwok
  ends its containers with code 1; from the annotation until all R replacements are Running. The
  reconciler runs with --restart-backoff 0, so that its restart delay does not count.
The floor of each: the same with no reconciler, a client as the reconciler makes one (the same
qps and burst, kube/client.py) doing what the reconciler does, its objects rendered as the
reconciler renders them, with as many requests in flight as the reconciler has workers. On
create: the PodGroup, the R Services, then the R Pods. On restart (a fresh client, its bucket full
as the reconciler's would be after a quiet while), once its watch sees the pod Failed: every pod
deleted (uid as precondition), and once all are gone, every replacement created. The same
scheduler and kwok then take them to Running. The figures are the ratios.

many: J torchrun jobs of 8 workers (--jobs, 2,000 by default) submitted at once (8 creations in
flight), at the first limit of --limits, with a webhook and a reconciler started for it: the time
until every pod is Running and until every job's status shows all its replicas Running; status
latency, pod by pod, from the bench's watch seeing the pod Running until its watch of the jobs
sees the job's status show it (p50, p99); each service's CPU seconds over the run, its peak
resident set (VmHWM) and its resident set when idle after it.

kubeflow: the same J jobs x 8 as Kubeflow PyTorchJobs (one Master, seven Workers), run first by
Kubeflow's training-operator v1.9.3 (`make kubeflow-build`; one thread, as its manifests set it,
no gang scheduler), then by torchjob's webhook and reconciler with --kubeflow, at the first limit;
the same figures as many, and their ratios, torchjob over Kubeflow (tests/support/scale_many.py).

Each run has a namespace of its own, deleted (its pods gone) before the next.

Prints figures; the exit status says nothing about them. A full run wants a quiet machine:

    .venv/bin/python tests/bench/scale.py                        # 10,000 replicas; 2,000 jobs
    .venv/bin/python tests/bench/scale.py --benches kubeflow --jobs 100   # side by side, small
    .venv/bin/python tests/bench/scale.py --replicas 1000 --jobs 100   # a quicker one
    .venv/bin/python tests/bench/scale.py --benches big --limits 500:1000
    .venv/bin/python tests/bench/scale.py --nodes 5000 --gpus-per-replica 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from torchjob.api import constants, types
from torchjob.kube.client import new_kube_client
from torchjob.kube.resources import JOBS, PODS
from torchjob.render.topology import replica_name
from torchjob.runtime import logging as runtime_logging
from torchjob.runtime.settings import DEFAULT_BURST, DEFAULT_QPS

TESTS_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS_DIR))

from support import ControlPlane  # noqa: E402
from support.bench import (  # noqa: E402
    admin_client,
    cpu_seconds,
    delete_namespace,
    difference,
    new_namespace,
    print_machine,
    reconciler_counts,
    watch,
)
from support.eventually import eventually  # noqa: E402
from support.installed import install, print_interpreter, services_run_by  # noqa: E402
from support.operator import (  # noqa: E402
    reconciler_kubeconfig,
    start_reconciler,
    start_webhook,
    stop_webhook,
)
from support.scale import EXIT_CODE_ANNOTATION, ScaleTier  # noqa: E402
from support.scale_bench import (  # noqa: E402
    Progress,
    ServiceExited,
    alive,
    big_job,
    close_reporting_exit,
    create_as_reconciler,
    create_custom_object,
    reconcile_times,
    restart_as_reconciler,
    until_running,
    while_alive,
)
from support.scale_kueue import measure_kueue  # noqa: E402
from support.scale_many import measure_many, measure_side_by_side  # noqa: E402

WORKERS = 4  # the reconciler's default --workers
JOB_NAME = "big"
FAILED_INDEX = 1  # the worker whose containers fail
GOAL_RATIO = 1.1
TOKEN_SECONDS = 24 * 3600  # the services' token, for runs of hours
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
        "--service-scopes",
        type=lambda text: text.split(","),
        default=[constants.SERVICE_SCOPE_REPLICA],
        help="the big job's service scopes, each measured with its floor: Replica (a Service per "
        "replica, the default) and/or Job (one for the job), e.g. Replica,Job",
    )
    p.add_argument("--jobs", type=int, default=2000, help="jobs of 8 workers submitted at once")
    p.add_argument(
        "--benches",
        type=lambda text: text.split(","),
        default=["big", "many", "kubeflow"],
        help="which to run, of big (one job of --replicas), many (--jobs jobs of 8), kubeflow "
        "(--jobs PyTorchJobs of 8 run by Kubeflow's operator, then by torchjob) and kueue "
        "(--kueue-jobs jobs of 4 tenants under Kueue's quotas; a job placed in one rack)",
    )
    p.add_argument(
        "--kueue-jobs", type=int, default=200, help="jobs of 8 workers in the kueue bench"
    )
    p.add_argument(
        "--renew-deadline",
        type=float,
        help="the reconciler's --leader-elect-renew-deadline (its lease 1.5 times that); "
        "default: the chart's, 10 s",
    )
    p.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds a run may take to all Running"
    )
    p.add_argument(
        "--dev-venv",
        action="store_true",
        help="run torchjob's services from the dev .venv rather than an installed package",
    )
    return p.parse_args()


def limits(text: str) -> list[Limit]:
    pairs = (item.split(":") for item in text.split(","))
    return [(float(qps), int(burst)) for qps, burst in pairs]


# -- one run -------------------------------------------------------------------------------------


def pods_of(
    user: client.ApiClient, namespace: str, progress: Progress
) -> contextlib.AbstractAsyncContextManager[object]:
    """The bench's watch of the namespace's pods, telling `progress`."""
    return watch(user, PODS, namespace, progress.seen, progress.gone)


def the_big_job(args: argparse.Namespace) -> dict[str, Any]:
    return big_job(JOB_NAME, args.replicas, args.gpus_per_replica, args.service_scope)


Figures = dict[str, float | None]  # seconds to all Running, by what was timed: create, restart


async def fail_worker(user: client.ApiClient, namespace: str, progress: Progress) -> None:
    """The clock starts again; one worker's containers exit with code 1 (kwok's stage)."""
    progress.restart()
    await client.CoreV1Api(user).patch_namespaced_pod(
        replica_name(JOB_NAME, "worker", FAILED_INDEX),
        namespace,
        {"metadata": {"annotations": {EXIT_CODE_ANNOTATION: "1"}}},
    )


async def floor_runs(
    plane: ControlPlane, kubeconfig: Path, namespace: str, args: argparse.Namespace, limit: Limit
) -> Figures:
    """The job created, then its gang restarted, each time by a plain client of its own doing
    what the reconciler does (its bucket full, as the reconciler's after a quiet while)."""
    figures: Figures = {}
    progress = Progress(args.replicas)
    qps, burst = limit
    async with (
        await admin_client(plane) as user,
        pods_of(user, namespace, progress),
    ):
        async with await new_kube_client(str(kubeconfig), qps=qps, burst=burst) as plain:
            progress.start()
            job = await create_custom_object(user, JOBS, namespace, the_big_job(args))
            await create_as_reconciler(plain, job, WORKERS)
            figures["create"] = await until_running(progress, "floor:", "create", args.timeout)
        if figures["create"] is None:
            return figures
        async with await new_kube_client(str(kubeconfig), qps=qps, burst=burst) as plain:
            await fail_worker(user, namespace, progress)
            await restart_as_reconciler(plain, job, progress, WORKERS)
            figures["restart"] = await until_running(progress, "", "failure", args.timeout)
    return figures


async def reconciler_runs(
    plane: ControlPlane, namespace: str, args: argparse.Namespace, figures: Figures
) -> None:
    """The job created, and once its status says Running, one worker failed."""
    progress = Progress(args.replicas)
    async with (
        await admin_client(plane) as user,
        pods_of(user, namespace, progress),
    ):
        progress.start()
        await create_custom_object(user, JOBS, namespace, the_big_job(args))
        figures["create"] = await until_running(progress, "reconciler:", "create", args.timeout)
        if figures["create"] is None:
            return
        await eventually(
            lambda: job_phase(user, namespace),
            "the job's status to say Running",
            timeout=args.timeout,
            interval=0.5,
        )
        await fail_worker(user, namespace, progress)
        figures["restart"] = await until_running(progress, "", "failure", args.timeout)


async def job_phase(user: client.ApiClient, namespace: str) -> bool:
    objects = client.CustomObjectsApi(user)
    job = await objects.get_namespaced_custom_object(
        types.GROUP, types.VERSION, namespace, types.PLURAL, JOB_NAME
    )
    return bool((job.get("status") or {}).get("phase") == "Running")


def measure_floor(
    plane: ControlPlane, kubeconfig: Path, args: argparse.Namespace, limit: Limit
) -> Figures:
    namespace = new_namespace(plane, f"scale-floor-{limit[0]:g}")
    figures = asyncio.run(floor_runs(plane, kubeconfig, namespace, args, limit))
    delete_namespace(plane, namespace)
    return figures


def measure_reconciler(
    plane: ControlPlane, kubeconfig: Path, args: argparse.Namespace, limit: Limit
) -> Figures:
    """The reconciler started for this run with its limit, no restart delay, stopped after."""
    lease = f"scale-{limit[0]:g}"
    settings = [*reconciler_settings(args, lease, limit), "--restart-backoff", "0"]
    reconciler = start_reconciler(plane, kubeconfig, lease, *settings)
    try:
        namespace = new_namespace(plane, f"scale-reconciler-{limit[0]:g}")
        before = reconciler_counts(reconciler)
        figures: Figures = {}
        try:
            asyncio.run(while_alive(reconciler, reconciler_runs(plane, namespace, args, figures)))
        except ServiceExited as exited:
            print(f"reconciler: {exited} before the run ended", flush=True)
        counts = (
            f"{difference(reconciler_counts(reconciler), before)} (Lease renewals included); "
            f"{reconcile_times(reconciler)}; CPU {cpu_seconds(reconciler):.1f} s since it started"
            if alive(reconciler)
            else "nothing known: the reconciler had exited"
        )
    finally:
        close_reporting_exit(reconciler)
    print(f"            meanwhile: {counts}", flush=True)
    delete_namespace(plane, namespace)
    return figures


def reconciler_settings(args: argparse.Namespace, lease: str, limit: Limit) -> list[str]:
    qps, burst = limit
    settings = [
        *("--lease-name", lease, "--log-level", "INFO", "--workers", str(WORKERS)),
        *("--qps", f"{qps:g}", "--burst", str(burst)),
    ]
    if args.renew_deadline is not None:
        lease_seconds = args.renew_deadline * 1.5
        settings += [
            *("--leader-elect-renew-deadline", f"{args.renew_deadline:g}"),
            *("--leader-elect-lease-duration", f"{lease_seconds:g}"),
        ]
    return settings


def print_ratios(floor: Figures, measured: Figures) -> None:
    for what, label in (("create", "create to all Running"), ("restart", "gang restart")):
        base, ours = floor.get(what), measured.get(what)
        if base is None or ours is None:
            print(f"ratio:      {label}: none (a run did not finish)")
            continue
        ratio = ours / base
        verdict = "meets" if ratio <= GOAL_RATIO else "misses"
        print(f"ratio:      {label}: {ratio:.2f}x the floor ({verdict} goal <= {GOAL_RATIO}x)")


# -- main ----------------------------------------------------------------------------------------


def main() -> None:
    args = parse()
    runtime_logging.configure("bench", "WARNING")  # the bench's own watches: problems only
    # SIGTERM unwinds like Ctrl-C, through the clean-up of every process and directory.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    print_machine()
    print(
        f"tier:       {args.nodes} fake nodes of 8 GPUs; {WORKERS} reconciler workers (and floor "
        "senders); the webhook admits every run"
    )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="torchjob-scale-") as tmp:
        python = None if args.dev_venv else install(Path(tmp))
        print_interpreter(python)
        with services_run_by(python), ScaleTier(args.nodes) as tier:
            run_benches(tier, args)
    print(f"\nthe bench took {time.monotonic() - started:.0f} s")
    sys.stdout.flush()


def run_benches(tier: ScaleTier, args: argparse.Namespace) -> None:
    # A full run takes hours: the token (an hour by default, as a kubelet's) must outlast it.
    kubeconfig = reconciler_kubeconfig(tier.plane, TOKEN_SECONDS)
    if "big" in args.benches:
        measure_big(tier.plane, kubeconfig, args)
    many_settings = reconciler_settings(args, "scale-many", args.limits[0])
    if "many" in args.benches:
        measure_many(tier.plane, kubeconfig, args, many_settings)
    if "kubeflow" in args.benches:
        measure_side_by_side(tier.plane, kubeconfig, args, many_settings)
    if "kueue" in args.benches:
        measure_kueue(tier.plane, kubeconfig, args, many_settings)


def measure_big(plane: ControlPlane, kubeconfig: Path, args: argparse.Namespace) -> None:
    gpus = f"{args.gpus_per_replica} GPU" if args.gpus_per_replica else "no GPU"
    print(
        f"big:        one torchrun job of {args.replicas} workers (1 CPU, {gpus} each), one "
        "native PodGroup of all; created, then restarted whole",
        flush=True,
    )
    webhook = start_webhook(plane)
    try:
        for limit in args.limits:
            print(f"\nlimit:      {limit[0]:g} qps, burst {limit[1]}", flush=True)
            by_scope = {}
            for scope in args.service_scopes:
                print(f"scope:      service scope {scope}", flush=True)
                run = argparse.Namespace(**{**vars(args), "service_scope": scope})
                floor = measure_floor(plane, kubeconfig, run, limit)
                by_scope[scope] = measure_reconciler(plane, kubeconfig, run, limit)
                print_ratios(floor, by_scope[scope])
            print_scope_ratios(by_scope)
    finally:
        stop_webhook(plane, webhook)


def print_scope_ratios(by_scope: dict[str, Figures]) -> None:
    """The reconciler's times with one Service for the job against one per replica."""
    replica = by_scope.get(constants.SERVICE_SCOPE_REPLICA)
    job = by_scope.get(constants.SERVICE_SCOPE_JOB)
    if replica is None or job is None:
        return
    for what, label in (("create", "create to all Running"), ("restart", "gang restart")):
        base, ours = replica.get(what), job.get(what)
        shown = f"{ours / base:.2f}x" if base and ours is not None else "none"
        print(f"ratio:      {label}: service scope Job {shown} service scope Replica")


if __name__ == "__main__":
    main()
