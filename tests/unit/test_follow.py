"""kube/follow.py against a fake apiserver of lists and watch streams: a 410 lists again once and
loses or repeats nothing, a watch ended at the apiserver's timeout resumes from the last version
(bookmarks included), a failure waiting may cure is tried again after a capped doubling wait,
and a refusal reaches the caller."""

from __future__ import annotations

import ast
import asyncio
import contextlib
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest

from torchjob.kube.errors import Forbidden, Gone, KubeError
from torchjob.kube.follow import Change, Snapshot, WatchEvent, follow
from torchjob.lifecycle.times import doubled_delay

Object = dict[str, Any]


def pod(name: str, version: int) -> Object:
    return {"metadata": {"name": name, "resourceVersion": str(version)}}


def listed(version: int, *pods: Object) -> Object:
    return {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": str(version)},
        "items": list(pods),
    }


def expired() -> WatchEvent:
    return WatchEvent("ERROR", {"kind": "Status", "code": 410, "reason": "Expired"})


class FakeApiserver:
    """Answers lists and watches from scripts, one per request, and records what was asked."""

    def __init__(self, lists: list[Object], watches: list[list[WatchEvent] | Exception]) -> None:
        self.lists, self.watches = lists, watches
        self.listed = 0
        self.watched_from: list[str] = []

    async def list_objects(self) -> Object:
        self.listed += 1
        return self.lists.pop(0)

    async def watch(self, version: str) -> AsyncGenerator[WatchEvent, None]:
        self.watched_from.append(version)
        script = self.watches.pop(0) if self.watches else []
        if isinstance(script, Exception):
            raise script
        for event in script:
            yield event
        if not self.watches:
            await asyncio.Event().wait()  # the last watch stays open: nothing more happens


async def read(api: FakeApiserver, count: int, **options: Any) -> list[Snapshot | Change]:
    """The first `count` things the follow yields."""
    news = follow(api.list_objects, api.watch, retry_base=0.0, retry_cap=0.0, **options)
    seen: list[Snapshot | Change] = []
    async with contextlib.aclosing(news):
        async for item in news:
            seen.append(item)
            if len(seen) == count:
                return seen
    raise AssertionError("the follow ended")


def state_after(news: list[Snapshot | Change]) -> dict[str, str]:
    """What a reader that applies each item knows: each pod's resourceVersion by name."""
    known: dict[str, str] = {}
    for item in news:
        if isinstance(item, Snapshot):
            known = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in item.items}
        elif item.type == "DELETED":
            del known[item.object["metadata"]["name"]]
        else:
            known[item.object["metadata"]["name"]] = item.object["metadata"]["resourceVersion"]
    return known


def test_an_expired_watch_lists_once_again_and_loses_or_repeats_nothing() -> None:
    api = FakeApiserver(
        lists=[listed(10, pod("a", 5)), listed(14, pod("a", 12), pod("b", 11), pod("c", 13))],
        watches=[
            [WatchEvent("ADDED", pod("b", 11)), expired()],
            [WatchEvent("DELETED", pod("a", 15))],
        ],
    )
    news = asyncio.run(read(api, 4))
    assert [type(item).__name__ for item in news] == ["Snapshot", "Change", "Snapshot", "Change"]
    assert api.listed == 2
    assert api.watched_from == ["10", "14"]
    assert state_after(news) == {"b": "11", "c": "13"}


def test_a_gone_answer_to_the_watch_itself_lists_again() -> None:
    api = FakeApiserver(
        lists=[listed(10), listed(20, pod("a", 18))],
        watches=[Gone(410, "Expired", "too old"), []],
    )
    news = asyncio.run(read(api, 2))
    assert state_after(news) == {"a": "18"}
    assert api.listed == 2


def test_a_watch_ended_at_its_timeout_resumes_from_the_last_version_and_bookmark() -> None:
    api = FakeApiserver(
        lists=[listed(10)],
        watches=[
            [WatchEvent("ADDED", pod("a", 11))],
            [WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "30"}})],
            [WatchEvent("MODIFIED", pod("a", 31))],
        ],
    )
    news = asyncio.run(read(api, 3))
    assert api.listed == 1
    assert api.watched_from == ["10", "11", "30"]
    assert state_after(news) == {"a": "31"}


def test_since_skips_the_first_list() -> None:
    api = FakeApiserver(lists=[], watches=[[WatchEvent("ADDED", pod("a", 8))]])
    news = asyncio.run(read(api, 1, since="7"))
    assert news == [Change("ADDED", pod("a", 8))]
    assert api.listed == 0


def test_listed_items_carry_the_kind_as_watched_ones_do() -> None:
    api = FakeApiserver(lists=[listed(1, pod("a", 1))], watches=[])
    (snapshot,) = asyncio.run(read(api, 1))
    assert isinstance(snapshot, Snapshot)
    assert snapshot.items[0]["kind"] == "Pod"
    assert snapshot.items[0]["apiVersion"] == "v1"


def test_failures_that_waiting_may_cure_are_tried_again_from_where_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    unavailable = WatchEvent("ERROR", {"kind": "Status", "code": 500, "reason": "InternalError"})
    api = FakeApiserver(
        lists=[listed(10)],
        watches=[
            KubeError(503, "ServiceUnavailable", "starting"),
            ConnectionResetError(),
            [unavailable],
            [WatchEvent("ADDED", pod("a", 11))],
        ],
    )
    news = follow(api.list_objects, api.watch, retry_base=1.0, retry_cap=3.0)

    async def first_two() -> list[Snapshot | Change]:
        async with contextlib.aclosing(news):
            return [await anext(news), await anext(news)]

    assert state_after(asyncio.run(first_two())) == {"a": "11"}
    assert api.listed == 1
    assert api.watched_from == ["10"] * 4
    assert waits == [doubled_delay(1.0, 3.0, n) for n in range(3)] == [1.0, 2.0, 3.0]


def test_a_refusal_reaches_the_caller() -> None:
    api = FakeApiserver(lists=[listed(10)], watches=[Forbidden(403, "Forbidden", "no")])
    with pytest.raises(Forbidden):
        asyncio.run(read(api, 2))


PACKAGE = Path(__file__).parents[2] / "services" / "torchjob"
# Where a watch is opened and an expired one handled: the informer keeps a cache, the follow
# does not, and the console's UserApi hands the follow its watch made as the user.
WATCHES_OPENED_IN = {"kube/informer.py", "console/user_api.py"}
GONE_HANDLED_IN = {"kube/informer.py", "kube/follow.py"}


def test_no_list_watch_loop_is_written_beside_the_follow() -> None:
    opened, handled = set(), set()
    for path in PACKAGE.rglob("*.py"):
        relative = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "watch"
                and relative != "kube/client.py"
            ):
                opened.add(relative)
            if isinstance(node, ast.Name) and node.id == "Gone" and isinstance(node.ctx, ast.Load):
                handled.add(relative)
    assert opened == WATCHES_OPENED_IN
    assert handled - {"kube/errors.py"} == GONE_HANDLED_IN
