"""A work queue in the shape of client-go's: each key is queued at most once however often it is
added, and at most one worker holds a key at a time, so a controller never reconciles the same
object twice concurrently and a burst of events costs one reconcile.

Keys are served by priority, then in the order they were added, as in controller-runtime's
priority queue: a key added again at a higher priority moves up (it keeps the highest it was
given until a worker takes it). A controller adds at `LOW` what starts long work nobody waits
on yet (a new job's first creations), so that a change of what is running (a pod now Running,
whose job's status should say so) is not served after all of them."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from torchjob.lifecycle.times import doubled_delay

K = TypeVar("K", bound=Hashable)

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


NORMAL = 0
LOW = -100  # controller-runtime's LowPriority


class QueueShutDown(Exception):
    """Raised by `get()` once the queue has been shut down."""


class WorkQueue(Generic[K]):
    """Deduplicating, one-worker-per-key queue with delayed and rate-limited adds.

    A key is *dirty* from `add` until a worker takes it with `get`; while a worker holds it
    (between `get` and `done`) another `add` only marks it dirty, and `done` queues it again.
    """

    def __init__(
        self,
        *,
        backoff_base: float = 0.005,
        backoff_cap: float = 60.0,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._clock = clock
        self._sleep = sleep
        # The ready keys of each priority, in the order they were added; a key's priority while
        # it is dirty (ready, or added again while a worker holds it).
        self._ready: dict[int, deque[K]] = {}
        self._dirty: dict[K, int] = {}
        self._processing: set[K] = set()
        self._due: dict[K, float] = {}
        # A heap of (due time, tie-breaker, key); an entry whose time no longer matches
        # `_due[key]` was superseded by an earlier add_after and is skipped.
        self._timers: list[tuple[float, int, K]] = []
        self._serial = itertools.count()
        self._failures: dict[K, int] = {}
        self._shut_down = False
        self._changed = asyncio.Event()

    def __len__(self) -> int:
        self._promote_due()
        return sum(map(len, self._ready.values()))

    def add(self, key: K, priority: int = NORMAL) -> None:
        if self._shut_down:
            return
        queued = self._dirty.get(key)
        if queued is not None and queued >= priority:
            return
        self._dirty[key] = priority
        if key in self._processing:
            return
        if queued is not None:
            self._ready[queued].remove(key)  # it moves up
        self._ready.setdefault(priority, deque()).append(key)
        self._notify()

    def add_after(self, key: K, seconds: float) -> None:
        """Add `key` once `seconds` have passed; an earlier pending time for it wins."""
        if self._shut_down:
            return
        if seconds <= 0:
            self.add(key)
            return
        due = self._clock() + seconds
        if key in self._due and self._due[key] <= due:
            return
        self._due[key] = due
        heapq.heappush(self._timers, (due, next(self._serial), key))
        self._notify()

    def add_rate_limited(self, key: K) -> None:
        """Add `key` after its backoff, which doubles with each call until `forget(key)`."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        self.add_after(key, self.backoff(failures))

    def backoff(self, failures: int) -> float:
        return doubled_delay(self._backoff_base, self._backoff_cap, failures)

    def retries(self, key: K) -> int:
        """How often `key` was added rate-limited since it was last forgotten."""
        return self._failures.get(key, 0)

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    async def get(self, least: int | None = None) -> K:
        """The next ready key (of priority `least` or more, if given), which the caller holds
        until `done(key)`.

        Raises QueueShutDown after `shutdown()`, even if keys are still queued: a controller
        shuts its queue down when it must stop acting, not after finishing the backlog.
        """
        while True:
            if self._shut_down:
                raise QueueShutDown
            self._promote_due()
            key = self._next_ready(least)
            if key is not None:
                del self._dirty[key]
                self._processing.add(key)
                return key
            await self._wait_for_change()

    def _next_ready(self, least: int | None) -> K | None:
        """The first key of the highest priority ready, taken off its queue."""
        for priority in sorted(self._ready, reverse=True):
            keys = self._ready[priority]
            if keys and (least is None or priority >= least):
                return keys.popleft()
        return None

    def done(self, key: K) -> None:
        self._processing.discard(key)
        priority = self._dirty.get(key)
        if priority is not None and not self._shut_down:
            self._ready.setdefault(priority, deque()).append(key)
            self._notify()

    def shutdown(self) -> None:
        self._shut_down = True
        self._notify()

    def _promote_due(self) -> None:
        now = self._clock()
        while self._timers and self._timers[0][0] <= now:
            due, _, key = heapq.heappop(self._timers)
            if self._due.get(key) == due:
                del self._due[key]
                self.add(key)

    def _notify(self) -> None:
        # Every waiting getter holds the old event; a fresh one is for whoever waits next.
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_for_change(self) -> None:
        changed = self._changed
        if not self._timers:
            await changed.wait()
            return
        delay = self._timers[0][0] - self._clock()
        waiters = [asyncio.ensure_future(changed.wait()), asyncio.ensure_future(self._sleep(delay))]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
