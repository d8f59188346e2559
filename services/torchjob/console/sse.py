"""Server-sent events to a page: each message an event name and its data (HTML for htmx's SSE
extension to swap in), and a comment now and then so that proxies keep an idle stream open and a
closed tab is noticed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

KEEPALIVE_SECONDS = 15.0


class EventStream:
    def __init__(self, response: web.StreamResponse) -> None:
        self.response = response
        self._lock = asyncio.Lock()

    async def send(self, event: str, data: str) -> None:
        lines = "".join(f"data: {line}\n" for line in data.split("\n"))
        async with self._lock:
            await self.response.write(f"event: {event}\n{lines}\n".encode())

    async def keepalive(self) -> None:
        while True:
            await asyncio.sleep(KEEPALIVE_SECONDS)
            async with self._lock:
                await self.response.write(b": keep-alive\n\n")


@contextlib.asynccontextmanager
async def event_stream(request: web.Request) -> AsyncIterator[EventStream]:
    """An open stream to the page; the page's leaving (a reset connection) ends the handler."""
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    stream = EventStream(response)
    keepalive = asyncio.create_task(stream.keepalive())
    try:
        yield stream
    except ConnectionResetError:
        pass
    finally:
        keepalive.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keepalive
