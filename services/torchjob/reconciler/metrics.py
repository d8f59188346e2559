"""Job metrics: what a platform team graphs and alerts on, by namespace.

Counters count transitions the job's status records once: a job's first status (created), its
terminal phase (succeeded, failed with the reason), its first time with every replica running,
each restart counted in `status.backoffCount`, and each replica pod seen ended and to be
restarted. `transition(before, after)` reads them off the status the reconciler just wrote and
the status it replaced, and `JobMetrics.written` counts them once that write has succeeded. A
transition the old leader wrote is already in the status a new leader lists, so it is never
counted twice; a counter of a new leader starts at 0, which PromQL's `increase()` and `rate()`
treat as a counter reset. Within one process, a reconcile from a cache that has not caught up
with our own write plans the same transition again: what was counted is remembered per job uid
until the job is gone.

Gauges (jobs by phase, GPUs requested by running jobs) are computed from the jobs informer's
cache at scrape time by `JobCollector`: only a leader has a synced cache, so only the leader
exports them.

No label names a job: namespaces, phases and closed sets of reasons only."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from torchjob.api.constants import FINISHED_JOB_PHASES
from torchjob.api.types import JOB_PHASE_VALUES
from torchjob.lifecycle.conditions import FAILED_REASONS
from torchjob.lifecycle.times import parse_time

PHASES = JOB_PHASE_VALUES

# How a replica's pod ended, as its restart is labelled: the container's terminated reason when
# it is one of these, else "Error" (a failed pod) or "Completed" (restartPolicy Always).
KNOWN_ENDINGS = frozenset(
    {"OOMKilled", "Evicted", "ContainerCannotRun", "DeadlineExceeded", "Error", "Completed"}
)
CREATED = Counter(
    "torchjob_jobs_created_total", "Jobs the reconciler first wrote a status for", ["namespace"]
)
SUCCEEDED = Counter("torchjob_jobs_succeeded_total", "Jobs that succeeded", ["namespace"])
FAILED = Counter(
    "torchjob_jobs_failed_total",
    "Jobs that failed, by the Failed condition's reason",
    ["namespace", "reason"],
)
RESTARTED = Counter(
    "torchjob_jobs_restarted_total",
    "Status writes that counted one or more replica restarts against backoffLimit",
    ["namespace"],
)
RESTARTS = Counter(
    "torchjob_job_restarts_total",
    "Replica restarts counted against backoffLimit (status.backoffCount)",
    ["namespace"],
)
REPLICA_ENDINGS = Counter(
    "torchjob_replica_restarts_total",
    "Replica pods that ended and are to be restarted, by how they ended",
    ["namespace", "reason"],
)
STARTUP = Histogram(
    "torchjob_job_startup_seconds",
    "Time from a job's creation to every replica running, the first time",
    buckets=(1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200),
)
DURATION = Histogram(
    "torchjob_job_duration_seconds",
    "Time from a job's creation to its completion, by outcome",
    ["outcome"],
    buckets=(10, 30, 60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400, 259200),
)

# The families this module exports, for the reconciler's /metrics.
FAMILIES = frozenset(
    {
        "torchjob_jobs_created",
        "torchjob_jobs_succeeded",
        "torchjob_jobs_failed",
        "torchjob_jobs_restarted",
        "torchjob_job_restarts",
        "torchjob_replica_restarts",
        "torchjob_job_startup_seconds",
        "torchjob_job_duration_seconds",
        "torchjob_jobs",
        "torchjob_running_job_gpus",
    }
)


@dataclass(frozen=True, slots=True)
class Transition:
    """What one status write recorded for the first time."""

    created: bool = False
    first_running: bool = False
    outcome: str | None = None  # Succeeded or Failed
    failure_reason: str | None = None
    restarts: int = 0  # replica restarts newly counted in backoffCount
    endings: tuple[tuple[str, str], ...] = ()  # (pod uid, how it ended) of replicas to restart


def _conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in status.get("conditions") or [] if isinstance(c, dict)}


def _replicas(status: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for task in status.get("tasks") or []:
        yield from task.get("replicas") or []


def _ending(replica: Mapping[str, Any]) -> str:
    for container in replica.get("containers") or []:
        reason = container.get("reason")
        if reason in KNOWN_ENDINGS:
            return str(reason)
    return "Completed" if replica.get("phase") == "Succeeded" else "Error"


def transition(before: Mapping[str, Any], after: Mapping[str, Any]) -> Transition:
    """What the status `after`, written over `before`, records that `before` did not."""
    was, now = before.get("phase"), after.get("phase")
    old, new = _conditions(before), _conditions(after)
    outcome = str(now) if now in FINISHED_JOB_PHASES and was not in FINISHED_JOB_PHASES else None
    reason = None
    if outcome == "Failed":
        said = str(new.get("Failed", {}).get("reason") or "")
        # The Failed condition's own reasons (lifecycle/conditions.py); anything else (a status
        # an older version wrote) is "Other".
        reason = said if said in FAILED_REASONS else "Other"
    first_running = (
        now == "Running"
        and was in (None, "Pending")
        and old.get("Running", {}).get("status") != "True"
        and "Paused" not in old
        and "Debug" not in old
        and not before.get("backoffCount")
    )
    restarts = max(0, int(after.get("backoffCount") or 0) - int(before.get("backoffCount") or 0))
    endings: list[tuple[str, str]] = []
    if now not in FINISHED_JOB_PHASES:
        ended_before = {
            str(r.get("uid")): r.get("phase") for r in _replicas(before) if r.get("uid")
        }
        for replica in _replicas(after):
            uid, phase = replica.get("uid"), replica.get("phase")
            if uid and phase in FINISHED_JOB_PHASES and ended_before.get(str(uid)) != phase:
                endings.append((str(uid), _ending(replica)))
    return Transition(
        created=not was and bool(now),
        first_running=first_running,
        outcome=outcome,
        failure_reason=reason,
        restarts=restarts,
        endings=tuple(endings),
    )


@dataclass(slots=True)
class _Counted:
    """What this process has counted of one job, against re-counting from a stale cache."""

    created: bool = False
    first_running: bool = False
    outcome: bool = False
    backoff: int = 0
    endings: set[str] = field(default_factory=set)


class JobMetrics:
    """Counts what each status write records, once per job per process."""

    def __init__(self) -> None:
        self._counted: dict[str, _Counted] = {}

    def written(
        self,
        meta: Mapping[str, Any],
        before: Mapping[str, Any],
        after: Mapping[str, Any],
        now: datetime,
    ) -> Transition:
        """Count what `after`, just written over `before`, records for the first time."""
        facts = transition(before, after)
        namespace = str(meta.get("namespace", ""))
        counted = self._counted.setdefault(str(meta.get("uid", "")), _Counted())
        created = parse_time(meta.get("creationTimestamp"))
        if facts.created and not counted.created:
            counted.created = True
            CREATED.labels(namespace).inc()
        if facts.first_running and not counted.first_running:
            counted.first_running = True
            if created is not None:
                STARTUP.observe(max(0.0, (now - created).total_seconds()))
        if facts.outcome and not counted.outcome:
            counted.outcome = True
            if facts.outcome == "Succeeded":
                SUCCEEDED.labels(namespace).inc()
            else:
                FAILED.labels(namespace, facts.failure_reason or "Other").inc()
            done = parse_time(after.get("completionTime")) or now
            if created is not None:
                DURATION.labels(facts.outcome).observe(max(0.0, (done - created).total_seconds()))
        backoff = int(after.get("backoffCount") or 0)
        new = backoff - max(counted.backoff, backoff - facts.restarts)
        if facts.restarts and new > 0:
            counted.backoff = backoff
            RESTARTED.labels(namespace).inc()
            RESTARTS.labels(namespace).inc(new)
        for uid, how in facts.endings:
            if uid not in counted.endings:
                counted.endings.add(uid)
                REPLICA_ENDINGS.labels(namespace, how).inc()
        return facts

    def forget(self, uid: str) -> None:
        """The job is gone: nothing of it will be written again."""
        self._counted.pop(uid, None)


def _gpus_per_pod(template: Mapping[str, Any]) -> float:
    total = 0.0
    for container in (template.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        for name, value in asked.items():
            if str(name).endswith("/gpu"):
                try:
                    total += float(value)
                except (TypeError, ValueError):
                    continue
    return total


def running_gpus(job: Mapping[str, Any]) -> float:
    """The GPUs a running job's replica pods ask for: each replica the status lists, times the
    GPUs its type's template asks for (limits, else requests, of any `*/gpu` resource)."""
    per_type = {
        str(s.get("type")): _gpus_per_pod(s.get("template") or {})
        for s in (job.get("spec") or {}).get("replicaSpecs") or []
    }
    status = job.get("status") or {}
    total = 0.0
    for task in status.get("tasks") or []:
        total += per_type.get(str(task.get("type")), 0.0) * len(task.get("replicas") or [])
    return total


