"""Informers as tests and benchmarks run them: for the length of a `with` block, and a history
of every pod a namespace has had."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from kubernetes_asyncio import client

from torchjob.kube.client import KubeClient
from torchjob.kube.credentials import Credentials, tls_context
from torchjob.kube.informer import Informer, KubeObject
from torchjob.kube.resources import PODS


@dataclass(frozen=True)
class _Header:
    header: str | None

    def authorization(self) -> str | None:
        return self.header


def client_like(api: client.ApiClient) -> KubeClient:
    """Our client (kube/client.py, as the services make one) with the credentials of a
    kubernetes-asyncio client, for the informers of tests and benchmarks."""
    configuration = api.configuration
    tls = tls_context(
        ca_file=configuration.ssl_ca_cert,
        cert_file=configuration.cert_file,
        key_file=configuration.key_file,
        verify=configuration.verify_ssl,
    )
    header = configuration.api_key.get("BearerToken")
    return KubeClient(Credentials(str(configuration.host), tls, _Header(header)))


@contextlib.asynccontextmanager
async def running(informer: Informer, sync_timeout: float = 30) -> AsyncIterator[Informer]:
    """The informer runs, its cache filled, until the block ends."""
    task = asyncio.create_task(informer.run(), name=f"informer {informer.resource}")
    try:
        await asyncio.wait_for(informer.synced.wait(), timeout=sync_timeout)
        yield informer
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def cache_contents(informer: Informer, namespace: str | None = None) -> list[KubeObject]:
    """Every object the informer's cache holds, in `namespace` or in all."""
    cached = informer.cached()
    return [obj for obj in cached if namespace in (None, obj["metadata"].get("namespace", ""))]


class PodHistory:
    """Every pod uid a namespace has had, from a watch of its own: a test can tell a replica's
    pod created twice from one created once, whatever happened to the reconciler meanwhile."""

    def __init__(self, api_client: KubeClient, namespace: str) -> None:
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
        async with running(self.informer):
            yield self
