"""What the benches share: the machine they ran on, a service's CPU time and counters, a
namespace the webhook admits in, and an informer of the bench's own."""

from __future__ import annotations

import contextlib
import os
import platform
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from kubernetes_asyncio import client, config

from support.controlplane import ControlPlane
from support.informers import client_like, running
from support.operator import OPT_IN_LABEL, wait_until_admitting
from support.processes import ServiceProcess
from torchjob.kube.informer import Informer, KubeObject, ResourceKind


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
