"""The Kubernetes requests the console's pages make, each with the signed-in user's client: the
apiserver decides what the user may read and change, and its refusal reaches the page."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import Any

import orjson

from torchjob.api.constants import FIELD_MANAGER
from torchjob.kube.client import KubeClient
from torchjob.kube.follow import Change, Snapshot, WatchEvent, follow
from torchjob.kube.informer import ResourceKind
from torchjob.kube.resources import EVENTS

MERGE_PATCH = "application/merge-patch+json"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
# A watch the apiserver ends after its own timeout is made again; the page sees no gap.
WATCH_SECONDS = 300

Object = dict[str, Any]


class UserApi:
    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def list_objects(self, kind: ResourceKind, namespace: str | None, **query: str) -> Object:
        answer: Object = await self.client.request_json(
            "GET", kind.path(namespace), query={k: v for k, v in query.items() if v}
        )
        return answer

    async def get(self, kind: ResourceKind, namespace: str, name: str) -> Object:
        answer: Object = await self.client.request_json("GET", kind.object_path(namespace, name))
        return answer

    async def create(
        self, kind: ResourceKind, namespace: str, body: Object, *, dry_run: bool = False
    ) -> Object:
        query = {"fieldManager": FIELD_MANAGER, "fieldValidation": "Strict"}
        if dry_run:
            query["dryRun"] = "All"
        answer: Object = await self.client.request_json(
            "POST", kind.path(namespace), query=query, body=body
        )
        return answer

    async def patch(self, kind: ResourceKind, namespace: str, name: str, body: Object) -> None:
        await self.client.request(
            "PATCH",
            kind.object_path(namespace, name),
            query={"fieldManager": FIELD_MANAGER},
            body=body,
            content_type=MERGE_PATCH,
        )

    async def delete(self, kind: ResourceKind, namespace: str, name: str) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        await self.client.request("DELETE", kind.object_path(namespace, name), body=body)

    async def may(
        self, verb: str, kind: ResourceKind, namespace: str, subresource: str = ""
    ) -> bool:
        """Whether the user may `verb` `kind` in `namespace` (a SelfSubjectAccessReview): only
        to hide what they may not use; the apiserver decides every request still."""
        attributes = {
            "namespace": namespace,
            "verb": verb,
            "group": kind.group,
            "resource": kind.plural,
            "subresource": subresource,
        }
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        answer = await self.client.request_json("POST", ACCESS_REVIEWS, body=body)
        return bool((answer.get("status") or {}).get("allowed"))

    async def allowed(
        self, namespace: str, checks: dict[str, tuple[str, ResourceKind, str]]
    ) -> dict[str, bool]:
        """Several `may` at once, by name."""
        answers = await asyncio.gather(
            *(self.may(verb, kind, namespace, sub) for verb, kind, sub in checks.values())
        )
        return dict(zip(checks, answers, strict=True))

    async def watch(
        self, kind: ResourceKind, namespace: str, resource_version: str, **query: str
    ) -> AsyncGenerator[WatchEvent, None]:
        """The events of a watch from `resource_version`, until the apiserver ends it (error
        events included: `follow` reads them)."""
        parameters = {
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_SECONDS),
            **{k: v for k, v in query.items() if v},
        }
        lines = self.client.watch(kind.path(namespace), parameters, read_seconds=WATCH_SECONDS + 30)
        async with contextlib.aclosing(lines):
            async for line in lines:
                event = orjson.loads(line)
                yield WatchEvent(str(event.get("type")), event.get("object") or {})

    def follow(
        self, kind: ResourceKind, namespace: str, *, since: str = "", limit: str = "", **query: str
    ) -> AsyncGenerator[Snapshot | Change, None]:
        """The objects of `kind` that `query` selects, listed (at most `limit` of them: the list
        may be there only for its resourceVersion) and then watched, both as the user; listed
        again when the watch expires (kube/follow.py). With `since` the watch starts there."""
        return follow(
            lambda: self.list_objects(kind, namespace, limit=limit, **query),
            lambda version: self.watch(kind, namespace, version, **query),
            since=since,
        )

    async def events_of(self, namespace: str, name: str) -> list[Object]:
        """The Events about the object `name`, oldest first."""
        answer = await self.list_objects(
            EVENTS, namespace, fieldSelector=f"regarding.name={name}", limit="200"
        )
        items: list[Object] = answer.get("items") or []
        return sorted(items, key=_event_time)


def _event_time(event: Object) -> str:
    series = (event.get("series") or {}).get("lastObservedTime")
    return str(
        series
        or event.get("eventTime")
        or event.get("deprecatedLastTimestamp")
        or event["metadata"].get("creationTimestamp")
        or ""
    )
