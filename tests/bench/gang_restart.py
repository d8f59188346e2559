"""A full-gang restart of one large job: the time from one replica's failure until every
replacement pod exists, against the floor of a plain client doing the same work.

Everything is real but the nodes: the control plane (tests/support/controlplane.py), the webhook
and the reconciler as processes, started as the e2e tests start them, with the reconciler's
default workers, its client-side limit given by --qps and --burst (those of the floor too) and
`--restart-backoff 0`, so that the restart delay does not count. There are no kubelets and no
Node objects: the bench plays the kubelet by patching pod statuses. No pod is ever bound to a
node, so the apiserver removes a deleted pod at once, as a kubelet that stops its containers at
once would have it removed.

The job: one PyTorchTrainingJob of R workers (--replicas, 1,000 by default) with tiny resource
requests, not run by torchrun and annotated `batch.tensorstack.dev/restart-scope: Gang` to be
explicit: a replica that fails restarts the whole gang.

Measured run. The bench creates the job, waits until its own watch has seen the R pods the
reconciler creates, marks every one Running (status patches, KUBELET_CONCURRENCY at a time), and
waits until the job's status says Running. It then starts the clock and marks worker 1's pod
Failed with exit code 1 (one read of the pod, then the status patch). The reconciler restarts the
gang: it deletes every pod and, once they are gone, creates R new ones under the same names. The
clock stops when the bench's watch has seen R pods of the job with uids it had not seen before the
failure, and none of the old ones left. Then, as a sanity line, the job's status.backoffCount and
status.gangRestarts once both show the restart (1 and 1 expected; what they show after
SANITY_TIMEOUT otherwise).

Floor. The same size with no reconciler: the bench creates the job and, with a client as the
reconciler makes one (kube/client.py, the same qps and burst), its R pods rendered as the
reconciler renders them (untimed). With a fresh client of the same limit, its bucket full as the
reconciler's would be after a quiet while, it starts the clock, deletes the R pods (each with its
uid as precondition, as the reconciler deletes) and then creates the R replacements, rendered as
the reconciler renders a gang restart's pods, with as many concurrent senders as the reconciler
has workers; the clock stops as in the measured run. The floor sends nothing but deletions and
creations: no status, no Events, no waiting on a watch between the two.

Printed: both times, the ratio, and the apiserver requests a second each client sent meanwhile
(the reconciler's from its /metrics, Lease renewals, status writes and Events included; by
method; Events go through a token bucket of their own, kube/client.py, so the reconciler's total
may exceed --qps). The webhook is registered in both runs, so every pod is admitted by it in
both. The floor's namespace is deleted before the reconciler starts: it never sees the floor's job.

Prints figures; the exit status says nothing about them. A full run takes minutes on a small
machine:

    .venv/bin/python tests/bench/gang_restart.py                  # 1,000 replicas, 50 qps
    .venv/bin/python tests/bench/gang_restart.py --replicas 50    # a quick check
    .venv/bin/python tests/bench/gang_restart.py --qps 0          # no client-side rate limit
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from torchjob.api import constants
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.kube.client import REQUESTS, KubeClient, new_kube_client
from torchjob.kube.informer import KubeObject
from torchjob.kube.resources import JOBS, PODS
from torchjob.kube.rest import Resources
from torchjob.reconciler.settings import DEFAULT_WORKERS
from torchjob.render.replica_objects import render_pod
from torchjob.render.topology import replica_name, replicas_of
from torchjob.runtime import logging as runtime_logging
from torchjob.runtime.settings import DEFAULT_BURST, DEFAULT_QPS

TESTS_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS_DIR))

from support import ControlPlane  # noqa: E402
from support.bench import (  # noqa: E402
    admin_client,
    delete_namespace,
    difference,
    in_parallel,
    new_namespace,
    print_machine,
    reconciler_counts,
    watch,
)
from support.gang_bench import (  # noqa: E402
    JOB_NAME,
    SETUP_TIMEOUT,
    GangWatch,
    JobWatch,
    RestartAgents,
    create_job,
    play_kubelet_until_running,
    print_sanity,
    until_replaced,
)
from support.operator import (  # noqa: E402
    install_crds,
    reconciler_kubeconfig,
    start_reconciler,
    start_webhook,
    stop_webhook,
)
from support.processes import ServiceProcess  # noqa: E402

FAILED_INDEX = 1  # the worker whose pod fails


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--replicas", type=int, default=1000, help="workers of the job (at least 2)")
    p.add_argument(
        "--qps", type=float, default=DEFAULT_QPS, help="for reconciler and floor (0: no limit)"
    )
    p.add_argument("--burst", type=int, default=DEFAULT_BURST, help="for reconciler and floor")
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds each run's restart may take before the bench reports what it saw",
    )
    args = p.parse_args()
    if args.replicas < FAILED_INDEX + 1:
        p.error(f"--replicas must be at least {FAILED_INDEX + 1}")
    return args


# -- the job -------------------------------------------------------------------------------------


# -- watching ------------------------------------------------------------------------------------


def requests_by_method() -> dict[str, float]:
    """The requests this process's clients sent so far, by method (watches are GETs)."""
    return {
        f"{sample.labels['method']} requests": sample.value
        for metric in REQUESTS.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    }


