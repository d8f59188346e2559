"""`/healthz`, `/readyz` and Prometheus `/metrics` on a plain-HTTP port of their own, so probes
and scrapes never depend on the service's TLS or leadership: on the service's event loop
(`probe_app`, the controllers'), or from threads of their own that read the loop's heartbeat
(`serve_threaded_probes`, the webhook's, whose loop takes requests from anyone who can reach it)."""

from __future__ import annotations

import asyncio
import http.server
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

ReadinessCheck = Callable[[], str | None]  # None when ready (or healthy), else why not
Exposition = Callable[[], bytes]  # the body of /metrics


def probe_app(
    ready: ReadinessCheck,
    healthy: ReadinessCheck | None = None,
    exposition: Exposition = generate_latest,
) -> web.Application:
    """`/readyz` answers 503 with `ready()`'s reason while it gives one; `/healthz` likewise with
    `healthy()` (always 200 without it); `/metrics` with `exposition()`."""

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
        body = exposition()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app


class Heartbeat:
    """When the event loop last ran: a task on the loop beats every `every` seconds, and a probe
    answered off the loop reads how long ago that was. Reads and writes of one float need no lock.
    """

    def __init__(self, stall_after: float, every: float = 1.0) -> None:
        self.stall_after = stall_after
        self.every = every
        self.last = time.monotonic()

    async def run(self) -> None:
        while True:
            self.last = time.monotonic()
            await asyncio.sleep(self.every)

    def problem(self) -> str | None:
        silent = time.monotonic() - self.last
        if silent > self.stall_after:
            return f"the event loop has not run for {silent:.1f}s"
        return None


class ThreadedProbes:
    """`/healthz`, `/readyz` and `/metrics` served by threads of their own, off the event loop, so
    that no load on the loop can starve them. `healthy` and `ready` are called from those threads:
    they must only read (a heartbeat's timestamp, a flag), never touch the loop.

    Each probe connection gets a thread with a socket timeout; at most `max_connections` are
    served at once and any beyond are closed unanswered, so a flood of the probe port costs a
    bounded number of threads."""

    def __init__(
        self,
        host: str,
        port: int,
        ready: ReadinessCheck,
        healthy: ReadinessCheck,
        max_connections: int = 16,
        connection_timeout: float = 5.0,
        exposition: Exposition = generate_latest,
    ) -> None:
        checks = {"/healthz": healthy, "/readyz": ready}
        slots = threading.BoundedSemaphore(max_connections)

        class Handler(http.server.BaseHTTPRequestHandler):
            timeout = connection_timeout  # seconds a connection may sit silent

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, exposition(), CONTENT_TYPE_LATEST)
                elif path in checks:
                    problem = checks[path]()
                    self._send(503 if problem else 200, (problem or "ok").encode(), "text/plain")
                else:
                    self._send(404, b"not found", "text/plain")

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # probes every few seconds are not news

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

            def process_request(self, request: Any, client_address: Any) -> None:
                if not slots.acquire(blocking=False):
                    self.shutdown_request(request)
                    return
                super().process_request(request, client_address)

            def process_request_thread(self, request: Any, client_address: Any) -> None:
                try:
                    super().process_request_thread(request, client_address)
                finally:
                    slots.release()

        self._server = Server((host, port), Handler)
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="probes", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def serve_threaded_probes(
    host: str,
    port: int,
    ready: ReadinessCheck,
    heartbeat: Heartbeat,
    exposition: Exposition = generate_latest,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup_ctx entry: probes off the loop for the main app's lifetime. Liveness fails once
    the loop has not run for `heartbeat.stall_after`; readiness too, or while `ready()` says so."""

    def readiness() -> str | None:
        return heartbeat.problem() or ready()

    async def run(_: web.Application) -> AsyncIterator[None]:
        beat = asyncio.create_task(heartbeat.run(), name="heartbeat")
        probes = ThreadedProbes(host, port, readiness, heartbeat.problem, exposition=exposition)
        probes.start()
        yield
        await asyncio.to_thread(probes.stop)
        beat.cancel()
        await asyncio.gather(beat, return_exceptions=True)

    return run
