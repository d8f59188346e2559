"""kubernetes-asyncio's ApiException as one of our KubeErrors, for the CLI, which calls the
apiserver through kubernetes-asyncio's API classes (the services use kube/client.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from kubernetes_asyncio.client.exceptions import ApiException

from torchjob.kube.errors import KubeError, from_status


def from_api_exception(error: ApiException) -> KubeError:
    body = error.body if isinstance(error.body, bytes | str) else None
    encoded = body.encode() if isinstance(body, str) else body
    return from_status(int(error.status or 0), error.reason, encoded)


@asynccontextmanager
async def translated() -> AsyncIterator[None]:
    """Re-raise kubernetes-asyncio's ApiException as one of ours."""
    try:
        yield
    except ApiException as error:
        raise from_api_exception(error) from error
