"""Job metrics: what a status write records for the first time, counted once per job."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY, Counter

from torchjob.lifecycle.conditions import CONDITIONS
from torchjob.reconciler import metrics
from torchjob.reconciler.metrics import JobCollector, JobMetrics, running_gpus, transition
from torchjob.runtime.metrics import CONTROLLER, Families

NOW = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)


def meta(uid: str, namespace: str = "ns-metrics") -> dict[str, Any]:
    return {
        "namespace": namespace,
        "name": "j",
        "uid": uid,
        "creationTimestamp": "2026-01-01T00:00:00Z",
    }


DOCS = Path(__file__).parents[2] / "docs" / "observability.md"
FAILED_ROW_REASONS = sorted(next(row.reasons for row in CONDITIONS if row.type == "Failed"))


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def condition(kind: str, status: str, reason: str = "") -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason}


def replica(uid: str, phase: str, reason: str | None = None) -> dict[str, Any]:
    containers = [{"name": "python", "state": "terminated", "reason": reason}] if reason else []
    return {"name": "j-worker-0", "uid": uid, "phase": phase, "containers": containers}


def test_a_first_status_is_a_created_job() -> None:
    assert transition({}, {"phase": "Pending"}).created
    assert not transition({"phase": "Pending"}, {"phase": "Running"}).created


def test_a_terminal_phase_is_counted_with_the_failed_reason() -> None:
    failed = {
        "phase": "Failed",
        "conditions": [condition("Failed", "True", "BackoffLimitExceeded")],
    }
    facts = transition({"phase": "Running"}, failed)
    assert (facts.outcome, facts.failure_reason) == ("Failed", "BackoffLimitExceeded")
    assert transition(failed, failed).outcome is None  # already written
    odd = {"phase": "Failed", "conditions": [condition("Failed", "True", "SomethingNew")]}
    assert transition({"phase": "Running"}, odd).failure_reason == "Other"


@pytest.mark.parametrize("reason", FAILED_ROW_REASONS)
def test_every_reason_the_failed_condition_can_give_is_counted_by_name(reason: str) -> None:
    failed = {"phase": "Failed", "conditions": [condition("Failed", "True", reason)]}
    assert transition({"phase": "Running"}, failed).failure_reason == reason


def test_the_failed_counter_documents_every_reason_of_the_failed_condition() -> None:
    row = next(
        line for line in DOCS.read_text().splitlines() if "torchjob_jobs_failed_total` |" in line
    )
    missing = [reason for reason in FAILED_ROW_REASONS if reason not in row]
    assert not missing, f"docs/observability.md's torchjob_jobs_failed_total row lacks {missing}"


def test_first_running_only_from_a_job_that_never_ran() -> None:
    running = {"phase": "Running", "conditions": [condition("Running", "True")]}
    assert transition({"phase": "Pending"}, running).first_running
    resumed = {"phase": "Resuming", "conditions": [condition("Paused", "False")]}
    assert not transition(resumed, running).first_running
    restarted = {"phase": "Pending", "backoffCount": 1}
    assert not transition(restarted, running).first_running


def test_restarts_and_ended_replicas() -> None:
    before = {
        "phase": "Running",
        "backoffCount": 1,
        "tasks": [{"replicas": [replica("a", "Running")]}],
    }
    after = {
        "phase": "Running",
        "backoffCount": 2,
        "tasks": [{"replicas": [replica("a", "Failed", "OOMKilled")]}],
    }
    facts = transition(before, after)
    assert facts.restarts == 1
    assert facts.endings == (("a", "OOMKilled"),)
    plain = {"phase": "Running", "tasks": [{"replicas": [replica("b", "Failed")]}]}
    assert transition({"phase": "Running"}, plain).endings == (("b", "Error"),)
    # A replica that ends the job is not restarted.
    ended = {"phase": "Failed", "tasks": [{"replicas": [replica("c", "Failed")]}]}
    assert transition({"phase": "Running"}, ended).endings == ()


def test_a_transition_written_again_from_a_stale_cache_counts_once() -> None:
    counting = JobMetrics()
    ns = "ns-stale"
    failed = {
        "phase": "Failed",
        "backoffCount": 2,
        "completionTime": "2026-01-01T00:05:00Z",
        "conditions": [condition("Failed", "True", "MasterFailed")],
    }
    for _ in range(2):
        counting.written(meta("u1", ns), {}, {"phase": "Pending"}, NOW)
        counting.written(meta("u1", ns), {"phase": "Running", "backoffCount": 0}, failed, NOW)
    assert sample("torchjob_jobs_created_total", namespace=ns) == 1
    assert sample("torchjob_jobs_failed_total", namespace=ns, reason="MasterFailed") == 1
    assert sample("torchjob_job_restarts_total", namespace=ns) == 2
    assert sample("torchjob_jobs_restarted_total", namespace=ns) == 1
    assert sample("torchjob_job_duration_seconds_count", outcome="Failed") >= 1


def test_gauges_come_from_the_cache_only_once_it_has_synced() -> None:
    template = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}
    job = {
        "metadata": {"namespace": "a"},
        "spec": {"replicaSpecs": [{"type": "worker", "replicas": 3, "template": template}]},
        "status": {"phase": "Running", "tasks": [{"type": "worker", "replicas": [{}, {}, {}]}]},
    }
    assert running_gpus(job) == 6
    collector = JobCollector(lambda: None)
    assert list(collector.collect()) == []
    collector.source = lambda: [
        job,
        {"metadata": {"namespace": "a"}, "status": {"phase": "Failed"}},
    ]
    families = {f.name: f for f in collector.collect()}
    phases = {s.labels["phase"]: s.value for s in families["torchjob_jobs"].samples}
    assert phases == {
        "Pending": 0,
        "Running": 1,
        "Paused": 0,
        "Resuming": 0,
        "Succeeded": 0,
        "Failed": 1,
    }
    assert [s.value for s in families["torchjob_running_job_gpus"].samples] == [6]


def test_a_service_exports_only_the_families_it_names_and_no_created_series() -> None:
    Counter("torchjob_test_other_total", "another service's family").inc()
    assert metrics.COLLECTOR in REGISTRY._collector_to_names  # registered once, at import
    body = Families(CONTROLLER | {"torchjob_jobs_created"}).exposition().decode()
    assert "torchjob_test_other" not in body
    assert "# TYPE torchjob_jobs_created_total counter" in body
    assert "_created{" not in body.replace("torchjob_jobs_created", "")
    assert "process_cpu_seconds_total" in body


def test_an_ended_replica_is_counted_once_by_its_pod() -> None:
    counting = JobMetrics()
    ns = "ns-endings"
    before = {"phase": "Running", "tasks": [{"replicas": [replica("p1", "Running")]}]}
    after = {"phase": "Running", "tasks": [{"replicas": [replica("p1", "Failed", "OOMKilled")]}]}
    for _ in range(2):  # the second from a cache that has not seen the first write
        counting.written(meta("u2", ns), before, after, NOW)
    assert sample("torchjob_replica_restarts_total", namespace=ns, reason="OOMKilled") == 1
    # Its replacement ending is another pod.
    again = {"phase": "Running", "tasks": [{"replicas": [replica("p2", "Failed")]}]}
    counting.written(meta("u2", ns), {"phase": "Running"}, again, NOW)
    assert sample("torchjob_replica_restarts_total", namespace=ns, reason="Error") == 1


def test_the_first_time_running_observes_the_time_since_creation() -> None:
    counting = JobMetrics()
    count = sample("torchjob_job_startup_seconds_count")
    over_five_minutes = sample("torchjob_job_startup_seconds_bucket", le="300.0")
    running = {"phase": "Running", "conditions": [condition("Running", "True")]}
    counting.written(meta("u3"), {"phase": "Pending"}, running, NOW)  # 600s after creation
    counting.written(meta("u3"), {"phase": "Pending"}, running, NOW)
    assert sample("torchjob_job_startup_seconds_count") == count + 1
    assert sample("torchjob_job_startup_seconds_bucket", le="300.0") == over_five_minutes


def test_the_webhook_exports_none_of_the_controllers_families() -> None:
    from torchjob.webhook.app import FAMILIES

    body = FAMILIES.exposition().decode()
    assert "torchjob_admission_requests_total" in body
    for other in ("torchjob_reconcile", "torchjob_workqueue", "torchjob_leader", "torchjob_jobs"):
        assert other not in body
