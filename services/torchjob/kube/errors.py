"""Our own small error hierarchy, raised at the I/O edge from the apiserver's HTTP status, so the
rest of the code never inspects HTTP codes or client exception types."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from kubernetes_asyncio.client.exceptions import ApiException


class KubeError(Exception):
    """A request to the apiserver failed."""

    def __init__(self, status: int, reason: str, message: str, body: dict[str, Any] | None = None):
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}


class NotFound(KubeError):
    """404: the object does not exist."""


class Conflict(KubeError):
    """409: already exists, or the resourceVersion is stale."""


class Forbidden(KubeError):
    """403: RBAC, quota or an admission webhook refused the request."""


class Invalid(KubeError):
    """422: the object does not pass validation."""


class Gone(KubeError):
    """410: the resourceVersion is too old to watch from; list again."""


_BY_STATUS: dict[int, type[KubeError]] = {
    404: NotFound,
    409: Conflict,
    403: Forbidden,
    422: Invalid,
    410: Gone,
}


def from_api_exception(error: ApiException) -> KubeError:
    body: dict[str, Any] = {}
    try:
        parsed = orjson.loads(error.body or b"{}")
        body = parsed if isinstance(parsed, dict) else {}
    except orjson.JSONDecodeError:
        pass
    status = int(error.status or 0)
    message = str(body.get("message") or error.reason or "")
    cls = _BY_STATUS.get(status, KubeError)
    return cls(status, str(body.get("reason") or error.reason or ""), message, body)


@asynccontextmanager
async def translated() -> AsyncIterator[None]:
    """Re-raise the client's ApiException as one of ours."""
    try:
        yield
    except ApiException as error:
        raise from_api_exception(error) from error
