"""What the benches share: the machine they ran on, a service's CPU time and counters, a
namespace the webhook admits in, an informer of the bench's own, a namespace filled with jobs
and a timed GET."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import platform
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from kubernetes_asyncio import client, config

from support.controlplane import ControlPlane
from support.informers import client_like, running
from support.jobs import job_manifest
from support.operator import OPT_IN_LABEL, wait_until_admitting
from support.processes import ServiceProcess
from support.stats import percentile
from torchjob.kube.client import KubeClient
from torchjob.kube.informer import Informer, KubeObject, ResourceKind
from torchjob.kube.resources import JOBS

T = TypeVar("T")


def print_machine() -> None:
    cpus = len(os.sched_getaffinity(0))
    print(f"machine: nproc {cpus}, {platform.system()} {platform.machine()}")
    print(f"python:  {platform.python_implementation()} {platform.python_version()}")


@contextlib.asynccontextmanager
async def watch(
    api: client.ApiClient,
    kind: ResourceKind,
    namespace: str,
    changed: Callable[[KubeObject], None],
    gone: Callable[[KubeObject], None] | None = None,
) -> AsyncIterator[Informer]:
    """The bench's own informer on one namespace, calling `changed` after every add and update
    and `gone` after every deletion."""
    async with client_like(api) as ours:
        informer = Informer(
            ours,
            kind,
            namespace=namespace,
            on_add=changed,
            on_update=lambda _, new: changed(new),
            on_delete=gone,
        )
        async with running(informer, sync_timeout=60) as started:
            yield started


def cpu_seconds(process: ServiceProcess) -> float:
    """User plus system CPU time of a service process so far (/proc/<pid>/stat)."""
    assert process.process is not None
    return process_cpu_seconds(process.process.pid)


def process_cpu_seconds(pid: int) -> float:
    """User plus system CPU time of any process so far (/proc/<pid>/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rpartition(")")[2].split()  # the fields after the command's name
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def memory_mb(process: ServiceProcess) -> dict[str, float]:
    """A service process's peak (VmHWM) and current (VmRSS) resident set, in MB."""
    assert process.process is not None
    return process_memory_mb(process.process.pid)


def process_memory_mb(pid: int) -> dict[str, float]:
    """A process's peak (VmHWM) and current (VmRSS) resident set, in MB (/proc/<pid>/status)."""
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


def new_namespace(plane: ControlPlane, name: str) -> str:
    plane.kubectl("create", "namespace", name)
    plane.kubectl("label", "namespace", name, f"{OPT_IN_LABEL}=on")
    wait_until_admitting(plane, name)
    return name


def delete_namespace(plane: ControlPlane, name: str) -> None:
    """Gone, with everything in it, before the next services start: they cache none of it."""
    plane.kubectl("delete", "namespace", name, "--wait=true", "--timeout=900s", timeout=960)


async def admin_client(plane: ControlPlane) -> client.ApiClient:
    return await config.new_client_from_config(
        config_file=str(plane.kubeconfig), persist_config=False
    )


# Job creations in flight when a bench fills a namespace with jobs.
JOB_CREATORS = 20


async def create_jobs(admin: KubeClient, namespace: str, count: int) -> None:
    """`count` basic jobs, `job-0000` on, created in `namespace`, JOB_CREATORS at a time."""
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(count):
        queue.put_nowait(index)

    async def creator() -> None:
        while not queue.empty():
            index = queue.get_nowait()
            manifest = job_manifest("basic", f"job-{index:04d}")
            await admin.request("POST", JOBS.path(namespace), body=manifest)

    await asyncio.gather(*(creator() for _ in range(JOB_CREATORS)))


async def timed_get(
    session: aiohttp.ClientSession, url: str, **options: Any
) -> tuple[float, float, int]:
    """A GET's seconds to the first byte, seconds to the end, and bytes; it must answer 200."""
    started = time.perf_counter()
    async with session.get(url, **options) as answer:
        first = await answer.content.read(1)
        first_byte = time.perf_counter() - started
        rest = await answer.read()
        assert answer.status == 200, (answer.status, rest[:300])
    return first_byte, time.perf_counter() - started, len(first) + len(rest)


Row = tuple[str, float | None, float | None]  # a figure, ours, theirs


def latency_rows(ours: list[float], theirs: list[float]) -> list[Row]:
    """Status latency p50 and p99 in milliseconds, ours and theirs."""
    return [
        (f"status latency p{p}, ms", percentile(ours, p) * 1000, percentile(theirs, p) * 1000)
        for p in (50, 99)
    ]


def print_ratios(rows: Sequence[Row], theirs: str = "kubeflow") -> None:
    """A table of each figure, torchjob's and `theirs`, and the ratio of the two."""
    row = "{:<40} {:>10} {:>10} {:>10}"
    print()
    print(row.format("figure", "torchjob", theirs, "ratio"))
    for name, mine, other in rows:
        ratio = mine / other if mine is not None and other else math.nan
        shown = [f"{v:.1f}" if v is not None else "none" for v in (mine, other)]
        print(row.format(name, *shown, f"{ratio:.2f}"), flush=True)


@contextlib.asynccontextmanager
async def sampled(sample: Callable[[], Awaitable[object]], interval: float) -> AsyncIterator[None]:
    """`sample()` every `interval` seconds while the block runs."""

    async def loop() -> None:
        while True:
            await sample()
            await asyncio.sleep(interval)

    task = asyncio.create_task(loop(), name="sampling")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def in_parallel(
    senders: int, items: Iterable[T], send: Callable[[T], Awaitable[object]]
) -> None:
    """`send` each item, `senders` at a time, each sender taking the next item when done."""
    pending = iter(items)

    async def sender() -> None:
        for item in pending:
            await send(item)

    await asyncio.gather(*(sender() for _ in range(senders)))
