"""What the `torchjob` cluster commands print in columns: the job list, `top`'s tables, and the
times, phases, reasons and reported progress they show; name suggestions. A job of any API is
read as its kind reads it (render/job_kinds.py): its phase as its API shows it, the rest from the
PyTorchTrainingJob it stands for. Pure: objects (as the apiserver returns them, plain JSON dicts)
and the time come in, text goes out."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from torchjob.api.job_api import JOB_APIS, api_of
from torchjob.api.objects import latest_condition
from torchjob.render.job_kinds import kind_of
from torchjob.views.cli.job_reference import shown
from torchjob.views.quantities import (
    Resources,
    format_cpu,
    format_gpus,
    format_memory,
    is_active,
    job_gpus,
    job_requests,
    pod_spec_requests,
)
from torchjob.views.summary import (
    duration,
    eta_text,
    job_of_pod,
    progress_text,
    start_failure,
    total_replicas,
)

NONE = "<none>"


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 time as the API writes it; None when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


# -- tables ------------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Columns as kubectl aligns them: left-aligned, three spaces apart, no trailing blanks."""
    lines = [list(headers), *[list(r) for r in rows]]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    return "".join(
        "   ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        + "\n"
        for line in lines
    )


def age(since: Any, now: datetime) -> str:
    """kubectl's short duration of the time since `since` (an RFC 3339 string): 45s, 3m12s,
    5h3m, 2d4h, 400d; `<unknown>` when unreadable."""
    moment = parse_time(since)
    if moment is None:
        return "<unknown>"
    return duration(max(0, int((now - moment).total_seconds())))


# -- jobs --------------------------------------------------------------------------------------


def training_view(job: dict[str, Any]) -> dict[str, Any]:
    """The PyTorchTrainingJob a job of any API stands for (its kind's reading of it): its
    replicas' spec and the lifecycle's record in its status."""
    return kind_of(api_of(job)).training_job(job)


def listed_name(job: dict[str, Any]) -> str:
    """The job as the commands take it: `NAME` for a PyTorchTrainingJob, else `kind/NAME`."""
    return shown(api_of(job), str((job.get("metadata") or {}).get("name")))


