"""A Prometheus that answers `query_range` with recorded answers, and keeps every query it was
sent, for tests of the console's resource charts.

The answers in tests/data/prometheus were recorded from Prometheus v0.316.0 scraping the real
node's kubelet cAdvisor endpoint (`/metrics/cadvisor`, every 5 s) while a PyTorchTrainingJob of
two `worker` replicas, each spinning on a core and holding 64 MiB for two minutes, ran to
Succeeded: `recording.json` holds what was asked (the namespace, the job, the window and the
queries `torchjob.views.console.series` built for them), and `<chart>.json` each query's raw answer.
The cluster had no GPU exporter, so the GPU query's answer is an empty matrix.

The fake answers a query with the recorded series of the metric it reads whose pod matches the
query's `pod=~` matcher, as Prometheus would: a query for another job's pods gets no series. It
does not look at the namespace (the recorded series, summed by pod, no longer carry it) nor at the
window: tests check those in the queries it kept."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

RECORDED = Path(__file__).parent.parent / "data" / "prometheus"
# Which recorded answer a query gets, by the metric it reads.
METRICS = {
    "container_cpu_usage_seconds_total": "cpu",
    "container_memory_working_set_bytes": "memory",
    "DCGM_FI_DEV_GPU_UTIL": "gpu",
}
# The pod matcher the console puts in every query: a double-quoted PromQL string.
POD_MATCHER = re.compile(r'pod=~"((?:[^"\\]|\\.)*)"')
Object = dict[str, Any]


@dataclass(frozen=True)
class Recording:
    """What was asked of the real Prometheus, and what it answered, by chart."""

    namespace: str
    job: str
    replica_types: list[str]
    window: dict[str, str]
    queries: dict[str, str]
    answers: dict[str, Object]


def recording() -> Recording:
    asked = json.loads((RECORDED / "recording.json").read_text())
    answers = {
        chart: json.loads((RECORDED / f"{chart}.json").read_text()) for chart in asked["queries"]
    }
    return Recording(
        namespace=asked["namespace"],
        job=asked["job"],
        replica_types=asked["replica_types"],
        window=asked["window"],
        queries=asked["queries"],
        answers=answers,
    )


def pod_pattern(query: str) -> re.Pattern[str] | None:
    """The query's `pod=~` regular expression (PromQL anchors it at both ends), or None."""
    matcher = POD_MATCHER.search(query)
    if matcher is None:
        return None
    unquoted = re.sub(r"\\(.)", r"\1", matcher.group(1))
    return re.compile(unquoted)


def answer_for(answer: Object, pods: re.Pattern[str]) -> Object:
    """A recorded answer keeping only the series whose pod `pods` matches whole."""
    data = answer["data"]
    kept = [r for r in data["result"] if pods.fullmatch(r["metric"].get("pod", ""))]
    return {**answer, "data": {**data, "result": kept}}


def bad_data(message: str) -> web.Response:
    return web.json_response(
        {"status": "error", "errorType": "bad_data", "error": message}, status=400
    )


@dataclass
class FakePrometheus:
    url: str = ""
    queries: list[dict[str, str]] = field(default_factory=list)
    recorded: Recording = field(default_factory=recording)

    async def query_range(self, request: web.Request) -> web.Response:
        self.queries.append(dict(request.query))
        query = request.query.get("query", "")
        chart = next((name for metric, name in METRICS.items() if metric in query), None)
        if chart is None:
            return bad_data("unknown metric")
        pods = pod_pattern(query)
        if pods is None:
            return bad_data("a query names its pods")
        return web.json_response(answer_for(self.recorded.answers[chart], pods))


@asynccontextmanager
async def fake_prometheus(host: str = "127.0.0.1") -> AsyncIterator[FakePrometheus]:
    """The fake, listening on a free port of `host` until the block ends."""
    fake = FakePrometheus()
    app = web.Application()
    app.router.add_get("/api/v1/query_range", fake.query_range)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    port = runner.addresses[0][1]
    fake.url = f"http://{host}:{port}"
    try:
        yield fake
    finally:
        await runner.cleanup()
