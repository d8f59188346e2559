"""The metric names each service exports, as Prometheus sees them: read from a /metrics body,
or from the services' own registries in this process (what the chart's dashboard and alerts may
name)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client.registry import Collector

from support.processes import ServiceProcess

# A sample line: its name, then labels or the value.
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]")
_TYPE = re.compile(r"^# TYPE (\S+) (\S+)$")
_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("_sum", "_count"),
}


def series_names(exposition: str) -> set[str]:
    """Every series name a scrape of `exposition` gives, whether or not it has samples yet: a
    family's TYPE line gives its series (`_total` of a counter, `_bucket`, `_sum` and `_count`
    of a histogram) and each sample line its own name."""
    names: set[str] = set()
    for line in exposition.splitlines():
        if match := _TYPE.match(line):
            family, kind = match.groups()
            suffixes = _SUFFIXES.get(kind, ("",))
            stem = family.removesuffix("_total") if kind == "counter" else family
            names.update(stem + suffix for suffix in suffixes)
        elif match := _SAMPLE.match(line):
            names.add(match.group(1))
    return names


# A running job, for the job gauges to have samples (and so label names) in process.
_RUNNING_JOB = {
    "metadata": {"namespace": "n"},
    "spec": {"replicaSpecs": [{"type": "worker"}]},
    "status": {"phase": "Running", "tasks": [{"type": "worker", "replicas": [{}]}]},
}


@contextmanager
def _jobs_gauges_shown(jobs: list[dict[str, object]] | None = None) -> Iterator[None]:
    """The reconciler's job gauges as a leader with `jobs` in its cache exports them."""
    from torchjob.reconciler import metrics

    before = metrics.COLLECTOR.source
    metrics.COLLECTOR.source = lambda: jobs or []
    try:
        yield
    finally:
        metrics.COLLECTOR.source = before


def label_names_in_process() -> dict[str, set[str]]:
    """Each series name of any service with the label names its samples carry (`le` for a
    histogram's buckets), from the metric definitions in this process."""
    from prometheus_client import REGISTRY

    exported_in_process()  # imports every service's metrics
    labels: dict[str, set[str]] = {}
    for collector in list(REGISTRY._collector_to_names):
        names = getattr(collector, "_labelnames", None)
        if names is None:
            continue
        for series in REGISTRY._collector_to_names[collector]:
            extra = {"le"} if series.endswith("_bucket") else set()
            labels[series] = set(names) | extra
    with _jobs_gauges_shown([_RUNNING_JOB]):
        from torchjob.reconciler import metrics

        for family in metrics.COLLECTOR.collect():
            for sample in family.samples:
                labels.setdefault(sample.name, set()).update(sample.labels)
    for admitted in _admission_tally_shown().collect():
        for sample in admitted.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    return labels


def _admission_tally_shown() -> Collector:
    """The webhook's admission metrics as they are once an admission has been answered."""
    from torchjob.webhook.admission.metrics import AdmissionTally

    tally = AdmissionTally()
    tally.answered("validate-jobs", "allowed", 0.001)
    return tally


def exported_in_process() -> dict[str, set[str]]:
    """Each service's series names, from its own registry in this process."""
    from torchjob.housekeeper import controller as _housekeeper  # noqa: F401  (its families)
    from torchjob.reconciler import metrics as reconciler_metrics
    from torchjob.runtime.service import service_families
    from torchjob.webhook.app import FAMILIES as WEBHOOK

    with _jobs_gauges_shown():
        reconciler = service_families("reconciler", reconciler_metrics.FAMILIES).exposition()
    return {
        "webhook": series_names(WEBHOOK.exposition().decode()),
        "reconciler": series_names(reconciler.decode()),
        "housekeeper": series_names(service_families("housekeeper").exposition().decode()),
    }


def failures_counted(process: ServiceProcess, namespace: str) -> dict[str, float]:
    """torchjob_jobs_failed_total of `namespace` in `process`'s /metrics, by reason."""
    found = {}
    for labels, value in process.samples("torchjob_jobs_failed_total").items():
        if f'namespace="{namespace}"' in labels:
            reason = re.search(r'reason="([^"]*)"', labels)
            found[reason.group(1) if reason else ""] = value
    return found
