"""What the `torchjob` cluster commands print: tables, the description of one job, resource
figures and name suggestions. Pure: objects (as the apiserver returns them, plain JSON dicts) and
the time come in, text goes out."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from torchjob.api import constants
from torchjob.api.queries import GPU_RESOURCE, training_container_in
from torchjob.render.tensorboard import PORT as TENSORBOARD_PORT
from torchjob.render.tensorboard import tensorboard_name, tensorboard_url
from torchjob.render.topology import replica_name

NONE = "<none>"
FINISHED_POD_PHASES = ("Succeeded", "Failed")
_SUFFIXES = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


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


def duration(seconds: int) -> str:
    minutes, secs = divmod(seconds, 60)
    hours, mins = divmod(minutes, 60)
    days, hrs = divmod(hours, 24)
    if minutes < 1:
        return f"{secs}s"
    if minutes < 10:
        return f"{mins}m{secs}s" if secs else f"{mins}m"
    if hours < 1:
        return f"{mins}m"
    if hours < 8:
        return f"{hours}h{mins}m" if mins else f"{hours}h"
    if days < 2:
        return f"{hours}h"
    if days < 8:
        return f"{days}d{hrs}h" if hrs else f"{days}d"
    return f"{days}d"


# -- quantities --------------------------------------------------------------------------------


def quantity(value: Any) -> Decimal:
    """A Kubernetes quantity ("500m", "2Gi", 3) as a number; 0 when unreadable."""
    if isinstance(value, bool):
        return Decimal(0)
    if isinstance(value, int | float):
        return Decimal(str(value))
    if not isinstance(value, str) or not value:
        return Decimal(0)
    text = value.strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if suffix and text.endswith(suffix):
            number = text[: -len(suffix)]
            break
    else:
        suffix, number = "", text
    try:
        return Decimal(number) * _SUFFIXES[suffix]
    except InvalidOperation:
        return Decimal(0)


def format_cpu(cores: Decimal) -> str:
    """Cores as kubectl top shows them: millicores."""
    return f"{int((cores * 1000).to_integral_value())}m"


def format_memory(size: Decimal) -> str:
    """Bytes in Mi, or Gi from 10Gi up."""
    mib = size / (2**20)
    if mib >= 10 * 1024:
        return f"{(mib / 1024).quantize(Decimal('0.1'))}Gi".replace(".0Gi", "Gi")
    return f"{int(mib.to_integral_value())}Mi"


def format_gpus(count: Decimal) -> str:
    return str(int(count)) if count == count.to_integral_value() else str(count.normalize())


@dataclass(slots=True)
class Resources:
    """CPU (cores), memory (bytes) and GPUs."""

    cpu: Decimal = field(default_factory=Decimal)
    memory: Decimal = field(default_factory=Decimal)
    gpus: Decimal = field(default_factory=Decimal)

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu + other.cpu, self.memory + other.memory, self.gpus + other.gpus)

    def times(self, count: int) -> Resources:
        return Resources(self.cpu * count, self.memory * count, self.gpus * count)

    @classmethod
    def of(cls, amounts: Any) -> Resources:
        amounts = amounts if isinstance(amounts, dict) else {}
        return cls(
            quantity(amounts.get("cpu")),
            quantity(amounts.get("memory")),
            quantity(amounts.get(GPU_RESOURCE)),
        )

    @classmethod
    def maximum(cls, a: Resources, b: Resources) -> Resources:
        return cls(max(a.cpu, b.cpu), max(a.memory, b.memory), max(a.gpus, b.gpus))


def container_requests(container: dict[str, Any]) -> Resources:
    """What a container asks for: its requests, else its limits (the apiserver's defaulting)."""
    resources = container.get("resources") or {}
    requests = dict(resources.get("limits") or {})
    requests.update(resources.get("requests") or {})
    return Resources.of(requests)


def pod_spec_requests(pod_spec: dict[str, Any]) -> Resources:
    """What the scheduler reserves for a pod: the sum of its containers, or its largest init
    container when that is more (the scheduler's rule)."""
    total = Resources()
    for container in pod_spec.get("containers") or []:
        total = total + container_requests(container)
    for container in pod_spec.get("initContainers") or []:
        total = Resources.maximum(total, container_requests(container))
    return total


def job_requests(job: dict[str, Any]) -> Resources:
    """What every replica of the job asks for together, from its spec."""
    total = Resources()
    for replica in (job.get("spec") or {}).get("replicaSpecs") or []:
        pod_spec = (replica.get("template") or {}).get("spec") or {}
        total = total + pod_spec_requests(pod_spec).times(int(replica.get("replicas") or 1))
    return total


def job_gpus(job: dict[str, Any]) -> Decimal:
    """GPUs of the job: each replica's training container's limit, times its replicas."""
    total = Decimal(0)
    for replica in (job.get("spec") or {}).get("replicaSpecs") or []:
        pod_spec = (replica.get("template") or {}).get("spec") or {}
        _, container = training_container_in(pod_spec)
        limits = ((container or {}).get("resources") or {}).get("limits") or {}
        total += quantity(limits.get(GPU_RESOURCE)) * int(replica.get("replicas") or 1)
    return total


def is_active(pod: dict[str, Any]) -> bool:
    """The pod holds its node's resources: placed, not finished, not being deleted."""
    phase = (pod.get("status") or {}).get("phase")
    return bool((pod.get("spec") or {}).get("nodeName")) and phase not in FINISHED_POD_PHASES


# -- jobs --------------------------------------------------------------------------------------


def total_replicas(job: dict[str, Any]) -> int:
    return sum(
        int(r.get("replicas") or 1) for r in (job.get("spec") or {}).get("replicaSpecs") or []
    )


def phase(job: dict[str, Any]) -> str:
    return str((job.get("status") or {}).get("phase") or "Pending")


def list_table(
    jobs: list[dict[str, Any]],
    now: datetime,
    *,
    wide: bool = False,
    all_namespaces: bool = False,
    pods: list[dict[str, Any]] | None = None,
) -> str:
    """`torchjob list`: NAME PHASE REPLICAS RESTARTS GPUS AGE; NAMESPACE first with -A; wide
    adds the queue, the nodes of the job's pods and the reason of the latest condition."""
    headers = ["NAME", "PHASE", "REPLICAS", "RESTARTS", "GPUS", "AGE"]
    if all_namespaces:
        headers.insert(0, "NAMESPACE")
    if wide:
        headers += ["QUEUE", "NODES", "REASON"]
    rows = []
    for job in sorted(jobs, key=_job_sort_key):
        meta = job.get("metadata") or {}
        status = job.get("status") or {}
        running = int((status.get("aggregate") or {}).get("running") or 0)
        row = [
            str(meta.get("name")),
            phase(job),
            f"{running}/{total_replicas(job)}",
            str(status.get("backoffCount") or 0),
            format_gpus(job_gpus(job)),
            age(meta.get("creationTimestamp"), now),
        ]
        if all_namespaces:
            row.insert(0, str(meta.get("namespace")))
        if wide:
            queue = (
                ((job.get("spec") or {}).get("scheduler") or {}).get("t9kScheduler") or {}
            ).get("queue")
            nodes = sorted(
                {
                    str((p.get("spec") or {}).get("nodeName"))
                    for p in pods or []
                    if _pod_job(p) == (meta.get("namespace"), meta.get("name"))
                    and (p.get("spec") or {}).get("nodeName")
                }
            )
            latest = latest_condition(status)
            row += [
                queue or NONE,
                ",".join(nodes) or NONE,
                str(latest.get("reason") or NONE) if latest else NONE,
            ]
        rows.append(row)
    return table(headers, rows)


def _job_sort_key(job: dict[str, Any]) -> tuple[str, str]:
    meta = job.get("metadata") or {}
    return str(meta.get("namespace")), str(meta.get("name"))


def _pod_job(pod: dict[str, Any]) -> tuple[Any, Any]:
    meta = pod.get("metadata") or {}
    return meta.get("namespace"), (meta.get("labels") or {}).get(constants.LABEL_JOB_NAME)


def latest_condition(status: dict[str, Any]) -> dict[str, Any] | None:
    """The True condition that changed last (the job's current story)."""
    true = [c for c in status.get("conditions") or [] if c.get("status") == "True"]
    return max(true, key=lambda c: str(c.get("lastTransitionTime") or ""), default=None)


def pod_phase(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return "Terminating"
    return str((pod.get("status") or {}).get("phase") or "Pending")


def pod_restarts(pod: dict[str, Any]) -> int:
    """The replica's restarts that led to this pod (a restart replaces the pod, which carries the
    count), plus any restart of a container inside it."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    carried = str(annotations.get(constants.ANNOTATION_CONSECUTIVE_RESTARTS) or "0")
    return (int(carried) if carried.isdigit() else 0) + sum(
        int(s.get("restartCount") or 0) for s in statuses
    )


def pod_reason(pod: dict[str, Any]) -> str:
    """Why the pod is where it is: the training container's waiting or terminated reason and
    exit code, else the pod's own reason."""
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    _, training = training_container_in(pod.get("spec") or {})
    name = (training or {}).get("name")
    ordered = sorted(statuses, key=lambda s: s.get("name") != name)
    for container in ordered:
        state = container.get("state") or {}
        if "terminated" in state:
            ended = state["terminated"] or {}
            return f"{ended.get('reason') or 'Terminated'} (exit code {ended.get('exitCode')})"
        if "waiting" in state and (state["waiting"] or {}).get("reason"):
            return str(state["waiting"]["reason"])
    for container in (status.get("initContainerStatuses") or [])[::-1]:
        waiting = (container.get("state") or {}).get("waiting") or {}
        running = (container.get("state") or {}).get("running")
        if waiting.get("reason") or running is not None:
            return f"Init:{container.get('name')} {waiting.get('reason') or 'Running'}"
    return str(status.get("reason") or "")


def replica_pods(
    job: dict[str, Any], pods: list[dict[str, Any]]
) -> list[tuple[str, dict[str, Any] | None]]:
    """Every replica's name (`type-index`) with its pod, if it has one, in spec order."""
    meta = job.get("metadata") or {}
    by_name = {(p.get("metadata") or {}).get("name"): p for p in pods}
    out: list[tuple[str, dict[str, Any] | None]] = []
    for replica in (job.get("spec") or {}).get("replicaSpecs") or []:
        for index in range(int(replica.get("replicas") or 1)):
            replica_type = str(replica.get("type"))
            pod = by_name.get(replica_name(str(meta.get("name")), replica_type, index))
            out.append((f"{replica_type}-{index}", pod))
    return out


def describe(
    job: dict[str, Any],
    pods: list[dict[str, Any]],
    events: list[dict[str, Any]],
    now: datetime,
    *,
    tensorboard_pods: list[dict[str, Any]] | None = None,
    event_limit: int = 20,
) -> str:
    """`torchjob get NAME`: the job's phase, conditions, replicas, TensorBoard and Events."""
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    spec = job.get("spec") or {}
    name, namespace = str(meta.get("name")), str(meta.get("namespace"))
    lines = [
        f"Name:        {name}",
        f"Namespace:   {namespace}",
        f"Phase:       {phase(job)}",
        f"Age:         {age(meta.get('creationTimestamp'), now)}",
    ]
    if status.get("startTime"):
        lines.append(f"Started:     {status['startTime']}")
    if status.get("completionTime"):
        lines.append(f"Completed:   {status['completionTime']}")
    limit = (spec.get("runPolicy") or {}).get("backoffLimit")
    lines.append(
        f"Restarts:    {status.get('backoffCount') or 0}"
        + (f" (backoffLimit {limit})" if limit is not None else "")
    )
    pause = (spec.get("runMode") or {}).get("pause") or {}
    if pause.get("enabled"):
        lines.append("Paused:      yes (torchjob resume to start it again)")
    requests = job_requests(job)
    lines.append(
        f"Requests:    {format_gpus(requests.gpus)} GPU(s), {format_cpu(requests.cpu)} CPU, "
        f"{format_memory(requests.memory)} memory in all"
    )

    lines += ["", "Conditions:"]
    conditions = status.get("conditions") or []
    if conditions:
        lines.append(
            _indent(
                table(
                    ["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"],
                    [
                        [
                            str(c.get("type")),
                            str(c.get("status")),
                            str(c.get("reason") or ""),
                            age(c.get("lastTransitionTime"), now),
                            str(c.get("message") or ""),
                        ]
                        for c in conditions
                    ],
                )
            )
        )
    else:
        lines.append("  none yet (the reconciler has not seen the job)")

    lines += ["", "Replicas:"]
    rows = []
    for replica, pod in replica_pods(job, pods):
        if pod is None:
            rows.append([replica, NONE, "", "Absent", "0", ""])
            continue
        rows.append(
            [
                replica,
                str(pod["metadata"]["name"]),
                str((pod.get("spec") or {}).get("nodeName") or ""),
                pod_phase(pod),
                str(pod_restarts(pod)),
                pod_reason(pod),
            ]
        )
    lines.append(_indent(table(["REPLICA", "POD", "NODE", "PHASE", "RESTARTS", "REASON"], rows)))

    if spec.get("tensorboardSpec"):
        lines += ["", "TensorBoard:"]
        board = status.get("tensorboard") or {}
        ready = bool(board.get("ready"))
        running = [p for p in tensorboard_pods or [] if pod_phase(p) == "Running"]
        lines.append(f"  Ready:     {'yes' if ready else 'no'}" + _board_reason(board))
        lines.append(f"  In-cluster URL: {board.get('url') or tensorboard_url(meta)}")
        lines.append(
            f"  Reach it:  torchjob tensorboard {name} -n {namespace}  (port-forward to "
            f"service/{tensorboard_name(name)}:{TENSORBOARD_PORT})"
        )
        if tensorboard_pods is not None and not running:
            lines.append("  No TensorBoard pod is running yet.")

    lines += ["", "Events:"]
    shown = sorted(events, key=_event_moment)[-event_limit:]
    if shown:
        lines.append(
            _indent(
                table(
                    ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
                    [
                        [
                            age(_event_time(e), now),
                            str(e.get("type") or ""),
                            str(e.get("reason") or ""),
                            _involved(e),
                            " ".join(str(e.get("message") or e.get("note") or "").split()),
                        ]
                        for e in shown
                    ],
                )
            )
        )
    else:
        lines.append("  none")
    return "\n".join(lines) + "\n"


def _board_reason(board: dict[str, Any]) -> str:
    reason = board.get("reason")
    message = board.get("message")
    if not reason and not message:
        return ""
    return f" ({reason or ''}{': ' if reason and message else ''}{message or ''})"


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.rstrip("\n").split("\n"))


def _event_time(event: dict[str, Any]) -> str:
    series = event.get("series") or {}
    return str(
        series.get("lastObservedTime")
        or event.get("lastTimestamp")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )


def _event_moment(event: dict[str, Any]) -> datetime:
    """When the event last happened, for ordering (the API writes seconds or microseconds)."""
    return parse_time(_event_time(event)) or datetime.min.replace(tzinfo=UTC)


def _involved(event: dict[str, Any]) -> str:
    involved = event.get("involvedObject") or event.get("regarding") or {}
    return f"{str(involved.get('kind') or '').lower()}/{involved.get('name')}"


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
    for job in sorted(jobs, key=_job_sort_key):
        meta = job.get("metadata") or {}
        key = (meta.get("namespace"), meta.get("name"))
        own = [p for p in pods if _pod_job(p) == key]
        requested = job_requests(job)
        allocated = Resources()
        for pod in own:
            if is_active(pod):
                allocated = allocated + pod_spec_requests(pod.get("spec") or {})
        row = [
            str(meta.get("name")),
            phase(job),
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
        replicas = sum(1 for p in on_node if _pod_job(p)[1])
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
