"""structlog JSON logs rendered with orjson; stdlib loggers (aiohttp, kubernetes-asyncio) go
through the same renderer, and context bound with `bind_contextvars` appears on every line."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import orjson
import structlog

SHARED_PROCESSORS: list[Any] = [
    structlog.contextvars.merge_contextvars,
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
