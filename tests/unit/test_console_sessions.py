"""The console's sessions: an id the browser holds for a user kept on the server, ended when idle,
when old, when its token expires, and on sign-out; and who a token says it is until then."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest

from torchjob.console.auth import after_sign_in
from torchjob.console.identity import Identity, token_expiry
from torchjob.console.sessions import Session, Sessions, digest
from torchjob.kube.errors import Unauthorized


class FakeClient:
    closed = False

    async def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def jwt(claims: dict[str, object]) -> str:
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"eyJhbGciOiJSUzI1NiJ9.{body}.c2lnbmF0dXJl"


async def test_a_session_is_found_by_its_id_until_it_has_been_idle_too_long() -> None:
    clock = Clock()
    sessions = Sessions(idle=60, max_age=3600, clock=clock)
    client = FakeClient()
    session = sessions.open(Identity("alice"), client, digest("t"))  # type: ignore[arg-type]
    assert len(session.id) >= 40 and sessions.find(session.id) is session
    clock.now += 59
    assert sessions.find(session.id) is session  # used: the idle time starts again
    clock.now += 60
    assert sessions.find(session.id) is None
    await sessions.close_all()
    assert client.closed and len(sessions) == 0


async def test_a_session_ends_at_its_age_limit_or_its_tokens_expiry_whichever_is_first() -> None:
    clock = Clock()
    sessions = Sessions(idle=10_000, max_age=100, clock=clock)
    aged = sessions.open(Identity("a"), FakeClient(), "x")  # type: ignore[arg-type]
    expiring = sessions.open(Identity("b"), FakeClient(), "y", expires=clock.now + 30)  # type: ignore[arg-type]
    clock.now += 31
    assert sessions.find(expiring.id) is None and sessions.find(aged.id) is aged
    clock.now += 70
    assert sessions.sweep() == 1 and sessions.find(aged.id) is None
    await sessions.close_all()


@pytest.mark.parametrize("unknown", [None, "", "made-up"])
async def test_an_unknown_id_finds_nothing(unknown: str | None) -> None:
    assert Sessions(idle=1, max_age=1).find(unknown) is None


def test_a_tokens_expiry_is_read_from_its_claims_and_nothing_else_is_guessed() -> None:
    assert token_expiry(jwt({"exp": 1_900_000_000, "sub": "x"})) == 1_900_000_000
    assert token_expiry(jwt({"sub": "x"})) is None
    assert token_expiry("opaque-token") is None
    assert token_expiry("a.!!!.c") is None


def test_a_service_account_user_names_its_namespace() -> None:
    assert Identity("system:serviceaccount:team-a:bob").service_account_namespace == "team-a"
    assert Identity("alice@example.com").service_account_namespace is None


@pytest.mark.parametrize(
    ("asked", "goes"),
    [
        ("/ns/a/jobs", "/ns/a/jobs"),
        ("/ns/a/jobs?phase=Running", "/ns/a/jobs?phase=Running"),
        ("//evil.example/", "/"),
        ("/\\evil.example/", "/"),
        ("/\t/evil.example/", "/"),
        ("https://evil.example/", "/"),
        ("", "/"),
    ],
)
def test_after_sign_in_the_browser_goes_to_a_path_of_the_console_only(
    asked: str, goes: str
) -> None:
    assert after_sign_in(asked) == goes


async def test_a_revoked_token_ends_its_session_and_cancels_its_streams_at_the_next_check() -> None:
    sessions = Sessions(idle=3600, max_age=3600)
    revoked, kept = FakeClient(), FakeClient()
    streaming = sessions.open(Identity("a"), revoked, "a")  # type: ignore[arg-type]
    still_good = sessions.open(Identity("b"), kept, "b")  # type: ignore[arg-type]
    quiet = sessions.open(Identity("c"), FakeClient(), "c")  # type: ignore[arg-type]

    async def live_page(session: Session) -> None:
        with sessions.streaming(session):
            await asyncio.Event().wait()

    async def review(client: object) -> object:
        if client is revoked:
            raise Unauthorized(401, "Unauthorized", "token revoked")
        if client is kept:
            return {}
        raise AssertionError("a session without streams is not checked")

    pages = [asyncio.create_task(live_page(s)) for s in (streaming, still_good)]
    await asyncio.sleep(0)  # the pages open their streams
    assert await sessions.check_streaming(review) == 1
    assert streaming.ended and sessions.find(streaming.id) is None
    assert sessions.find(still_good.id) is still_good and sessions.find(quiet.id) is quiet
    await asyncio.wait([pages[0]], timeout=30)
    assert pages[0].cancelled() and not pages[1].done()
    pages[1].cancel()
    await sessions.close_all()


async def test_a_session_opened_for_an_authorization_header_is_never_a_cookies() -> None:
    sessions = Sessions(idle=3600, max_age=3600)
    header = sessions.open(Identity("a"), FakeClient(), digest("t"), by_header=True)  # type: ignore[arg-type]
    assert sessions.find(header.id) is None
    assert sessions.find_by_header(digest("t")) is header
    assert sessions.find_by_header(digest("other")) is None
    sessions.close(header.id)
    assert sessions.find_by_header(digest("t")) is None
    await sessions.close_all()
