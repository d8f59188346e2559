"""Our own small error hierarchy, raised at the I/O edge from the apiserver's HTTP status, so the
rest of the code never inspects HTTP codes or client exception types."""

from __future__ import annotations

from typing import Any

import orjson


class KubeError(Exception):
    """A request to the apiserver failed."""

    def __init__(self, status: int, reason: str, message: str, body: dict[str, Any] | None = None):
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}


class Unauthorized(KubeError):
    """401: the credentials were refused (an unknown, forged or expired token)."""


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
    401: Unauthorized,
    404: NotFound,
    409: Conflict,
    403: Forbidden,
    422: Invalid,
    410: Gone,
}


def from_status(status: int, reason: str | None, body: bytes | None) -> KubeError:
    """Our error for an answer of HTTP `status`: the apiserver's Status object in `body` gives
    its reason and message when it has one, else the HTTP reason phrase does."""
    details: dict[str, Any] = {}
    try:
        parsed = orjson.loads(body or b"{}")
        details = parsed if isinstance(parsed, dict) else {}
    except orjson.JSONDecodeError:
        pass
    message = str(details.get("message") or reason or "")
    cls = _BY_STATUS.get(status, KubeError)
    return cls(status, str(details.get("reason") or reason or ""), message, details)