def in_list_order(jobs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """By namespace, then by API (torchjob's own first), then by name."""
    return sorted(jobs, key=_job_sort_key)


def _job_sort_key(job: dict[str, Any]) -> tuple[str, int, str]:
    meta = job.get("metadata") or {}
    return str(meta.get("namespace")), JOB_APIS.index(api_of(job)), str(meta.get("name"))


def list_phase(job: dict[str, Any]) -> str:
    """The job's phase as its API shows it, or while its replicas cannot start, why:
    `ImagePullFailed` where `kubectl get pods` says ImagePullBackOff."""
    return start_failure(training_view(job)) or kind_of(api_of(job)).phase(job)


def list_table(
    jobs: list[dict[str, Any]],
    now: datetime,
    *,
    wide: bool = False,
    all_namespaces: bool = False,
    pods: list[dict[str, Any]] | None = None,
    queues: dict[tuple[str, str], str] | None = None,
) -> str:
    """`torchjob list`: NAME PHASE REPLICAS RESTARTS PROGRESS ETA GPUS AGE; NAMESPACE first
    with -A; wide adds the queue (with `queues`, by namespace and name, the Kueue queue a job
    waits in and its place: views/queue.py), the nodes of the job's pods and the reason of the
    latest condition (of the start failure, while one holds). NAME is `kind/NAME` for a job of
    another API than PyTorchTrainingJob's; PHASE says why replicas cannot start while they
    cannot (`list_phase`)."""
    headers = ["NAME", "PHASE", "REPLICAS", "RESTARTS", "PROGRESS", "ETA", "GPUS", "AGE"]
    if all_namespaces:
        headers.insert(0, "NAMESPACE")
    if wide:
        headers += ["QUEUE", "NODES", "REASON"]
    rows = []
    for job in in_list_order(jobs):
        meta = job.get("metadata") or {}
        view = training_view(job)
        status = view.get("status") or {}
        running = int((status.get("aggregate") or {}).get("running") or 0)
        row = [
            listed_name(job),
            list_phase(job),
            f"{running}/{total_replicas(view)}",
            str(status.get("backoffCount") or 0),
            progress_text(view),
            eta_text(view),
            format_gpus(job_gpus(view)),
            age(meta.get("creationTimestamp"), now),
        ]
        if all_namespaces:
            row.insert(0, str(meta.get("namespace")))
        if wide:
            waiting = (queues or {}).get((str(meta.get("namespace")), str(meta.get("name"))))
            row += _wide_cells(view, pods or [], waiting)
        rows.append(row)
    return table(headers, rows)


def _wide_cells(job: dict[str, Any], pods: list[dict[str, Any]], waiting: str | None) -> list[str]:
    """The job's queue (`waiting`: the Kueue queue it waits in), the nodes its pods are on and
    the reason of its latest condition."""
    meta = job.get("metadata") or {}
    queue = (((job.get("spec") or {}).get("scheduler") or {}).get("t9kScheduler") or {}).get(
        "queue"
    )
    nodes = sorted(
        {
            str((p.get("spec") or {}).get("nodeName"))
            for p in pods
            if job_of_pod(p) == (meta.get("namespace"), meta.get("name"))
            and (p.get("spec") or {}).get("nodeName")
        }
    )
    latest = latest_condition(job.get("status") or {})
    reason = start_failure(job) or (str(latest.get("reason") or NONE) if latest else NONE)
    return [waiting or queue or NONE, ",".join(nodes) or NONE, reason]


# -- top ---------------------------------------------------------------------------------------


def top_job_table(
    jobs: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    *,
    all_namespaces: bool = False,
    usage: dict[tuple[str, str], Resources] | None = None,
) -> str:
    """`torchjob top job`: what each job requests (its spec, every replica) and what its pods
    hold on nodes now; with metrics (pod usage by namespace and name), what they use."""
    headers = [
        "NAME",
        "PHASE",
        "GPUS(REQ)",
        "GPUS(ALLOC)",
        "CPU(REQ)",
        "CPU(ALLOC)",
        "MEMORY(REQ)",
        "MEMORY(ALLOC)",
    ]
    if usage is not None:
        headers += ["CPU(USED)", "MEMORY(USED)"]
    if all_namespaces:
        headers.insert(0, "NAMESPACE")
    rows = []
    for job in in_list_order(jobs):
        meta = job.get("metadata") or {}
        key = (meta.get("namespace"), meta.get("name"))
        own = [p for p in pods if job_of_pod(p) == key]
        requested = job_requests(training_view(job))
        allocated = Resources()
        for pod in own:
            if is_active(pod):
                allocated = allocated + pod_spec_requests(pod.get("spec") or {})
        row = [
            listed_name(job),
            kind_of(api_of(job)).phase(job),
            format_gpus(requested.gpus),
            format_gpus(allocated.gpus),
            format_cpu(requested.cpu),
            format_cpu(allocated.cpu),
            format_memory(requested.memory),
            format_memory(allocated.memory),
        ]
        if usage is not None:
            used = Resources()
            for pod in own:
                pod_meta = pod.get("metadata") or {}
                used = used + usage.get(
                    (str(pod_meta.get("namespace")), str(pod_meta.get("name"))), Resources()
                )
            row += [format_cpu(used.cpu), format_memory(used.memory)]
        if all_namespaces:
            row.insert(0, str(meta.get("namespace")))
        rows.append(row)
    return table(headers, rows)


def top_node_table(
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    *,
    usage: dict[str, Resources] | None = None,
) -> str:
    """`torchjob top node`: per node, GPUs allocatable and requested by the pods on it (all
    pods, a job's or not), the same for CPU and memory, and how many of the pods are replicas of
    a job; with metrics (node usage by name), what is used."""
    headers = [
        "NAME",
        "GPUS(ALLOCATABLE)",
        "GPUS(REQUESTED)",
        "CPU(ALLOCATABLE)",
        "CPU(REQUESTED)",
        "MEMORY(ALLOCATABLE)",
        "MEMORY(REQUESTED)",
        "JOB PODS",
    ]
    if usage is not None:
        headers += ["CPU(USED)", "MEMORY(USED)"]
    rows = []
    for node in sorted(nodes, key=lambda n: str((n.get("metadata") or {}).get("name"))):
        name = str((node.get("metadata") or {}).get("name"))
        allocatable = Resources.of((node.get("status") or {}).get("allocatable"))
        on_node = [
            p for p in pods if (p.get("spec") or {}).get("nodeName") == name and is_active(p)
        ]
        requested = Resources()
        for pod in on_node:
            requested = requested + pod_spec_requests(pod.get("spec") or {})
        replicas = sum(1 for p in on_node if job_of_pod(p)[1])
        row = [
            name,
            format_gpus(allocatable.gpus),
            format_gpus(requested.gpus),
            format_cpu(allocatable.cpu),
            format_cpu(requested.cpu) + _percent(requested.cpu, allocatable.cpu),
            format_memory(allocatable.memory),
            format_memory(requested.memory) + _percent(requested.memory, allocatable.memory),
            str(replicas),
        ]
        if usage is not None:
            used = usage.get(name, Resources())
            row += [format_cpu(used.cpu), format_memory(used.memory)]
        rows.append(row)
    return table(headers, rows)


def _percent(part: Decimal, whole: Decimal) -> str:
    if not whole:
        return ""
    return f" ({int((part * 100 / whole).to_integral_value())}%)"


# -- names -------------------------------------------------------------------------------------


def similar_names(name: str, names: Iterable[str], limit: int = 3) -> list[str]:
    """The names closest to `name`, best first (a misspelling, a prefix, a different case)."""
    candidates = sorted(set(names))
    close = difflib.get_close_matches(name, candidates, n=limit, cutoff=0.6)
    prefixed = [c for c in candidates if c.startswith(name) or name.startswith(c)]
    folded = [c for c in candidates if c.lower() == name.lower()]
    out: list[str] = []
    for candidate in [*folded, *close, *prefixed]:
        if candidate not in out and candidate != name:
            out.append(candidate)
    return out[:limit]
