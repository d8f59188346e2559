"""structlog JSON logs rendered with orjson; stdlib loggers (aiohttp, asyncio) go
through the same renderer, and context bound with `bind_contextvars`, or the request bound with
`bind_request`, appears on every line."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, MutableMapping
from contextvars import ContextVar, Token
from typing import Any

import orjson
import structlog

# The request being handled, and which of its fields name it on every line: one context variable
# set per request, where binding each field as a context variable of structlog's costs every
# request several times as much, and reading the fields is left to the lines actually written.
_REQUEST: ContextVar[tuple[Mapping[str, Any], tuple[str, ...]] | None] = ContextVar(
    "torchjob_request", default=None
)

BoundRequest = Token[tuple[Mapping[str, Any], tuple[str, ...]] | None]


def bind_request(fields: Mapping[str, Any], keys: tuple[str, ...]) -> BoundRequest:
    """Until `unbind_request`, every line written in this context carries `keys` of `fields`
    (a key the line sets itself wins)."""
    return _REQUEST.set((fields, keys))


def unbind_request(token: BoundRequest) -> None:
    _REQUEST.reset(token)


def merge_request(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """The processor that adds the bound request's fields to a line."""
    bound = _REQUEST.get()
    if bound is not None:
        fields, keys = bound
        for key in keys:
            event.setdefault(key, fields.get(key))
    return event


SHARED_PROCESSORS: list[Any] = [
    structlog.contextvars.merge_contextvars,
    merge_request,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    structlog.processors.StackInfoRenderer(),
    structlog.processors.format_exc_info,
]


def _render(_: Any, __: str, event: MutableMapping[str, Any]) -> str:
    return orjson.dumps(event, default=str).decode()


def configure(service: str, level: str = "INFO") -> None:
    """Route structlog and the stdlib root logger to one JSON stream on stderr."""
    structlog.configure(
        processors=[*SHARED_PROCESSORS, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        # Filtering in the wrapper drops a disabled level before any processor runs.
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=SHARED_PROCESSORS,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, _render],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp logs every request at INFO; our own request log carries more.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    structlog.contextvars.bind_contextvars(service=service)
