"""`/healthz`, `/readyz` and Prometheus `/metrics` on a plain-HTTP port of their own, so probes
and scrapes never depend on the service's TLS or leadership."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

ReadinessCheck = Callable[[], str | None]  # None when ready (or healthy), else why not


def probe_app(ready: ReadinessCheck, healthy: ReadinessCheck | None = None) -> web.Application:
    """`/readyz` answers 503 with `ready()`'s reason while it gives one; `/healthz` likewise with
    `healthy()` (always 200 without it)."""

    def answer(check: ReadinessCheck | None) -> web.Response:
        problem = check() if check is not None else None
        if problem:
            return web.Response(status=503, text=problem)
        return web.Response(text="ok")

    async def healthz(_: web.Request) -> web.Response:
        return answer(healthy)

    async def readyz(_: web.Request) -> web.Response:
        return answer(ready)

    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app


def serve_probes(
    host: str, port: int, ready: ReadinessCheck
) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup_ctx entry that runs the probe server for the main app's lifetime."""

    async def run(_: web.Application) -> AsyncIterator[None]:
        runner = web.AppRunner(probe_app(ready), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        yield
        await runner.cleanup()

    return run