def sent_since(
    before: dict[str, float], after: dict[str, float], methods: Iterable[str] | None = None
) -> float:
    """The requests sent between two counts, of `methods` only when given."""
    wanted = None if methods is None else {f"{method} requests" for method in methods}
    return sum(
        value - before.get(key, 0)
        for key, value in after.items()
        if key.endswith(" requests") and (wanted is None or key in wanted)
    )


# -- the floor -----------------------------------------------------------------------------------


def replacement_annotations() -> dict[str, str]:
    """What the reconciler puts on a pod of the gang's first restart: the restart charged once,
    none of the replica's own in a row, and the gang restart it was created under."""
    return {
        constants.ANNOTATION_BACKOFF_COUNT: "1",
        constants.ANNOTATION_CONSECUTIVE_RESTARTS: "0",
        constants.ANNOTATION_GANG_RESTARTS: "1",
    }


async def floor_run(
    user: client.ApiClient, kubeconfig: Path, namespace: str, args: argparse.Namespace
) -> tuple[float | None, float]:
    """Seconds from the start until every replacement exists, and the requests sent meanwhile."""
    pods = GangWatch(args.replicas)
    async with watch(user, PODS, namespace, pods.seen, pods.gone):
        job = await create_job(user, namespace, args.replicas)
        meta = job["metadata"]
        spec = PyTorchTrainingJobSpec.from_dict(job["spec"], "spec")
        replicas = replicas_of(spec)
        first = {constants.ANNOTATION_BACKOFF_COUNT: "0", constants.ANNOTATION_GANG_RESTARTS: "0"}
        async with await new_kube_client(str(kubeconfig), qps=args.qps, burst=args.burst) as setup:
            resources = Resources(setup)
            await in_parallel(
                DEFAULT_WORKERS,
                replicas,
                lambda r: resources.create(PODS, namespace, render_pod(meta, spec, r, first)),
            )
            await asyncio.wait_for(pods.all_exist.wait(), SETUP_TIMEOUT)
        async with await new_kube_client(str(kubeconfig), qps=args.qps, burst=args.burst) as plain:
            before = requests_by_method()
            started = pods.fail()
            await restart_as_plain_client(plain, namespace, pods, meta, spec)
            elapsed = await until_replaced(pods, started, args.timeout)
            # The bench's own watches are GETs of this process too: the floor sends none.
            return elapsed, sent_since(before, requests_by_method(), ("DELETE", "POST"))


async def restart_as_plain_client(
    plain: KubeClient,
    namespace: str,
    pods: GangWatch,
    meta: dict[str, Any],
    spec: PyTorchTrainingJobSpec,
) -> None:
    """Every pod deleted, then every replacement created, as many senders as workers."""
    resources = Resources(plain)
    await in_parallel(
        DEFAULT_WORKERS,
        sorted(pods.uids.items()),
        lambda pod: resources.delete(PODS, namespace, pod[0], uid=pod[1]),
    )
    annotations = replacement_annotations()
    await in_parallel(
        DEFAULT_WORKERS,
        replicas_of(spec),
        lambda r: resources.create(PODS, namespace, render_pod(meta, spec, r, annotations)),
    )


def measure_floor(plane: ControlPlane, kubeconfig: Path, args: argparse.Namespace) -> float | None:
    """The floor in a namespace of its own, deleted before anything else starts."""
    webhook = start_webhook(plane)
    try:
        namespace = new_namespace(plane, "gang-floor")
        elapsed, sent = asyncio.run(floor_in(plane, kubeconfig, namespace, args))
    finally:
        stop_webhook(plane, webhook)
        delete_namespace(plane, "gang-floor")
    if elapsed is not None:
        print(
            f"floor:      {elapsed:7.1f} s from the start until every replacement pod exists "
            f"({sent:.0f} requests, {sent / elapsed:.0f} a second)",
            flush=True,
        )
    return elapsed


async def floor_in(
    plane: ControlPlane, kubeconfig: Path, namespace: str, args: argparse.Namespace
) -> tuple[float | None, float]:
    async with await admin_client(plane) as user:
        return await floor_run(user, kubeconfig, namespace, args)


# -- the reconciler ------------------------------------------------------------------------------


async def reconciler_run(
    user: client.ApiClient,
    namespace: str,
    reconciler: ServiceProcess,
    args: argparse.Namespace,
) -> float | None:
    """Seconds from the failure until every replacement exists (None if not in time)."""
    pods, job = GangWatch(args.replicas), JobWatch()
    async with (
        watch(user, PODS, namespace, pods.seen, pods.gone),
        watch(user, JOBS, namespace, job.seen),
    ):
        setup_started = time.perf_counter()
        await create_job(user, namespace, args.replicas)
        kubelet = await play_kubelet_until_running(user, namespace, pods, job, args.replicas)
        setup = time.perf_counter() - setup_started
        print(f"setup:      {setup:7.1f} s until the job of {args.replicas} runs", flush=True)
        before = reconciler_counts(reconciler)
        started = pods.fail()
        await kubelet.finish(replica_name(JOB_NAME, "worker", FAILED_INDEX), 1)
        elapsed = await until_replaced(pods, started, args.timeout)
        after = reconciler_counts(reconciler)
        if elapsed is not None:
            print_reconciler(elapsed, sent_since(before, after), difference(after, before))
        await print_sanity(job)
    return elapsed


