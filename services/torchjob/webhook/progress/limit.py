"""How often each job's reporters may be answered: a token bucket per job. Only a caller that has
proved it runs in the job's pods takes from its job's bucket, so no stranger can spend it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable

from cachetools import LRUCache

Clock = Callable[[], float]


class _Bucket:
    __slots__ = ("tokens", "updated")

    def __init__(self, tokens: float, updated: float) -> None:
        self.tokens = tokens
        self.updated = updated


class JobRateLimit:
    """`rate` reports a second per job, `burst` at once. Buckets are kept for the `capacity`
    jobs that reported last; a job's bucket forgotten is full again when it next reports, which
    only a job's own pods can make it do."""

    def __init__(
        self, rate: float, burst: int, *, clock: Clock = time.monotonic, capacity: int = 10_000
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a rate limit needs rate > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        # The jobs that reported last; a job forgotten starts again with a full bucket.
        self._buckets: LRUCache[Hashable, _Bucket] = LRUCache(capacity)

    def take(self, job: Hashable) -> float:
        """Take one of the job's tokens: 0 when there was one, else the seconds until there is
        one again (and nothing is taken)."""
        now = self._clock()
        bucket = self._buckets.get(job)
        if bucket is None:
            bucket = self._buckets[job] = _Bucket(float(self.burst), now)
        else:
            elapsed = max(0.0, now - bucket.updated)
            bucket.tokens = min(float(self.burst), bucket.tokens + elapsed * self.rate)
            bucket.updated = now
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return 0.0
        return (1 - bucket.tokens) / self.rate

    def __len__(self) -> int:
        return len(self._buckets)


class Tarpit:
    """Holds a refused (429) answer for `seconds` before it is sent, for at most `capacity`
    callers at once. A reporter that ignores Retry-After and asks again at once then asks at most
    1/`seconds` times a second per connection, instead of as fast as the webhook can refuse:
    refusing costs CPU that admission shares, waiting costs only an open connection."""

    def __init__(self, seconds: float, capacity: int) -> None:
        self.seconds = seconds
        self.capacity = capacity
        self.held = 0

    async def hold(self) -> None:
        if self.seconds <= 0 or self.held >= self.capacity:
            return
        self.held += 1
        try:
            await asyncio.sleep(self.seconds)
        finally:
            self.held -= 1
