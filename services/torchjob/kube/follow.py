"""Following a list of objects outside the informer: list, then watch from the list's
resourceVersion, as kopf's `infinite_watch` and client-go's reflector do. One loop for every
page or command that follows what it shows, so that each handles an expired watch the same way:

- the list comes first as a `Snapshot`, then each change as a `Change`;
- a watch the apiserver ends at its timeout is made again from the last resourceVersion seen
  (bookmarks included), so nothing is missed and nothing is listed again;
- a 410 Gone (the version expired: an error event, or the watch's own answer) lists again, and
  the new `Snapshot` stands for everything that changed meanwhile;
- a failure that waiting may cure (the apiserver or the network down, a 5xx or 429) is tried
  again after a capped doubling wait (`lifecycle/times.doubled_delay`), from where it was; any
  other refusal (401, 403, 404) is raised to the caller, whose page or command says so.

The requests are the caller's (`Lister`, `Watcher`): the console makes them as the signed-in
user, so following never widens what anyone may read."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from torchjob.kube.errors import Gone, KubeError, from_status
from torchjob.lifecycle.times import doubled_delay

Object = dict[str, Any]

# The first wait after a failure, and the longest: a page keeps trying as long as it is open.
RETRY_BASE = 0.5
RETRY_CAP = 30.0
# Failures that waiting may cure; KubeError only with a status in TRANSIENT_STATUS or 500 and up.
TRANSIENT = (aiohttp.ClientError, asyncio.TimeoutError, OSError, orjson.JSONDecodeError)
TRANSIENT_STATUS = frozenset({0, 429})


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watch, as the apiserver sent it."""

    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
    object: Object


@dataclass(frozen=True)
class Snapshot:
    """The objects listed and the list's resourceVersion; after a re-list it replaces all that
    was known before."""

    items: list[Object]
    resource_version: str


@dataclass(frozen=True)
class Change:
    """An object added, modified or deleted since the last Snapshot or Change."""

    type: str  # ADDED, MODIFIED, DELETED
    object: Object


# A list of the objects followed (one chunk is enough: its resourceVersion is the list's).
Lister = Callable[[], Awaitable[Object]]
# The events of one watch from a resourceVersion, until the apiserver ends it.
Watcher = Callable[[str], AsyncGenerator[WatchEvent, None]]


async def follow(
    list_objects: Lister,
    watch: Watcher,
    *,
    since: str = "",
    retry_base: float = RETRY_BASE,
    retry_cap: float = RETRY_CAP,
) -> AsyncGenerator[Snapshot | Change, None]:
    """A Snapshot, then every Change, for as long as the caller reads; with `since` (a
    resourceVersion the caller has already shown) the first Snapshot is left out and the watch
    starts there. Close it (contextlib.aclosing) to end its watch before the apiserver does."""
    version, failures = since, 0
    while True:
        try:
            if not version:
                answer = await list_objects()
                version = str((answer.get("metadata") or {}).get("resourceVersion") or "")
                failures = 0
                yield Snapshot(_items_of(answer), version)
            async with contextlib.aclosing(watch(version)) as events:
                async for event in events:
                    version = _version_after(event, version)
                    failures = 0
                    if event.type in ("ADDED", "MODIFIED", "DELETED"):
                        yield Change(event.type, event.object)
        except Gone:
            version = ""  # listed again at once: the apiserver is well, the version too old
        except (KubeError, *TRANSIENT) as error:
            if isinstance(error, KubeError) and not transient(error):
                raise
            await asyncio.sleep(doubled_delay(retry_base, retry_cap, failures))
            failures += 1


def transient(error: KubeError) -> bool:
    """Whether waiting may cure `error`: the apiserver overloaded or failing, not a refusal."""
    return error.status in TRANSIENT_STATUS or error.status >= 500


def _items_of(answer: Object) -> list[Object]:
    """The list's items as a watch sends them: with the apiVersion and kind the list leaves out."""
    kind = str(answer.get("kind") or "").removesuffix("List")
    items: list[Object] = answer.get("items") or []
    for item in items:
        item.setdefault("apiVersion", answer.get("apiVersion"))
        item.setdefault("kind", kind)
    return items


def _version_after(event: WatchEvent, version: str) -> str:
    """The resourceVersion to watch from after `event`; an error event raises as its status."""
    if event.type == "ERROR":
        status = event.object
        raise from_status(int(status.get("code") or 0), status.get("reason"), orjson.dumps(status))
    return str((event.object.get("metadata") or {}).get("resourceVersion") or version)
