"""A page's event stream ends when the page has gone, even when it has nothing to send: its
keep-alive finds the connection closed and cancels the handler, which lets go of its watches."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest
from aiohttp import web

from torchjob.console import sse


async def test_a_quiet_stream_ends_once_its_page_has_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sse, "KEEPALIVE_SECONDS", 0.05)
    ended = asyncio.Event()

    async def quiet(request: web.Request) -> web.StreamResponse:
        try:
            async with sse.event_stream(request) as stream:
                await stream.send("hello", "<p>hi</p>")
                await asyncio.Event().wait()  # a watch that never sees a change
            return stream.response
        finally:
            ended.set()

    app = web.Application()
    app.router.add_get("/stream", quiet)
    # As `web.run_app` serves the console: a handler is not cancelled when its client goes.
    runner = web.AppRunner(app, handler_cancellation=False)
    await runner.setup()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    await web.SockSite(runner, listener).start()
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/stream") as answer:
            assert answer.headers["Content-Type"] == "text/event-stream"
            assert await answer.content.readuntil(b"\n\n") == b"event: hello\ndata: <p>hi</p>\n\n"
        # The page has gone: the connection is closed, the handler must end by itself.
        await asyncio.wait_for(ended.wait(), timeout=30)
    await runner.cleanup()
