"""A job's TensorBoard on its own origin: tickets good once, briefly, for one job's host; passes
bound to the console session that asked; a TensorBoard host answered apart from the console; and
the pod passed on to chosen by ownership, never by labels."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from torchjob.console import security, tensorboard
from torchjob.console.board_passes import Board, BoardPasses
from torchjob.console.identity import Identity
from torchjob.console.keys import SESSIONS, SETTINGS
from torchjob.console.sessions import COOKIE, Sessions
from torchjob.console.settings import parse

JOB_A = Board("team-a", "train", "uid-a")
JOB_B = Board("team-b", "train", "uid-b")
DOMAIN = "tb.example.com"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def alive(session_id: str) -> bool:
    return session_id == "s1"


def test_a_ticket_opens_its_job_once_and_only_briefly() -> None:
    clock = Clock()
    passes = BoardPasses(clock=clock, ticket_seconds=60)
    ticket = passes.issue(JOB_A, "s1")
    redeemed = passes.redeem(ticket, passes.label(JOB_A))
    assert redeemed is not None and redeemed[1].board == JOB_A
    assert passes.redeem(ticket, passes.label(JOB_A)) is None  # used
    late = passes.issue(JOB_A, "s1")
    clock.now += 60
    assert passes.redeem(late, passes.label(JOB_A)) is None  # expired


def test_a_ticket_for_one_job_opens_no_other_and_is_spent_by_trying() -> None:
    passes = BoardPasses()
    ticket = passes.issue(JOB_A, "s1")
    assert passes.redeem(ticket, passes.label(JOB_B)) is None
    assert passes.redeem(ticket, passes.label(JOB_A)) is None


def test_a_pass_works_on_its_jobs_host_while_its_session_lives() -> None:
    clock = Clock()
    passes = BoardPasses(clock=clock, pass_seconds=3600)
    redeemed = passes.redeem(passes.issue(JOB_A, "s1"), passes.label(JOB_A))
    assert redeemed is not None
    pass_id, _ = redeemed
    assert passes.find(pass_id, passes.label(JOB_A), alive) is not None
    assert passes.find(pass_id, passes.label(JOB_B), alive) is None
    assert passes.find(pass_id, passes.label(JOB_A), lambda _: False) is None
    # Forgotten with its session: it does not come back.
    assert passes.find(pass_id, passes.label(JOB_A), alive) is None
    other = passes.redeem(passes.issue(JOB_A, "s1"), passes.label(JOB_A))
    assert other is not None
    clock.now += 3600
    assert passes.find(other[0], passes.label(JOB_A), alive) is None
    assert passes.sweep() == 0  # found over, and gone already


def test_each_job_has_a_host_label_of_its_own_that_names_nothing() -> None:
    passes = BoardPasses()
    label = passes.label(JOB_A)
    assert label == passes.label(JOB_A) != passes.label(JOB_B)
    assert label != BoardPasses().label(JOB_A)  # keyed per console
    assert len(label) <= 63 and label.isalnum() and "train" not in label
    # A job deleted and created again under its name is another TensorBoard.
    assert label != passes.label(Board("team-a", "train", "uid-a2"))


def owned(uid: str, owner: str | None, **extra: Any) -> dict[str, Any]:
    references = [{"uid": owner, "controller": True}] if owner else []
    return {"metadata": {"uid": uid, "ownerReferences": references}, **extra}


def ready_pod(uid: str, owner: str | None, ip: str, **spec: Any) -> dict[str, Any]:
    status = {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]}
    return owned(uid, owner, status=status, spec=spec)


def test_the_pod_passed_on_to_is_the_deployments_by_ownership_not_by_label() -> None:
    deployment = owned("d1", "uid-a")
    sets = [owned("rs1", "d1"), owned("rs-forged", "someone-else")]
    impostors = [
        ready_pod("p0", "rs-forged", "10.0.0.66"),
        ready_pod("p1", None, "10.0.0.67"),
        ready_pod("p2", "rs1", "10.0.0.68", hostNetwork=True),
        owned("p3", "rs1", status={"podIP": "10.0.0.69", "conditions": []}),
    ]
    assert tensorboard.owned_pod_address(deployment, sets, impostors) is None
    ours = ready_pod("p4", "rs1", "10.0.0.7")
    assert tensorboard.owned_pod_address(deployment, sets, [*impostors, ours]) == "10.0.0.7"


def test_a_path_reaches_the_pod_quoted_and_never_another_host() -> None:
    assert tensorboard.pod_url("10.0.0.7", "/data/runs") == "http://10.0.0.7:6006/data/runs"
    assert tensorboard.pod_url("fd00::7", "/@evil:1/x") == "http://[fd00::7]:6006/@evil:1/x"
    with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6"):
        tensorboard.pod_url("evil.example.com", "/")


class FakeClient:
    async def close(self) -> None:
        return None


async def console_page(request: web.Request) -> web.Response:
    return web.Response(text="a console page")


@pytest.fixture
async def client() -> AsyncIterator[TestClient[web.Request, web.Application]]:
    app = web.Application(middlewares=[tensorboard.board_host])
    app.on_response_prepare.append(security.secure_headers)  # as the console's app has it
    app[SETTINGS] = parse(["--tensorboard-url", f"https://{DOMAIN}"])
    app[SESSIONS] = Sessions(idle=3600, max_age=3600)
    app[tensorboard.PASSES] = BoardPasses()
    app.router.add_get("/{path:.*}", console_page)
    async with TestClient(TestServer(app)) as test_client:
        yield test_client


def host_of(client: TestClient[web.Request, web.Application], board: Board) -> str:
    return f"{client.app[tensorboard.PASSES].label(board)}.{DOMAIN}"


async def test_a_tensorboard_host_never_reaches_the_console_or_its_session(
    client: TestClient[web.Request, web.Application],
) -> None:
    session = client.app[SESSIONS].open(Identity("viewer"), FakeClient(), "d")  # type: ignore[arg-type]
    cookies = {"Cookie": f"{COOKIE}={session.id}"}
    console = await client.get("/ns/team-a/jobs", headers=cookies)
    assert await console.text() == "a console page"
    board = await client.get("/ns/team-a/jobs", headers={**cookies, "Host": host_of(client, JOB_A)})
    assert board.status == 401 and "a console page" not in await board.text()
    assert board.headers["X-Frame-Options"] == "SAMEORIGIN"
    assert board.headers["X-Content-Type-Options"] == "nosniff"
    # Each origin its own headers: the console's policy on its page, the board's on the board.
    assert console.headers["Content-Security-Policy"] == security.HEADERS["Content-Security-Policy"]
    assert board.headers["Content-Security-Policy"] == "frame-ancestors 'self'"
    assert "Set-Cookie" not in board.headers


async def test_a_ticket_becomes_a_host_only_cookie_that_ends_with_the_session(
    client: TestClient[web.Request, web.Application],
) -> None:
    sessions, passes = client.app[SESSIONS], client.app[tensorboard.PASSES]
    session = sessions.open(Identity("viewer"), FakeClient(), "d")  # type: ignore[arg-type]
    ticket = passes.issue(JOB_A, session.id)
    open_url = f"{tensorboard.OPEN_PATH}?ticket={ticket}"
    wrong = await client.get(open_url, headers={"Host": host_of(client, JOB_B)})
    assert wrong.status == 401
    ticket = passes.issue(JOB_A, session.id)
    opened = await client.get(
        f"{tensorboard.OPEN_PATH}?ticket={ticket}",
        headers={"Host": host_of(client, JOB_A)},
        allow_redirects=False,
    )
    assert opened.status == 303 and opened.headers["Location"] == "/"
    cookie = opened.cookies[tensorboard.PASS_COOKIE]
    assert not cookie["domain"] and cookie["httponly"] and cookie["secure"]
    assert cookie.value != session.id
    assert passes.find(cookie.value, passes.label(JOB_A), lambda s: s == session.id)
    sessions.close(session.id)
    after = await client.get(
        "/",
        headers={"Host": host_of(client, JOB_A), "Cookie": f"torchjob-tensorboard={cookie.value}"},
    )
    assert after.status == 401


async def test_a_post_to_a_tensorboard_comes_from_its_own_origin_only(
    client: TestClient[web.Request, web.Application],
) -> None:
    host = host_of(client, JOB_A)
    answer = await client.post("/data", headers={"Host": host, "Origin": "https://evil.example"})
    assert answer.status == 403


def test_the_tensorboards_base_is_an_origin() -> None:
    assert parse(["--tensorboard-url", "https://tb.example.com/"]).tensorboard_url == (
        "https://tb.example.com"
    )
    assert parse([]).tensorboard_url is None
    for wrong in ("tb.example.com", "https://tb.example.com/boards", "ftp://tb.example.com"):
        with pytest.raises(SystemExit):
            parse(["--tensorboard-url", wrong])