JobSource = Callable[[], Iterable[Mapping[str, Any]] | None]


class JobCollector(Collector):
    """Jobs by namespace and phase, and the GPUs running jobs ask for by namespace, read from the
    jobs cache at scrape time; nothing until the cache has synced (only the leader's does).
    `source` gives the cached jobs, or None while there is no synced cache."""

    def __init__(self, source: JobSource | None = None) -> None:
        self.source = source

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # not known before a scrape: keeps registration from calling collect()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        jobs = self.source() if self.source is not None else None
        if jobs is None:
            return
        phases: dict[tuple[str, str], int] = {}
        gpus: dict[str, float] = {}
        for job in jobs:
            namespace = str((job.get("metadata") or {}).get("namespace", ""))
            phase = str((job.get("status") or {}).get("phase") or "Pending")
            phases[namespace, phase] = phases.get((namespace, phase), 0) + 1
            if phase == "Running":
                gpus[namespace] = gpus.get(namespace, 0.0) + running_gpus(job)
        by_phase = GaugeMetricFamily(
            "torchjob_jobs", "Jobs by namespace and phase", labels=["namespace", "phase"]
        )
        for namespace in sorted({n for n, _ in phases}):
            for phase in PHASES:
                by_phase.add_metric([namespace, phase], phases.get((namespace, phase), 0))
        yield by_phase
        requested = GaugeMetricFamily(
            "torchjob_running_job_gpus",
            "GPUs the replica pods of running jobs ask for, by namespace",
            labels=["namespace"],
        )
        for namespace, count in sorted(gpus.items()):
            requested.add_metric([namespace], count)
        yield requested


# One per process, registered once: the reconciler points it at its jobs cache.
COLLECTOR = JobCollector()
REGISTRY.register(COLLECTOR)
