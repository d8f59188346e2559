"""The console's resource charts without I/O: the Prometheus queries it builds confine a tenant to
one namespace and one job's replica pods whatever the names hold, the window covers the job's
life, and Prometheus matrices and metrics.k8s.io samples become aligned series; and the query path
against a Prometheus answering with answers recorded from a real one."""

from __future__ import annotations

import datetime
import re
from typing import Any

import pytest
from support.prometheus import fake_prometheus, recording

from torchjob.console.resources import query_ranges
from torchjob.views.console import series

NOW = datetime.datetime(2026, 1, 1, 1, 0, tzinfo=datetime.UTC)
# What each replica of the recorded job was given and held (tests/support/prometheus.py).
CPU_LIMIT_CORES = 0.3
BALLAST_BYTES = 64 * 2**20


def test_queries_name_the_namespace_and_the_jobs_replica_pods_only() -> None:
    queries = series.prometheus_queries("team-a", "mnist", ["master", "worker"])
    assert set(queries) == {"cpu", "memory", "gpu"}
    for query in queries.values():
        assert 'namespace="team-a"' in query
        assert 'pod=~"mnist-(master|worker)-[0-9]+"' in query
    assert "rate(container_cpu_usage_seconds_total{" in queries["cpu"]
    assert 'container=""' in queries["memory"]  # the pod's cgroup, not its containers too


@pytest.mark.parametrize(
    ("namespace", "job"),
    [
        ('a",namespace=~".*', "job"),
        ("team-a", 'x.*"} or up{namespace="b'),
        ("Team-A", "job"),
        ("team-a", ""),
        ("team-a", "a" * 64),
    ],
)
def test_a_name_that_is_not_a_dns_label_builds_no_query(namespace: str, job: str) -> None:
    with pytest.raises(ValueError, match="DNS labels"):
        series.prometheus_queries(namespace, job, ["worker"])


def test_the_pod_pattern_matches_the_jobs_replicas_and_no_one_elses() -> None:
    pattern = re.compile(series.replica_pod_pattern("a", ["worker"]))
    assert pattern.fullmatch("a-worker-0")
    assert pattern.fullmatch("a-worker-12")
    assert not pattern.fullmatch("a-b-worker-0")  # job "a-b"'s replica
    assert not pattern.fullmatch("a-tensorboard-5d8f-x2x")
    assert not pattern.fullmatch("a-worker-0x")


def test_regex_and_promql_escapes() -> None:
    assert series.regex_literal("a.b(c)*") == r"a\.b\(c\)\*"
    assert series.promql_string('a"b\\c') == '"a\\"b\\\\c"'
    # A type that is no DNS label is not pasted into the pattern.
    assert series.replica_pod_pattern("a", ['x"|.*']) == "a-([a-z0-9-]+)-[0-9]+"


def test_the_window_is_the_jobs_lifetime() -> None:
    job = {
        "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"completionTime": "2026-01-01T00:30:00Z"},
    }
    start, end, step = series.query_window(job, NOW)
    assert (end - start, step) == (1800, 15)
    running = {"metadata": {"creationTimestamp": "2025-12-31T01:00:00Z"}}
    start, end, step = series.query_window(running, NOW)
    assert end == NOW.timestamp()
    assert (end - start) / step <= series.MAX_POINTS


def test_a_matrix_becomes_aligned_series() -> None:
    answer = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {"metric": {"pod": "j-worker-1"}, "values": [[30, "2"], [45, "NaN"]]},
                {"metric": {"pod": "j-worker-0"}, "values": [[15, "0.5"], [30, "1"]]},
            ],
        },
    }
    chart = series.matrix_chart(answer)
    assert chart["times"] == [15, 30, 45]
    assert chart["series"] == {"j-worker-0": [0.5, 1.0, None], "j-worker-1": [None, 2.0, None]}
    assert series.matrix_chart({"status": "success", "data": {"result": []}}) == {
        "times": [],
        "series": {},
    }


