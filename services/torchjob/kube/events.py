"""Kubernetes Events about the objects we manage, through the events.k8s.io/v1 API.

events.k8s.io/v1 and core/v1 Events are two views of one stored resource: what is written here
is listed by `kubectl get events` and shown by `kubectl describe` (with `regarding` seen as
`involvedObject`). The newer API is used for its `series`, which aggregates repeats of one event
into a count on a single object, as client-go's events recorder does.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import structlog
from cachetools import TTLCache

from torchjob.kube.client import KubeClient
from torchjob.kube.errors import Conflict, KubeError, NotFound
from torchjob.kube.resources import EVENTS
from torchjob.kube.rest import Resources
from torchjob.lifecycle.times import format_micro_time

log = structlog.get_logger("torchjob.kube.events")

EventType = Literal["Normal", "Warning"]

# client-go's window: a repeat within six minutes of the last one joins its series.
SERIES_WINDOW = 360.0
MAX_SERIES = 4096
# Events recorded in the background at once at most (client-go's broadcaster queues 1,000 and
# drops what comes beyond).
MAX_EMITTED = 1000
# Limits the apiserver enforces on events.k8s.io/v1 Events.
NOTE_LIMIT = 1024
REASON_LIMIT = 128
NAME_LIMIT = 253

# A digest of what makes Events one series, rather than the parts themselves: up to MAX_SERIES are
# kept, and the note and the object's uid are most of the bytes of each.
_SeriesKey = bytes


def _series_key(*parts: str) -> _SeriesKey:
    return hashlib.blake2b("\x00".join(parts).encode(), digest_size=16).digest()


@dataclass(slots=True)  # up to MAX_SERIES are kept
class _Series:
    """One Event object and how often it has been recorded. While records of it are in progress,
    a lock makes them one at a time, so that a repeat counts on the Event the first one made."""

    name: str | None = None
    count: int = 0
    writers: int = 0
    lock: asyncio.Lock | None = None


def _micro_time() -> str:
    return format_micro_time(datetime.now(UTC))


def _reference(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata") or {}
    reference = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": metadata.get("name"),
        "namespace": metadata.get("namespace"),
        "uid": metadata.get("uid"),
    }
    return {key: value for key, value in reference.items() if value}


def _not_recorded(regarding: Any, reason: str, message: str, error: Exception) -> None:
    """An Event the apiserver refused (its namespace is being deleted, say) is logged with what
    the apiserver said; anything else, with its traceback."""
    log.warning(
        "could not record an event",
        regarding=regarding,
        reason=reason,
        event_message=message,
        error=str(error) if isinstance(error, KubeError) else None,
        exc_info=not isinstance(error, KubeError),
    )


class EventRecorder:
    """Records Events as `component` (the reporting controller) on `host` (its instance)."""

    def __init__(
        self,
        api_client: KubeClient,
        component: str,
        host: str,
        *,
        series_window: float = SERIES_WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._resources = Resources(api_client)
        self._component = component
        self._host = host
        # A series recorded again within the window goes on; one not recorded for longer, or
        # the least recently recorded beyond MAX_SERIES, is forgotten (a record in progress
        # keeps its own).
        self._series: TTLCache[_SeriesKey, _Series] = TTLCache(
            MAX_SERIES, ttl=series_window, timer=clock
        )
        self._emitted: set[asyncio.Task[None]] = set()

    async def record(
        self, obj: dict[str, Any], event_type: EventType, reason: str, message: str
    ) -> None:
        """Record an Event about `obj`; a repeat of a recent one raises its series count.
        Never raises: an Event is worth less than the work that reports it."""
        try:
            await self._record(obj, event_type, reason, message[:NOTE_LIMIT])
        except Exception as error:
            _not_recorded((obj.get("metadata") or {}).get("name"), reason, message, error)

    def emit(self, obj: dict[str, Any], event_type: EventType, reason: str, message: str) -> None:
        """`record` in the background, as client-go's recorder does: the caller does not wait
        for the Event's token or its answer, so an Event never holds back the work it reports
        (a status write, the next creation). Beyond MAX_EMITTED unanswered, it is dropped and
        logged."""
        if len(self._emitted) >= MAX_EMITTED:
            log.warning("dropped an event: too many unanswered", reason=reason, note=message)
            return
        task = asyncio.get_running_loop().create_task(self.record(obj, event_type, reason, message))
        self._emitted.add(task)
        task.add_done_callback(self._emitted.discard)

    async def flush(self) -> None:
        """Wait until every Event emitted so far is answered (or dropped)."""
        while self._emitted:
            await asyncio.wait(set(self._emitted))

    async def record_once(
        self, obj: dict[str, Any], event_type: EventType, reason: str, message: str, key: str
    ) -> bool:
        """Record the Event that reports one action on `obj`, named by `key`. Its name is derived
        from the object's uid and the key, so a second record of the same action (by a restarted
        process, or from a cache that lags behind) is refused by the apiserver as AlreadyExists:
        the action is reported once. True when this call recorded it. Never raises."""
        regarding = _reference(obj)
        namespace = regarding.get("namespace") or "default"
        digest = hashlib.sha256(f"{regarding.get('uid')}/{key}".encode()).hexdigest()[:16]
        prefix = str(regarding.get("name", "unknown"))[: NAME_LIMIT - len(digest) - 1]
        try:
            await self._create(
                namespace, regarding, event_type, reason, message[:NOTE_LIMIT], f"{prefix}.{digest}"
            )
            return True
        except Conflict:
            return False
        except Exception as error:
            _not_recorded(regarding.get("name"), reason, message, error)
            return False

    async def _record(
        self, obj: dict[str, Any], event_type: EventType, reason: str, note: str
    ) -> None:
        regarding = _reference(obj)
        # Events about cluster-scoped objects live in `default`, as the apiserver requires.
        namespace = regarding.get("namespace") or "default"
        identity = regarding.get("uid") or regarding.get("name", "")
        series = self._series_for(
            _series_key(namespace, regarding.get("kind", ""), identity, event_type, reason, note)
        )
        series.writers += 1
        lock = series.lock = series.lock or asyncio.Lock()
        try:
            async with lock:
                await self._write(series, namespace, regarding, event_type, reason, note)
        finally:
            series.writers -= 1
            if not series.writers:
                series.lock = None

    def _series_for(self, key: _SeriesKey) -> _Series:
        series = self._series.get(key)
        if series is None:
            series = _Series()
        self._series[key] = series  # its window starts again
        return series

    async def _write(
        self,
        series: _Series,
        namespace: str,
        regarding: dict[str, Any],
        event_type: EventType,
        reason: str,
        note: str,
    ) -> None:
        if series.name is not None:
            try:
                await self._count_repeat(namespace, series.name, series.count + 1)
                series.count += 1
                return
            except NotFound:
                pass  # the Event expired (its TTL is an hour): start a new one
        series.name = await self._create(namespace, regarding, event_type, reason, note)
        series.count = 1

    async def _create(
        self,
        namespace: str,
        regarding: dict[str, Any],
        event_type: EventType,
        reason: str,
        note: str,
        name: str | None = None,
    ) -> str:
        # client-go's naming: the object's name and the time in hex, unique per recorder.
        name = name or f"{regarding.get('name', 'unknown')}.{time.time_ns():x}"
        # The client sends a dict as it is, with our exact MicroTime strings.
        body: Any = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "eventTime": _micro_time(),
            "reportingController": self._component,
            "reportingInstance": self._host,
            "action": reason[:REASON_LIMIT],
            "reason": reason[:REASON_LIMIT],
            "note": note,
            "type": event_type,
            "regarding": regarding,
        }
        await self._resources.create(EVENTS, namespace, body)
        return name

    async def _count_repeat(self, namespace: str, name: str, count: int) -> None:
        body = {"series": {"count": count, "lastObservedTime": _micro_time()}}
        await self._resources.patch(EVENTS, namespace, name, body)
