"""A page's event stream ends when the page has gone, even when it has nothing to send: its
keep-alive finds the connection closed and cancels the handler, which lets go of its watches. It
ends too with its session, and an apiserver's 401 on it ends the session and its other streams."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from support.eventually import eventually

from torchjob.console import sse
from torchjob.console.identity import Identity
from torchjob.console.keys import SESSION, SESSIONS
from torchjob.console.security import Handler
from torchjob.console.sessions import Session, Sessions
from torchjob.kube.errors import Unauthorized


class FakeClient:
    async def close(self) -> None:
        pass


async def quiet(request: web.Request) -> web.StreamResponse:
    async with sse.event_stream(request) as stream:
        await stream.send("hello", "<p>hi</p>")
        await asyncio.Event().wait()  # a watch that never sees a change
    return stream.response


async def refused(request: web.Request) -> web.StreamResponse:
    async with sse.event_stream(request) as stream:
        raise Unauthorized(401, "Unauthorized", "Unauthorized")
    return stream.response


async def served(app: web.Application) -> AsyncIterator[str]:
    """`app` served as `web.run_app` serves the console (a handler is not cancelled when its
    client goes); its URL."""
    runner = web.AppRunner(app, handler_cancellation=False)
    await runner.setup()
    listener = socket.create_server(("127.0.0.1", 0))
    await web.SockSite(runner, listener).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        await runner.cleanup()


def streaming_app(session: Session, sessions: Sessions) -> web.Application:
    @web.middleware
    async def signed_in(request: web.Request, handler: Handler) -> web.StreamResponse:
        request[SESSION] = session
        return await handler(request)

    app = web.Application(middlewares=[signed_in])
    app[SESSIONS] = sessions
    app.router.add_get("/quiet", quiet)
    app.router.add_get("/refused", refused)
    return app


@pytest.fixture
def sessions() -> Sessions:
    return Sessions(idle=3600, max_age=3600)


@pytest.fixture
def session(sessions: Sessions) -> Session:
    return sessions.open(Identity("alice"), FakeClient(), "x")  # type: ignore[arg-type]


async def test_a_quiet_stream_ends_once_its_page_has_gone(
    monkeypatch: pytest.MonkeyPatch, session: Session, sessions: Sessions
) -> None:
    monkeypatch.setattr(sse, "KEEPALIVE_SECONDS", 0.05)
    async for url in served(streaming_app(session, sessions)):
        async with aiohttp.ClientSession() as client:
            async with client.get(f"{url}/quiet") as answer:
                assert answer.headers["Content-Type"] == "text/event-stream"
                first = await answer.content.readuntil(b"\n\n")
                assert first == b"event: hello\ndata: <p>hi</p>\n\n"
                assert session.streams
            # The page has gone: the connection is closed, the handler must end by itself.
            await eventually(lambda: not session.streams, "the handler to end")


async def test_a_401_on_a_stream_ends_its_session_and_the_sessions_other_streams(
    session: Session, sessions: Sessions
) -> None:
    async for url in served(streaming_app(session, sessions)):
        async with aiohttp.ClientSession() as client:
            other = await client.get(f"{url}/quiet")
            await other.content.readuntil(b"\n\n")
            async with client.get(f"{url}/refused") as answer:
                assert b"401 Unauthorized" in await answer.content.read()
            assert session.ended and len(sessions) == 0
            rest = await asyncio.wait_for(other.content.read(), timeout=30)
            assert rest == f"event: stream-error\ndata: {sse.SIGNED_OUT}\n\n".encode()
