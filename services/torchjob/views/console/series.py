"""The resource tab's numbers, without I/O: the Prometheus queries the console builds for a job
(from the URL's namespace and job name only, never from anything else a user sends), the window
they cover, and the charts drawn from a Prometheus matrix or from a metrics.k8s.io PodMetricsList.

A chart is `{"times": [unix seconds...], "series": {pod: [value or None...]}}`, every pod's values
aligned with `times`, as uPlot draws them."""

from __future__ import annotations

import datetime
import math
from typing import Any

from torchjob.api.names import is_dns_1123_label
from torchjob.views.quantities import pod_spec_requests, quantity

Object = dict[str, Any]
Chart = dict[str, Any]

# What a chart of each kind shows, in its unit.
CHARTS = {"cpu": "CPU (cores)", "memory": "Memory (bytes)", "gpu": "GPU utilisation (%)"}
# Prometheus answers at most 11,000 points a series; a chart needs far fewer.
MAX_POINTS = 500
MIN_STEP_SECONDS = 15
# The regular expression operators of RE2 (PromQL's =~), escaped to match themselves.
REGEX_OPERATORS = frozenset("\\.+*?()|[]{}^$")


def regex_literal(text: str) -> str:
    """`text` as an RE2 expression matching exactly it."""
    return "".join(f"\\{c}" if c in REGEX_OPERATORS else c for c in text)


def promql_string(text: str) -> str:
    """`text` as a double-quoted PromQL string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def replica_pod_pattern(job: str, replica_types: list[str]) -> str:
    """A regular expression of the job's replica pods (`<job>-<type>-<index>`) and no one
    else's: not the pods of a job whose name starts with this one's, nor its TensorBoard's."""
    types = [regex_literal(t) for t in replica_types if is_dns_1123_label(t)] or ["[a-z0-9-]+"]
    return f"{regex_literal(job)}-({'|'.join(types)})-[0-9]+"


def prometheus_queries(namespace: str, job: str, replica_types: list[str]) -> dict[str, str]:
    """The queries of each chart, confined to `namespace` and the job's pods. Both names must be
    DNS labels (the caller answers 404 otherwise)."""
    if not (is_dns_1123_label(namespace) and is_dns_1123_label(job)):
        raise ValueError("a namespace and a job name are DNS labels")
    pods = (
        f"namespace={promql_string(namespace)},"
        f"pod=~{promql_string(replica_pod_pattern(job, replica_types))}"
    )
    # The pod's own cgroup (container=""): the kubelet's cAdvisor labels it with the pod on every
    # node, while a container's series carry its name only where cAdvisor reaches the runtime.
    pod_cgroup = f'{pods},container=""'
    return {
        "cpu": f"sum by (pod) (rate(container_cpu_usage_seconds_total{{{pod_cgroup}}}[2m]))",
        "memory": f"sum by (pod) (container_memory_working_set_bytes{{{pod_cgroup}}})",
        "gpu": f"avg by (pod) (DCGM_FI_DEV_GPU_UTIL{{{pods}}})",
    }


def parse_time(timestamp: str | None) -> datetime.datetime | None:
    if not timestamp:
        return None
    try:
        return datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def query_window(job: Object, now: datetime.datetime) -> tuple[float, float, int]:
    """(start, end, step) of the job's lifetime: from its creation to its completion, or to
    now while it runs; a step that keeps each series within MAX_POINTS points."""
    status = job.get("status") or {}
    started = parse_time((job.get("metadata") or {}).get("creationTimestamp")) or now
    ended = parse_time(status.get("completionTime")) or now
    start, end = started.timestamp(), max(ended.timestamp(), started.timestamp() + 60)
    step = max(MIN_STEP_SECONDS, math.ceil((end - start) / MAX_POINTS))
    return start, end, step


def matrix_chart(answer: Object) -> Chart:
    """A Prometheus `query_range` answer (resultType matrix, a series per pod) as a chart."""
    results = (answer.get("data") or {}).get("result") or []
    by_pod: dict[str, dict[float, float | None]] = {}
    for result in results:
        pod = str((result.get("metric") or {}).get("pod") or "")
        points = by_pod.setdefault(pod, {})
        for time, value in result.get("values") or []:
            points[float(time)] = _number(value)
    times = sorted({time for points in by_pod.values() for time in points})
    return {
        "times": times,
        "series": {pod: [by_pod[pod].get(t) for t in times] for pod in sorted(by_pod)},
    }


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def metrics_sample(pod_metrics: Object, now: datetime.datetime) -> Object:
    """A metrics.k8s.io PodMetricsList as one sample: its time (the newest window's end, else
    `now`) and each pod's CPU (cores) and memory (bytes), its containers summed."""
    sample: Object = {"cpu": {}, "memory": {}}
    times = [now.timestamp()]
    for item in pod_metrics.get("items") or []:
        pod = str((item.get("metadata") or {}).get("name") or "")
        containers = item.get("containers") or []
        usage = [c.get("usage") or {} for c in containers]
        sample["cpu"][pod] = float(sum(quantity(u.get("cpu")) for u in usage))
        sample["memory"][pod] = float(sum(quantity(u.get("memory")) for u in usage))
        if stamp := parse_time(item.get("timestamp")):
            times.append(stamp.timestamp())
    sample["time"] = max(times) if len(times) == 1 else max(times[1:])
    return sample


def pod_bounds(training_job: Object) -> dict[str, list[Object]]:
    """The request and limit lines of the CPU and memory charts: what each replica's pod asks for
    (pod_spec_requests, the scheduler's sum) and may use at most (its containers' limits summed;
    none when a container has none), `{"cpu": [{"label", "kind", "value"}...], "memory": ...}`.
    Replicas of the same bounds share a line; it names their types only when they differ."""
    found: dict[tuple[str, str, float], list[str]] = {}
    for replica in (training_job.get("spec") or {}).get("replicaSpecs") or []:
        pod_spec = (replica.get("template") or {}).get("spec") or {}
        requested = pod_spec_requests(pod_spec)
        for chart in ("cpu", "memory"):
            amounts = {
                "request": float(getattr(requested, chart)),
                "limit": _limit(pod_spec, chart),
            }
            for kind, value in amounts.items():
                if value > 0:
                    found.setdefault((chart, kind, value), []).append(str(replica.get("type")))
    bounds: dict[str, list[Object]] = {"cpu": [], "memory": []}
    for (chart, kind, value), types in found.items():
        alone = sum(1 for other in found if other[:2] == (chart, kind)) == 1
        label = kind if alone else f"{kind} ({', '.join(types)})"
        bounds[chart].append({"label": label, "kind": kind, "value": value})
    return bounds


def _limit(pod_spec: Object, resource: str) -> float:
    """The pod's containers' limits of `resource` summed; 0 (no line) when one has none."""
    limits = [
        ((c.get("resources") or {}).get("limits") or {}).get(resource)
        for c in pod_spec.get("containers") or []
    ]
    if not limits or any(limit is None for limit in limits):
        return 0.0
    return float(sum(quantity(limit) for limit in limits))
