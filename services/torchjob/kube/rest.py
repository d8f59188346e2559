"""Writes to any resource by its REST path, as our field manager, through our client (its
credentials, rate limits and connection pool): the body is sent as JSON and the reply read
without building objects of it. A status of 300 or more raises one of our KubeErrors.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from torchjob.api.constants import FIELD_MANAGER
from torchjob.kube.client import JSON, KubeClient
from torchjob.kube.informer import ResourceKind

MERGE_PATCH: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
MANAGED: Final = {"fieldManager": FIELD_MANAGER}


class Resources:
    """Create, patch, delete and read objects of any kind, as our field manager."""

    def __init__(self, api_client: KubeClient) -> None:
        self._api = api_client

    async def create(self, kind: ResourceKind, namespace: str, body: Any) -> None:
        await self._call("POST", kind.path(namespace), body, manager=True)

    async def replace(self, kind: ResourceKind, namespace: str, name: str, body: Any) -> None:
        """A PUT of the whole object: with the resourceVersion it was read at, a Conflict if it
        was written since."""
        await self._call("PUT", kind.object_path(namespace, name), body, manager=True)

    async def patch(
        self,
        kind: ResourceKind,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        content_type: str = MERGE_PATCH,
    ) -> str:
        """A patch of the object (or of its `subresource`, such as "status"), a JSON merge patch
        unless `content_type` says otherwise; the resourceVersion the object has after it."""
        path = kind.object_path(namespace, name, subresource)
        answer = await self._call("PATCH", path, body, manager=True, content_type=content_type)
        written = orjson.loads(answer) if answer else {}
        meta = written.get("metadata") if isinstance(written, dict) else None
        return str((meta or {}).get("resourceVersion") or "")

    async def delete(
        self,
        kind: ResourceKind,
        namespace: str,
        name: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation: str | None = None,
        grace_period: int | None = None,
    ) -> None:
        """Deletes the object: with `uid`, only that object (a Conflict for one of that name made
        since), with `resource_version` only as it was then; `propagation` is the policy for
        what it owns (the collector's default without one); `grace_period` the seconds a pod
        has to stop (0: removed at once, without waiting for its kubelet)."""
        preconditions = {"uid": uid, "resourceVersion": resource_version}
        options: dict[str, Any] = {
            "preconditions": {key: value for key, value in preconditions.items() if value},
            "propagationPolicy": propagation,
            "gracePeriodSeconds": grace_period,
        }
        kept = {key: value for key, value in options.items() if value or value == 0}
        body = {"apiVersion": "v1", "kind": "DeleteOptions", **kept} if kept else None
        await self._call("DELETE", kind.object_path(namespace, name), body)

    async def get(self, kind: ResourceKind, namespace: str, name: str) -> dict[str, Any]:
        """The object as the apiserver sends it."""
        obj: dict[str, Any] = await self._api.request_json("GET", kind.object_path(namespace, name))
        return obj

    async def log_tail(
        self, namespace: str, pod: str, container: str, lines: int, limit_bytes: int
    ) -> str:
        """The last `lines` of a container's log, at most `limit_bytes` of them."""
        query = {"container": container, "tailLines": str(lines), "limitBytes": str(limit_bytes)}
        path = ResourceKind("", "v1", "pods").object_path(namespace, pod, "log")
        data = await self._api.request("GET", path, query=query)
        return data.decode("utf-8", errors="replace")

    async def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        manager: bool = False,
        content_type: str = JSON,
    ) -> bytes:
        query = MANAGED if manager else None
        return await self._api.request(
            method, path, query=query, body=body, content_type=content_type
        )
