"""Server-sent events to a page: each message an event name and its data (HTML for htmx's SSE
extension to swap in), and a comment now and then so that proxies keep an idle stream open and a
closed tab is noticed.

A stream belongs to its session (`Sessions.streaming`): it ends when the session does (sign-out,
another sign-in, the sweep, a revoked token), telling the page so, and a 401 of the apiserver on
the stream ends the session with its other streams."""

from __future__ import annotations

import asyncio
import contextlib
import html
from collections.abc import AsyncIterator

from aiohttp import web

from torchjob.console.keys import SESSIONS, session_of
from torchjob.kube.errors import KubeError, Unauthorized

KEEPALIVE_SECONDS = 15.0
SIGNED_OUT = "The live view stopped: you are signed out. Sign in again to see it."


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
    """An open stream to the page; the page's leaving (a reset connection) or its session's end
    ends the handler. A request refused once the stream is open is sent as the event
    `stream-error`: check what the user may read before opening it, so that a refusal is the
    answer's own status."""
    session, sessions = session_of(request), request.app[SESSIONS]
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
        try:
            with sessions.streaming(session):
                yield stream
        except* ConnectionResetError:
            pass
        except* KubeError as failed:
            # The answer has begun: the apiserver's refusal can only be told to the page now.
            error = failed.exceptions[0]
            assert isinstance(error, KubeError)
            if isinstance(error, Unauthorized):
                sessions.close(session.id)
            await _tell(stream, f"The live view stopped: {error}")
    except asyncio.CancelledError:
        # Outside the except* above, which would re-raise the cancellation inside a group.
        if not session.ended:
            raise
        # The session's end cancelled the handler: the page is told, and the answer ends whole
        # (a cut one would be reconnected to at once).
        handler.uncancel()
        await _tell(stream, SIGNED_OUT)
    finally:
        keepalive.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keepalive


async def _tell(stream: EventStream, message: str) -> None:
    with contextlib.suppress(ConnectionResetError):
        await stream.send("stream-error", html.escape(message))