def print_reconciler(elapsed: float, sent: float, counts: str) -> None:
    print(
        f"reconciler: {elapsed:7.1f} s from the failure until every replacement pod exists "
        f"({sent:.0f} requests, {sent / elapsed:.0f} a second)",
        flush=True,
    )
    print(f"            meanwhile: {counts} (Lease renewals and Events included)", flush=True)


async def in_place_run(
    user: client.ApiClient,
    namespace: str,
    reconciler: ServiceProcess,
    args: argparse.Namespace,
) -> float | None:
    """Seconds from the failure, restarted in place by its rule, until every pod of the gang has
    restarted in place (None if not in time)."""
    pods, job = GangWatch(args.replicas), JobWatch()
    agents = RestartAgents(client.CoreV1Api(user), namespace, args.replicas)

    def seen(pod: KubeObject) -> None:
        pods.seen(pod)
        agents.seen(pod)

    async with (
        watch(user, PODS, namespace, seen, pods.gone),
        watch(user, JOBS, namespace, job.seen),
    ):
        await create_job(user, namespace, args.replicas)
        await play_kubelet_until_running(user, namespace, pods, job, args.replicas)
        before = reconciler_counts(reconciler)
        started = await agents.fail_in_place(replica_name(JOB_NAME, "worker", FAILED_INDEX))
        try:
            await asyncio.wait_for(agents.restarted.wait(), args.timeout)
        except TimeoutError:
            print(f"in place:   {len(agents.done)} pods restarted within {args.timeout:.0f} s")
            return None
        elapsed = agents.restarted_at - started
        after = reconciler_counts(reconciler)
        sent = sent_since(before, after)
        print(
            f"in place:   {elapsed:7.1f} s from the failure until every pod restarted in place "
            f"({sent:.0f} requests, {sent / elapsed:.0f} a second)",
            flush=True,
        )
        print(f"            meanwhile: {difference(after, before)}", flush=True)
        await print_sanity(job)
    return elapsed


def measure_reconciler(
    plane: ControlPlane, kubeconfig: Path, args: argparse.Namespace, in_place: bool = False
) -> float | None:
    """The reconciler's gang restart, by recreation or (`in_place`) in place, in a namespace
    of its own with a webhook and reconciler of their own."""
    lease = "bench-gang-in-place" if in_place else "bench-gang"
    settings = [
        *("--lease-name", lease, "--log-level", "INFO", "--workers", str(DEFAULT_WORKERS)),
        *("--qps", str(args.qps), "--burst", str(args.burst), "--restart-backoff", "0"),
    ]
    name = "gang-in-place" if in_place else "gang-reconciler"
    run = in_place_run if in_place else reconciler_run
    with contextlib.ExitStack() as stack:
        webhook = start_webhook(plane, *(["--restart-in-place"] if in_place else []))
        stack.callback(stop_webhook, plane, webhook)
        reconciler = start_reconciler(plane, kubeconfig, lease, *settings)
        stack.callback(reconciler.close)
        namespace = new_namespace(plane, name)
        stack.callback(delete_namespace, plane, name)
        return asyncio.run(reconciler_in(plane, namespace, reconciler, args, run))


Run = Callable[[client.ApiClient, str, ServiceProcess, argparse.Namespace], Awaitable[float | None]]


async def reconciler_in(
    plane: ControlPlane,
    namespace: str,
    reconciler: ServiceProcess,
    args: argparse.Namespace,
    run: Run,
) -> float | None:
    async with await admin_client(plane) as user:
        return await run(user, namespace, reconciler, args)


# -- main ----------------------------------------------------------------------------------------


def main() -> None:
    args = parse()
    runtime_logging.configure("bench", "WARNING")  # the bench's own watches: problems only
    # SIGTERM unwinds like Ctrl-C, through the clean-up of every process and directory.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    print_machine()
    limit = f"{args.qps:g} qps, burst {args.burst}" if args.qps > 0 else "none"
    print(
        f"size:       1 job of {args.replicas} workers, restart scope Gang; client limit "
        f"{limit} for reconciler and floor; {DEFAULT_WORKERS} workers each; restart backoff 0"
    )
    started = time.monotonic()
    with ControlPlane() as plane:
        install_crds(plane)
        kubeconfig = reconciler_kubeconfig(plane)
        floor = measure_floor(plane, kubeconfig, args)
        measured = measure_reconciler(plane, kubeconfig, args)
        in_place = measure_reconciler(plane, kubeconfig, args, in_place=True)
    if floor is not None and measured is not None:
        print(f"ratio:      {measured / floor:.2f}x the floor")
    if in_place is not None and measured is not None:
        print(f"in place:   {in_place / measured:.2f}x the time of recreation")
    print(f"\nthe bench took {time.monotonic() - started:.0f} s")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
