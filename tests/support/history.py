"""Every pod a namespace has had, from a watch of its own: a test can tell a replica's pod
created twice from one created once, whatever happened to the reconciler meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from kubernetes_asyncio import client

from torchjob.kube.informer import Informer, KubeObject, ResourceKind

PODS = ResourceKind("", "v1", "pods")


class PodHistory:
    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.uids: dict[str, set[str]] = {}
        self.informer = Informer(
            api_client,
            PODS,
            namespace=namespace,
            on_add=self._seen,
            on_update=lambda _, new: self._seen(new),
            retry_cap=1.0,
        )

    def _seen(self, pod: KubeObject) -> None:
        metadata = pod["metadata"]
        self.uids.setdefault(metadata["name"], set()).add(metadata["uid"])

    def created(self) -> dict[str, int]:
        """How many pods of each name there have been."""
        return {name: len(uids) for name, uids in sorted(self.uids.items())}

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[PodHistory]:
        task = asyncio.create_task(self.informer.run(), name="pod-history")
        try:
            await asyncio.wait_for(self.informer.synced.wait(), timeout=30)
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
