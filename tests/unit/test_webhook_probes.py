"""The webhook's probes, answered by threads of their own from the event loop's heartbeat: they
answer while the loop is busy, and liveness fails only once the loop has really not run."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
import urllib.error
import urllib.request

from aiohttp import web
from support.controlplane import free_port

from torchjob.runtime.probes import Heartbeat, ThreadedProbes, serve_threaded_probes

WAIT = 30


def later(delay: float, port: int, path: str) -> tuple[int, str]:
    time.sleep(delay)
    return get(port, path)


def hold_the_loop(seconds: float) -> None:
    """Called from a coroutine: nothing else runs on its loop meanwhile, the heartbeat neither."""
    time.sleep(seconds)


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=WAIT) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_probes_answer_from_their_checks() -> None:
    problem: list[str] = []
    probes = ThreadedProbes(
        "127.0.0.1", 0, ready=lambda: problem[0] if problem else None, healthy=lambda: None
    )
    probes.start()
    try:
        assert get(probes.port, "/healthz") == (200, "ok")
        assert get(probes.port, "/readyz") == (200, "ok")
        problem.append("no serving certificate yet")
        assert get(probes.port, "/readyz") == (503, "no serving certificate yet")
        status, metrics = get(probes.port, "/metrics")
        assert status == 200 and "python_info" in metrics
        assert get(probes.port, "/nothing")[0] == 404
    finally:
        probes.stop()


async def test_a_stuck_loop_fails_liveness_and_the_probe_still_answers() -> None:
    """The loop is held (a blocking sleep on it) past the heartbeat's threshold: the probe thread
    answers meanwhile, with 503; once the loop runs again, 200."""
    heartbeat = Heartbeat(stall_after=0.3, every=0.05)
    port = free_port()
    context = serve_threaded_probes("127.0.0.1", port, lambda: None, heartbeat)(web.Application())
    await anext(context)
    try:
        await asyncio.sleep(0.1)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            assert get(port, "/healthz") == (200, "ok")
            answer = pool.submit(later, 0.6, port, "/healthz")
            hold_the_loop(1.2)
            status, text = answer.result(timeout=WAIT)
            assert status == 503 and "the event loop has not run for" in text
            assert get(port, "/readyz")[0] == 503
        await asyncio.sleep(0.2)
        assert await asyncio.to_thread(get, port, "/healthz") == (200, "ok")
    finally:
        await anext(context, None)
