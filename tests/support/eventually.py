"""Waiting in tests: a check polled until it holds, or a failure naming what never happened."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

# Generous: a wait ends as soon as its check holds, so only a failing test waits this long,
# and a busy machine does not turn a slow pass into a failure.
TIMEOUT = 120.0
INTERVAL = 0.1


@overload
async def eventually(
    check: Callable[[], Awaitable[T]],
    what: str = ...,
    *,
    timeout: float = ...,
    interval: float = ...,
    explain: Callable[[], object] | None = ...,
) -> T: ...


@overload
async def eventually(
    check: Callable[[], T],
    what: str = ...,
    *,
    timeout: float = ...,
    interval: float = ...,
    explain: Callable[[], object] | None = ...,
) -> T: ...


async def eventually(
    check: Callable[[], Any],
    what: str = "the condition",
    *,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
    explain: Callable[[], object] | None = None,
) -> Any:
    """Call `check()` (a coroutine function or a plain one) every `interval` seconds until it
    returns something truthy, and return that. After `timeout` seconds, fail naming `what` and
    what `explain()` says, when given."""
    deadline = time.monotonic() + timeout
    while True:
        found = await _resolved(check())
        if found:
            return found
        if time.monotonic() > deadline:
            detail = f": {await _resolved(explain())}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}{detail}")
        await asyncio.sleep(interval)


def eventually_sync(
    check: Callable[[], T],
    what: str = "the condition",
    *,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
    explain: Callable[[], object] | None = None,
) -> T:
    """`eventually` for code outside an event loop."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            detail = f": {explain()}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}{detail}")
        time.sleep(interval)


async def _resolved(value: object) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value
