"""The console's resource charts without I/O: the Prometheus queries it builds confine a tenant to
one namespace and one job's replica pods whatever the names hold, the window covers the job's
life, and Prometheus matrices and metrics.k8s.io samples become aligned series; and the query path
against a Prometheus answering a recorded answer."""

from __future__ import annotations

import datetime
import re

import pytest
from support.prometheus import fake_prometheus

from torchjob.console import series
from torchjob.console.resources import query_ranges

NOW = datetime.datetime(2026, 1, 1, 1, 0, tzinfo=datetime.UTC)


def test_queries_name_the_namespace_and_the_jobs_replica_pods_only() -> None:
    queries = series.prometheus_queries("team-a", "mnist", ["master", "worker"])
    assert set(queries) == {"cpu", "memory", "gpu"}
    for query in queries.values():
        assert 'namespace="team-a"' in query
        assert 'pod=~"mnist-(master|worker)-[0-9]+"' in query
    assert "rate(container_cpu_usage_seconds_total{" in queries["cpu"]
    assert 'container!=""' in queries["memory"]


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
    queries = series.prometheus_queries("team-a", "mnist", ["worker"])
    window = {"start": "1767225600", "end": "1767227400", "step": "15"}
    async with fake_prometheus() as prometheus:
        answers = await query_ranges(prometheus.url, queries, window)
    sent = sorted(q["query"] for q in prometheus.queries)
    assert sent == sorted(queries.values())
    assert all(q["start"] == "1767225600" and q["step"] == "15" for q in prometheus.queries)
    cpu = series.matrix_chart(answers["cpu"])
    assert sorted(cpu["series"]) == ["mnist-worker-0", "mnist-worker-1"]
    assert len(cpu["times"]) == 6
    assert cpu["series"]["mnist-worker-1"][4] is None  # a NaN is a gap, not a zero
    assert series.matrix_chart(answers["gpu"])["series"] == {}
