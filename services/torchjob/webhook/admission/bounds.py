"""What an admission in progress may cost: the bytes of the bodies in flight, one worker thread
for the large ones, the pod admissions waiting on their job, and each request's deadline."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from torchjob.webhook.settings import Limits, MiB

T = TypeVar("T")

# Bodies up to this size are parsed and answered on the event loop: a few milliseconds at worst
# (an ordinary job or pod review is 5 to 30 KiB). Larger ones go to the worker thread.
INLINE_BYTES = 64 * 1024
# Room for small bodies beyond max_inflight_bytes, so that large bodies filling the budget never
# turn away an admission of ordinary size.
SMALL_RESERVE_BYTES = 1 * MiB
# Parsed JSON takes up to 24 times its size as Python objects when it is all empty or one-key
# objects (`[{},{},...]`), 18 when it is all one-letter strings; objects Kubernetes sends, with
# their long keys, about 12. A large body with more than one object or array per this many bytes
# is refused before it is parsed, which holds a parsed body to about 18 times its size.
MIN_BYTES_PER_CONTAINER = 16
# Pod admissions whose job is not cached yet, each waiting on a GET with its parsed body.
MAX_JOB_LOOKUPS = 8


class Busy(Exception):
    """Refused for now: the answer says to retry."""


class TooLate(Exception):
    """The worker reached a request whose answer was no longer awaited."""


class Admissions:
    """The bound on what admissions in progress cost: the bytes of their bodies (counted from
    Content-Length before anything is read), and one worker thread for the large ones. One
    thread: its work is CPU-bound, so more would not answer sooner, and the loop and probe
    threads keep their share of the interpreter (it switches threads every few milliseconds)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.inflight = 0
        self.worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="admission")
        # One large body at a time is parsed and answered, so that one parsed large body at most
        # is in memory; the others wait as bytes. Small bodies are answered on the loop, one at a
        # time but for pods waiting on their job (`lookups`, at most MAX_JOB_LOOKUPS).
        self.one_large = asyncio.Lock()
        self.lookups = 0

    def take(self, cost: int) -> bool:
        """Count `cost` bytes in flight, when there is room for them."""
        room = self.limits.max_inflight_bytes
        if cost <= INLINE_BYTES:
            room += SMALL_RESERVE_BYTES
        if self.inflight + cost > room:
            return False
        self.inflight += cost
        return True

    def give(self, cost: int) -> None:
        self.inflight -= cost

    def close(self) -> None:
        self.worker.shutdown(wait=False, cancel_futures=True)


class OutOfTime(Exception):
    """The handler timeout ran out while the request waited (`Work.handler_timeout`)."""


class Work:
    """One request's share of the bound: its cost, its deadline, and the worker's task for it.

    The handler timeout stops each wait that can last (`handler_timeout`): a body still
    arriving, the large-body lock and the worker thread, a job looked up from the apiserver. The
    request runs without yielding to the loop in between, where no timer could stop it anyway; an
    ordinary admission, whose body has arrived and whose answer is worked out on the loop, never
    waits, and so never schedules one."""

    __slots__ = ("_pending", "admissions", "cost", "deadline", "size", "uid")

    def __init__(self, admissions: Admissions, cost: int, timeout: float) -> None:
        self.admissions = admissions
        self.cost = cost
        self.size = cost  # of the body, once read; the cost until then
        self.deadline = time.monotonic() + timeout
        self.uid: str | None = None
        self._pending: concurrent.futures.Future[Any] | None = None

    @property
    def inline(self) -> bool:
        """Whether the body is small enough to be parsed and answered on the loop."""
        return self.size <= INLINE_BYTES

    @contextlib.asynccontextmanager
    async def handler_timeout(self) -> AsyncIterator[None]:
        """Around a wait: stop it with OutOfTime when the handler timeout runs out first."""
        timer = asyncio.timeout(max(0.0, self.deadline - time.monotonic()))
        try:
            async with timer:
                yield
        except TimeoutError:
            if timer.expired():
                raise OutOfTime from None
            raise

    async def compute(self, work: Callable[[], T]) -> T:
        """`work()`, on the loop for a small body, else in the worker thread (with the caller's
        context, so that log lines keep the request's identity): a wait the caller bounds
        (`handler_timeout`). A task the worker reaches after the deadline is dropped without
        running."""
        if self.inline:
            return work()
        context, deadline = contextvars.copy_context(), self.deadline

        def guarded() -> T:
            if time.monotonic() > deadline:
                raise TooLate
            return context.run(work)

        future = self.admissions.worker.submit(guarded)
        self._pending = future
        result = await asyncio.wrap_future(future)
        self._pending = None  # the future holds the result too: a parsed body, maybe large
        return result

    def release(self) -> None:
        """Give the cost back once nothing of the request is left: a task the worker had started
        when the request timed out cannot be stopped, and its memory counts until it ends. The
        callback holds no reference to this Work: a cycle through the future would keep what the
        task returns (a parsed body) alive until the garbage collector next runs."""
        pending, self._pending = self._pending, None
        admissions, cost = self.admissions, self.cost
        if pending is None or pending.done():
            admissions.give(cost)
            return
        loop = asyncio.get_running_loop()
        pending.add_done_callback(lambda _: loop.call_soon_threadsafe(admissions.give, cost))
