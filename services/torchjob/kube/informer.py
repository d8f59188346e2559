"""An informer: a cache of one kind of object kept current by list-then-watch, with secondary
indexes and event handlers.

Objects are parsed with orjson into plain dicts and kept as the JSON orjson encodes them again;
a 410 Gone, however often, means listing again.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
import structlog
from prometheus_client import Counter

from torchjob.kube.client import CONNECT_TIMEOUT, KubeClient
from torchjob.kube.errors import Gone, KubeError, from_status
from torchjob.lifecycle.times import doubled_delay

KubeObject = dict[str, Any]
IndexFunc = Callable[[KubeObject], list[str]]
# What the cache keeps of an object as the apiserver sent it (client-go's SetTransform).
Transform = Callable[[KubeObject], KubeObject]
ObjectKey = tuple[str, str]  # (namespace, name); the namespace is "" for cluster-scoped objects

LOGGER_NAME = "torchjob.kube.informer"

# The apiserver ends a watch after timeoutSeconds; a random length spreads the re-watches of
# many informers, as client-go does.
WATCH_SECONDS = (300, 600)
# Bookmarks arrive about once a minute, so a read this long without a byte means a dead peer.
READ_TIMEOUT_MARGIN = 60.0
LIST_READ_TIMEOUT = 60.0
DEFAULT_PAGE_SIZE = 500

LISTS = Counter(
    "torchjob_informer_lists_total",
    "Full lists an informer made: the first one, and each after a 410 Gone (expired)",
    ["resource", "reason"],
)

# Failures after which the informer resumes the watch (after a backoff) instead of re-listing.
RETRYABLE = (KubeError, aiohttp.ClientError, asyncio.TimeoutError, OSError, orjson.JSONDecodeError)


@dataclass(frozen=True)
class ResourceKind:
    """A kind to list and watch, by its REST coordinates; the core group is ""."""

    group: str
    version: str
    plural: str

    def path(self, namespace: str | None) -> str:
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        scope = f"/namespaces/{path_segment(namespace)}" if namespace else ""
        return f"{root}{scope}/{self.plural}"

    def object_path(self, namespace: str | None, name: str, subresource: str = "") -> str:
        """The path of the object `name`, or of its `subresource`: every segment is quoted, so a
        name reaches that object and nothing else."""
        path = f"{self.path(namespace)}/{path_segment(name)}"
        return f"{path}/{path_segment(subresource)}" if subresource else path


def path_segment(text: str) -> str:
    """`text` as one segment of a URL's path. '.' and '..' would still walk the path, and the
    apiserver refuses them as names too (path.ValidatePathSegmentName)."""
    if text in ("", ".", ".."):
        raise ValueError(f"{text!r} cannot be a segment of a path")
    return quote(text, safe="")


def controller_uid(obj: KubeObject) -> list[str]:
    """Index function: the uid of the object's controller (its ownerReference with
    `controller: true`), so a controller finds what it owns without a LIST."""
    for reference in obj.get("metadata", {}).get("ownerReferences") or ():
        if reference.get("controller"):
            return [reference["uid"]]
    return []


def object_key(obj: KubeObject) -> ObjectKey:
    metadata = obj["metadata"]
    return metadata.get("namespace", ""), metadata["name"]


class _Backoff:
    def __init__(self, base: float, cap: float) -> None:
        self._base = base
        self._cap = cap
        self._tries = 0

    def reset(self) -> None:
        self._tries = 0

    def next(self) -> float:
        delay = doubled_delay(self._base, self._cap, self._tries)
        self._tries += 1
        # Jitter keeps informers that lost the apiserver together from returning together.
        return delay * random.uniform(0.8, 1.2)


class ObjectStore:
    """The cached objects by namespace and name, and each index's value -> keys.

    Each object is kept as the JSON orjson encodes it and decoded again when read: a parsed
    object takes about eight times the bytes of its JSON as Python dicts, lists and strings, and
    decoding one of the sizes cached here takes microseconds. A read returns a fresh copy, so
    no reader can change what another one sees.
    """

    def __init__(self, indexers: Mapping[str, IndexFunc]) -> None:
        self.indexers = dict(indexers)
        self.by_namespace: dict[str, dict[str, bytes]] = {}
        self.indices: dict[str, dict[str, set[ObjectKey]]] = {name: {} for name in indexers}

    def get(self, key: ObjectKey) -> KubeObject | None:
        packed = self.packed(key)
        return None if packed is None else _unpacked(packed)

    def packed(self, key: ObjectKey) -> bytes | None:
        namespace, name = key
        return self.by_namespace.get(namespace, {}).get(name)

    def values(self) -> list[KubeObject]:
        return [
            _unpacked(packed)
            for objects in self.by_namespace.values()
            for packed in objects.values()
        ]

    def keys(self) -> set[ObjectKey]:
        return {(ns, name) for ns, objects in self.by_namespace.items() for name in objects}

    def put(self, obj: KubeObject) -> KubeObject | None:
        key = object_key(obj)
        old = self.remove(key)
        self.by_namespace.setdefault(key[0], {})[key[1]] = _packed(obj)
        self._index(key, obj)
        return old

    def remove(self, key: ObjectKey) -> KubeObject | None:
        namespace, name = key
        objects = self.by_namespace.get(namespace, {})
        packed = objects.pop(name, None)
        if packed is None:
            return None
        if not objects:
            del self.by_namespace[namespace]
        old = _unpacked(packed)
        self._unindex(key, old)
        return old

    def _index(self, key: ObjectKey, obj: KubeObject) -> None:
        for index, values_of in self.indexers.items():
            for value in values_of(obj):
                self.indices[index].setdefault(value, set()).add(key)

    def _unindex(self, key: ObjectKey, obj: KubeObject) -> None:
        # Index functions are pure, so the old object yields the values it was filed under.
        for index, values_of in self.indexers.items():
            keys_by_value = self.indices[index]
            for value in values_of(obj):
                keys = keys_by_value.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del keys_by_value[value]


class Informer:
    """Lists, then watches from the list's resourceVersion, keeping a cache and calling the
    handlers for every change. After a 410 Gone it lists again and reports the difference
    (including objects deleted while it could not watch); after any other failure it resumes
    the watch from the last resourceVersion it saw, with a capped backoff.

    Handlers are synchronous and run after the cache has been updated. They should only enqueue
    work; an exception in one is logged and the informer carries on. An object a re-list finds
    unchanged (same resourceVersion) is not reported again.

    A `transform` is applied once to every listed or watched object (deleted ones included)
    before it is cached and handed to the handlers: what it returns is all the informer keeps.
    It must keep metadata.name, namespace and resourceVersion, and whatever the indexers read.
    """

    def __init__(
        self,
        api_client: KubeClient,
        kind: ResourceKind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        on_add: Callable[[KubeObject], None] | None = None,
        on_update: Callable[[KubeObject, KubeObject], None] | None = None,
        on_delete: Callable[[KubeObject], None] | None = None,
        retry_base: float = 0.2,
        retry_cap: float = 30.0,
        page_size: int = DEFAULT_PAGE_SIZE,
        transform: Transform | None = None,
    ) -> None:
        self._api = api_client
        self._path = kind.path(namespace)
        self._label_selector = label_selector
        self._on_add = on_add
        self._on_update = on_update
        self._on_delete = on_delete
        self._backoff = _Backoff(retry_base, retry_cap)
        self._page_size = page_size
        self._transform = transform or _strip
        self._store = ObjectStore(indexers or {})
        self._resource_version: str | None = None
        # A lazy logger, so that logging configured after construction still applies.
        self._log = structlog.get_logger(
            LOGGER_NAME, resource=self._path, label_selector=label_selector
        )
        self.synced = asyncio.Event()

    @property
    def resource(self) -> str:
        """The collection this informer lists and watches, as a URL path."""
        return self._path

    # -- the cache -------------------------------------------------------------------------------

    def get(self, namespace: str, name: str) -> KubeObject | None:
        """The cached object; pass "" as the namespace of a cluster-scoped one."""
        return self._store.get((namespace, name))

    def get_json(self, namespace: str, name: str) -> bytes | None:
        """The cached object as the JSON it is kept as, not decoded. The same bytes object stands
        for the same stored version until the object changes, so a reader that decodes it may
        keep what it made of it for as long as it is handed the same bytes."""
        return self._store.packed((namespace, name))

    def by_index(self, index: str, value: str) -> list[KubeObject]:
        keys = self._store.indices[index].get(value, ())
        return [obj for key in keys if (obj := self._store.get(key)) is not None]

    def cached(self) -> list[KubeObject]:
        """Every cached object."""
        return self._store.values()

    # -- list and watch --------------------------------------------------------------------------

    async def run(self) -> None:
        """Keep the cache current until cancelled."""
        reason = "initial"
        while True:
            try:
                if self._resource_version is None:
                    await self._relist(reason)
                await self._watch()
                # The apiserver ended the watch at its timeout: a healthy stream, so only the
                # shortest pause. Resuming from the resourceVersion loses nothing meanwhile.
                self._backoff.reset()
            except Gone:
                self._log.info("resource version expired; listing again")
                self._resource_version = None
                reason = "expired"
                continue
            except RETRYABLE as error:
                self._log.warning(
                    "list or watch failed; retrying",
                    error=f"{type(error).__name__}: {error}",
                    resource_version=self._resource_version,
                )
            await asyncio.sleep(self._backoff.next())

    async def _relist(self, reason: str) -> None:
        objects, resource_version = await self._list_all()
        self._replace(objects)
        self._resource_version = resource_version
        LISTS.labels(self._path, reason).inc()
        self._log.info(
            "listed", objects=len(objects), resource_version=resource_version, reason=reason
        )
        self.synced.set()

    async def _list_all(self) -> tuple[list[KubeObject], str]:
        """Every object, a page at a time, and the resourceVersion the pages are consistent at."""
        objects: list[KubeObject] = []
        continue_token = ""
        while True:
            query = {"limit": str(self._page_size), "continue": continue_token}
            page = orjson.loads(await self._get_page(query))
            objects.extend(map(self._transform, _items_of(page)))
            metadata = page.get("metadata") or {}
            continue_token = metadata.get("continue") or ""
            if not continue_token:
                return objects, metadata["resourceVersion"]

    def _replace(self, objects: list[KubeObject]) -> None:
        vanished = self._store.keys() - {object_key(obj) for obj in objects}
        for key in vanished:
            old = self._store.remove(key)
            if old is not None:
                self._notify(self._on_delete, old)
        for obj in objects:
            old = self._store.put(obj)
            if old is None:
                self._notify(self._on_add, obj)
            elif _resource_version_of(old) != _resource_version_of(obj):
                self._notify(self._on_update, old, obj)

    async def _watch(self) -> None:
        assert self._resource_version is not None
        seconds = random.randint(*WATCH_SECONDS)
        query = {
            "resourceVersion": self._resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(seconds),
        }
        read_seconds = seconds + READ_TIMEOUT_MARGIN
        events = self._api.watch(self._path, self._query(query), read_seconds=read_seconds)
        async with contextlib.aclosing(events) as lines:
            async for line in lines:
                self._apply(orjson.loads(line))
                self._backoff.reset()

    def _apply(self, event: KubeObject) -> None:
        kind, obj = event["type"], event["object"]
        if kind == "ERROR":
            raise _status_error(obj)
        self._resource_version = _resource_version_of(obj)
        if kind == "BOOKMARK":
            return
        obj = self._transform(obj)
        if kind == "DELETED":
            self._store.remove(object_key(obj))
            self._notify(self._on_delete, obj)
            return
        old = self._store.put(obj)
        if old is None:
            self._notify(self._on_add, obj)
        else:
            self._notify(self._on_update, old, obj)

    def _notify(self, handler: Callable[..., None] | None, *objects: KubeObject) -> None:
        if handler is None:
            return
        try:
            handler(*objects)
        except Exception:
            self._log.exception("event handler failed", handler=getattr(handler, "__name__", None))

    # -- HTTP ------------------------------------------------------------------------------------

    async def _get_page(self, query: dict[str, str]) -> bytes:
        limits = aiohttp.ClientTimeout(sock_connect=CONNECT_TIMEOUT, sock_read=LIST_READ_TIMEOUT)
        return await self._api.request(
            "GET", self._path, query=self._query(query), time_limits=limits
        )

    def _query(self, query: dict[str, str]) -> dict[str, str]:
        if self._label_selector:
            query = {**query, "labelSelector": self._label_selector}
        return {key: value for key, value in query.items() if value}


def _items_of(page: KubeObject) -> list[KubeObject]:
    # List items carry no apiVersion and kind; consumers of the cache (event recorders, owner
    # references) need them, and watch events have them, so the cache is uniform.
    kind = str(page.get("kind", "")).removesuffix("List")
    items: list[KubeObject] = page.get("items") or []
    for item in items:
        item.setdefault("apiVersion", page.get("apiVersion"))
        item.setdefault("kind", kind)
    return items


def _strip(obj: KubeObject) -> KubeObject:
    """The transform without one given: managedFields are often the largest part of an object
    and no controller reads them."""
    obj.get("metadata", {}).pop("managedFields", None)
    return obj


def _packed(obj: KubeObject) -> bytes:
    # A copy of exactly the encoded length: the bytes orjson returns keep the capacity its buffer
    # grew to, four times the length of a slim pod's JSON.
    return bytes(memoryview(orjson.dumps(obj)))


def _unpacked(packed: bytes) -> KubeObject:
    obj: KubeObject = orjson.loads(packed)
    return obj


def _resource_version_of(obj: KubeObject) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion", ""))


def _status_error(status: KubeObject) -> KubeError:
    return from_status(int(status.get("code") or 0), status.get("reason"), orjson.dumps(status))
