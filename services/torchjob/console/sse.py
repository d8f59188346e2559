"""Server-sent events to a page: each message an event name and its data (HTML for htmx's SSE
extension to swap in), and a comment now and then so that proxies keep an idle stream open and a
closed tab is noticed."""

from __future__ import annotations

import asyncio
import contextlib
import html
from collections.abc import AsyncIterator

from aiohttp import web

from torchjob.kube.errors import KubeError

KEEPALIVE_SECONDS = 15.0


class EventStream:
    def __init__(self, response: web.StreamResponse) -> None:
        self.response = response
        self._lock = asyncio.Lock()

    async def send(self, event: str, data: str) -> None:
        lines = "".join(f"data: {line}\n" for line in data.split("\n"))
        async with self._lock:
            await self.response.write(f"event: {event}\n{lines}\n".encode())

    async def keepalive(self, handler: asyncio.Task[object]) -> None:
        """Comments every KEEPALIVE_SECONDS; once one cannot be written the page has gone, and
        `handler` is cancelled: a quiet stream would otherwise hold its watches as the user
        until the next change it had to send."""
        try:
            while True:
                await asyncio.sleep(KEEPALIVE_SECONDS)
                async with self._lock:
                    await self.response.write(b": keep-alive\n\n")
        except ConnectionResetError:
            handler.cancel()


@contextlib.asynccontextmanager
async def event_stream(request: web.Request) -> AsyncIterator[EventStream]:
    """An open stream to the page; the page's leaving (a reset connection) ends the handler. A
    request refused once the stream is open is sent as the event `stream-error`: check what the
    user may read before opening it, so that a refusal is the answer's own status."""
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    stream = EventStream(response)
    handler = asyncio.current_task()
    assert handler is not None
    keepalive = asyncio.create_task(stream.keepalive(handler))
    try:
        yield stream
    except* ConnectionResetError:
        pass
    except* KubeError as failed:
        # The answer has begun: the apiserver's refusal can only be told to the page now.
        error = failed.exceptions[0]
        assert isinstance(error, KubeError)
        message = f"The live view stopped: {error.status} {error.reason}: {error.message}"
        with contextlib.suppress(ConnectionResetError):
            await stream.send("stream-error", html.escape(message))
    finally:
        keepalive.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keepalive