def test_pod_metrics_become_one_sample() -> None:
    listed = {
        "kind": "PodMetricsList",
        "items": [
            {
                "metadata": {"name": "j-worker-0"},
                "timestamp": "2026-01-01T00:59:50Z",
                "window": "15s",
                "containers": [
                    {"name": "python", "usage": {"cpu": "1500000000n", "memory": "1Gi"}},
                    {"name": "side", "usage": {"cpu": "250m", "memory": "512Ki"}},
                ],
            }
        ],
    }
    sample = series.metrics_sample(listed, NOW)
    assert sample["cpu"] == {"j-worker-0": 1.75}
    assert sample["memory"] == {"j-worker-0": 2**30 + 512 * 1024}
    assert sample["time"] == NOW.timestamp() - 10
    assert series.metrics_sample({"items": []}, NOW) == {
        "cpu": {},
        "memory": {},
        "time": NOW.timestamp(),
    }


async def test_the_query_path_against_a_recorded_prometheus_answer() -> None:
    recorded = recording()
    queries = series.prometheus_queries(recorded.namespace, recorded.job, recorded.replica_types)
    # The answers are those of exactly the queries the console builds: a change to them needs a
    # new recording.
    assert queries == recorded.queries
    async with fake_prometheus() as prometheus:
        answers = await query_ranges(prometheus.url, queries, recorded.window)
    sent = sorted(q["query"] for q in prometheus.queries)
    assert sent == sorted(queries.values())
    assert all(
        {key: q[key] for key in recorded.window} == recorded.window for q in prometheus.queries
    )
    replicas = [f"{recorded.job}-worker-0", f"{recorded.job}-worker-1"]
    cpu = series.matrix_chart(answers["cpu"])
    memory = series.matrix_chart(answers["memory"])
    assert sorted(cpu["series"]) == replicas == sorted(memory["series"])
    for chart in (cpu, memory):
        assert all(len(values) == len(chart["times"]) for values in chart["series"].values())
    # Each replica spun on a core under a 300m limit and held 64 MiB.
    for pod in replicas:
        assert 0.1 < max(v for v in cpu["series"][pod] if v is not None) <= CPU_LIMIT_CORES
        assert max(v for v in memory["series"][pod] if v is not None) >= BALLAST_BYTES
    # worker-0's first rate came a step after worker-1's: a gap, not a zero.
    assert cpu["series"][replicas[0]][0] is None and cpu["series"][replicas[1]][0] is not None
    assert series.matrix_chart(answers["gpu"])["series"] == {}


async def test_a_query_for_another_jobs_pods_gets_none_of_the_recorded_series() -> None:
    recorded = recording()
    window = recorded.window
    # A job whose name begins the recorded one's, and one whose replicas' names begin with it.
    for job in ("burn", f"{recorded.job}-worker"):
        queries = series.prometheus_queries(recorded.namespace, job, recorded.replica_types)
        async with fake_prometheus() as prometheus:
            answers = await query_ranges(prometheus.url, queries, window)
        assert all(series.matrix_chart(a)["series"] == {} for a in answers.values()), job


def _replica(kind: str, *containers: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "template": {"spec": {"containers": list(containers)}}}


def test_request_and_limit_lines_come_from_the_replicas_pods() -> None:
    trainer = {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2"}}}
    sidecar = {"resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1", "memory": "1Gi"}}}
    job = {"spec": {"replicaSpecs": [_replica("worker", trainer, sidecar)]}}
    bounds = series.pod_bounds(job)
    assert bounds["cpu"] == [
        {"label": "request", "kind": "request", "value": 0.6},
        {"label": "limit", "kind": "limit", "value": 3.0},
    ]
    # The sidecar's limit is its request too (the apiserver's defaulting); the trainer has no
    # memory limit, so the pod has none, and no limit line is drawn.
    assert bounds["memory"] == [{"label": "request", "kind": "request", "value": 2 * 2**30}]


def test_replicas_of_different_bounds_each_get_a_line_named_by_type() -> None:
    small = {"resources": {"requests": {"cpu": "1"}}}
    large = {"resources": {"requests": {"cpu": "4"}}}
    job = {"spec": {"replicaSpecs": [_replica("master", small), _replica("worker", large)]}}
    labels = [line["label"] for line in series.pod_bounds(job)["cpu"]]
    assert labels == ["request (master)", "request (worker)"]
    same = {"spec": {"replicaSpecs": [_replica("master", small), _replica("worker", small)]}}
    assert [line["label"] for line in series.pod_bounds(same)["cpu"]] == ["request"]
