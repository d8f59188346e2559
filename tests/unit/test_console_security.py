"""Every answer of the console carries its security headers, the Content-Security-Policy whole on
every path, streamed and raised answers included; and a request's Authorization header speaks for
that request alone: it never signs a browser's cookie session out or changes whose it is."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from torchjob.console import auth, security, sse
from torchjob.console.identity import ApiServer
from torchjob.console.keys import API_SERVER, PAGES, SESSIONS, SETTINGS, session_of
from torchjob.console.sessions import COOKIE, Sessions
from torchjob.console.settings import parse
from torchjob.console.templating import Pages
from torchjob.kube.errors import Unauthorized

USERS = {"alice-token": "alice", "bob-token": "bob"}


class FakeClient:
    """A user's client: its SelfSubjectReview names the token's user, or is refused."""

    def __init__(self, token: str) -> None:
        self.token = token

    async def request_json(self, method: str, path: str, **_: Any) -> Any:
        if self.token not in USERS:
            raise Unauthorized(401, "Unauthorized", "Unauthorized")
        return {"status": {"userInfo": {"username": USERS[self.token]}}}

    async def close(self) -> None:
        pass


class FakeApiServer:
    def as_token_holder(self, token: str) -> FakeClient:
        return FakeClient(token)


async def whoami(request: web.Request) -> web.Response:
    return web.Response(text=session_of(request).identity.username)


async def moved(request: web.Request) -> web.Response:
    raise web.HTTPSeeOther("/elsewhere")


async def streamed(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    await response.prepare(request)
    await response.write(b"bytes")
    return response


async def live(request: web.Request) -> web.StreamResponse:
    async with sse.event_stream(request) as stream:
        await stream.send("hello", "hi")
    return stream.response


async def quiet(request: web.Request) -> web.StreamResponse:
    """A live page with nothing more to send: only its session's end closes it."""
    async with sse.event_stream(request) as stream:
        await stream.send("hello", "hi")
        await asyncio.Event().wait()
    return stream.response


def console_app() -> web.Application:
    app = web.Application(
        middlewares=[security.show_errors, security.check_origin, auth.require_session]
    )
    app.on_response_prepare.append(security.secure_headers)
    app[SETTINGS] = parse([])
    app[API_SERVER] = cast(ApiServer, FakeApiServer())
    app[SESSIONS] = Sessions(idle=3600, max_age=3600)
    app[PAGES] = Pages()
    app.router.add_get("/sign-in", auth.sign_in_page)
    app.router.add_post("/sign-in", auth.sign_in)
    app.router.add_post("/sign-out", auth.sign_out)
    app.router.add_get("/whoami", whoami)
    app.router.add_get("/ns/tensorboard/jobs/tensorboard/moved", moved)
    app.router.add_get("/ns/a/jobs/b/tensorboard/streamed", streamed)
    app.router.add_get("/stream", live)
    app.router.add_get("/quiet", quiet)
    return app


@pytest.fixture
async def console() -> AsyncIterator[TestServer]:
    server = TestServer(console_app())
    async with server:
        yield server


async def sign_in(server: TestServer, token: str, cookie: str = "") -> str:
    """The session cookie the browser gets for signing in with `token` (holding `cookie`)."""
    async with aiohttp.ClientSession() as client:
        answer = await client.post(
            server.make_url("/sign-in"),
            data={"token": token},
            headers={"Origin": str(server.make_url("")).rstrip("/"), "Cookie": cookie},
            allow_redirects=False,
        )
        assert answer.status == 303, await answer.text()
        return f"{COOKIE}={answer.cookies[COOKIE].value}"


async def fetch(server: TestServer, path: str, **headers: str) -> tuple[int, str, Any]:
    async with aiohttp.ClientSession() as client:
        answer = await client.get(server.make_url(path), headers=headers, allow_redirects=False)
        return answer.status, await answer.text(), answer.headers


@pytest.mark.parametrize(
    "path",
    [
        "/sign-in",  # a page any visitor may see
        "/whoami",  # a redirect to sign in, raised by the middleware
        "/ns/tensorboard/jobs/tensorboard/moved",  # `tensorboard` in the path exempts nothing
        "/ns/a/jobs/b/tensorboard/streamed",
        "/stream",
        "/no-such-page",
    ],
)
async def test_every_answer_has_every_header_the_policy_included(
    console: TestServer, path: str
) -> None:
    cookie = await sign_in(console, "alice-token")
    for headers in ({}, {"Cookie": cookie}):
        status, _, answer = await fetch(console, path, **headers)
        assert status in (200, 303, 404), (path, status)
        for name, value in security.HEADERS.items():
            assert answer.get(name) == value, (path, headers, name)
        assert answer.get("Cache-Control") == "no-store"


async def test_signing_in_again_ends_the_browsers_earlier_session(console: TestServer) -> None:
    first = await sign_in(console, "alice-token")
    second = await sign_in(console, "bob-token", cookie=first)
    assert (await fetch(console, "/whoami", Cookie=first))[0] == 303
    assert (await fetch(console, "/whoami", Cookie=second))[1] == "bob"


async def test_a_bearer_header_speaks_for_its_request_alone(console: TestServer) -> None:
    cookie = await sign_in(console, "alice-token")
    # Two words are no token: an empty one would be sent as none, and the review be anonymous.
    assert (await fetch(console, "/whoami", Cookie=cookie, Authorization="Bearer a b"))[0] == 401
    status, text, headers = await fetch(
        console, "/whoami", Cookie=cookie, Authorization="Bearer forged"
    )
    assert status == 401 and "Authorization" in text and COOKIE not in headers.get("Set-Cookie", "")
    assert (await fetch(console, "/whoami", Cookie=cookie))[1] == "alice"

    status, text, headers = await fetch(
        console, "/whoami", Cookie=cookie, Authorization="Bearer bob-token"
    )
    assert (status, text) == (200, "bob") and "Set-Cookie" not in headers
    assert (await fetch(console, "/whoami", Cookie=cookie))[1] == "alice"
    assert (await fetch(console, "/whoami", Authorization="Bearer bob-token"))[1] == "bob"
    assert len(console.app[SESSIONS]) == 2  # alice's cookie, bob's header: one each


async def test_signing_out_ends_the_sessions_open_streams(console: TestServer) -> None:
    cookie = await sign_in(console, "alice-token")
    async with aiohttp.ClientSession() as client:
        answer = await client.get(console.make_url("/quiet"), headers={"Cookie": cookie})
        assert await answer.content.readuntil(b"\n\n") == b"event: hello\ndata: hi\n\n"
        signed_out = await client.post(
            console.make_url("/sign-out"),
            headers={"Cookie": cookie, "Origin": str(console.make_url("")).rstrip("/")},
            allow_redirects=False,
        )
        assert signed_out.status == 303
        rest = await asyncio.wait_for(answer.content.read(), timeout=30)
        assert b"event: stream-error" in rest and b"signed out" in rest
