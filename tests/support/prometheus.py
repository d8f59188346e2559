"""A Prometheus that answers `query_range` from a recorded answer (tests/data/prometheus), and
keeps every query it was sent, for tests of the console's resource charts."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

RECORDED = Path(__file__).parent.parent / "data" / "prometheus" / "query_range.json"
# Which recorded answer a query gets, by the metric it reads.
METRICS = {
    "container_cpu_usage_seconds_total": "cpu",
    "container_memory_working_set_bytes": "memory",
    "DCGM_FI_DEV_GPU_UTIL": "gpu",
}


@dataclass
class FakePrometheus:
    url: str = ""
    queries: list[dict[str, str]] = field(default_factory=list)
    answers: dict[str, Any] = field(default_factory=lambda: json.loads(RECORDED.read_text()))

    async def query_range(self, request: web.Request) -> web.Response:
        self.queries.append(dict(request.query))
        query = request.query.get("query", "")
        chart = next((name for metric, name in METRICS.items() if metric in query), None)
        if chart is None:
            return web.json_response(
                {"status": "error", "errorType": "bad_data", "error": "unknown metric"}, status=400
            )
        return web.json_response(self.answers[chart])


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
