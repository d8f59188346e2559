"""The API client every service uses: in-cluster credentials, else a kubeconfig file; with an
optional client-side rate limit in client-go's shape (kubernetes-asyncio has none)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from kubernetes_asyncio import client, config
from prometheus_client import Counter, Histogram

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

REQUESTS = Counter(
    "torchjob_kube_client_requests_total",
    "Requests sent to the apiserver, by HTTP method (watches included)",
    ["method"],
)
RATE_LIMITER_WAIT = Histogram(
    "torchjob_kube_client_rate_limiter_wait_seconds",
    "Time a request waited for the client-side rate limiter",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)


class TokenBucket:
    """client-go's client-side limiter (flowcontrol's token bucket, golang.org/x/time/rate): a
    bucket of at most `burst` tokens, full at the start, refilled at `qps` tokens a second. Each
    request takes a token. When none is left the request reserves the next one and waits for it:
    a waiter's delay is fixed when it asks, so waiters go in arrival order, `1/qps` apart, and
    no wake-up races another for the same token."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("a token bucket needs qps > 0 and burst >= 1")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._updated = clock()

    def reserve(self) -> float:
        """Take a token; the seconds until it is there (0 when one was in the bucket)."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.qps)
        self._updated = now
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def acquire(self) -> None:
        delay = self.reserve()
        if delay <= 0:
            return
        try:
            await self._sleep(delay)
        except asyncio.CancelledError:
            # A request that will not be sent gives its token back, as x/time/rate's Cancel does.
            self._tokens += 1
            raise


def _is_watch(query_params: Sequence[tuple[str, Any]] | None) -> bool:
    return any(k == "watch" and str(v).lower() in ("true", "1") for k, v in query_params or ())


class RateLimitedApiClient(client.ApiClient):
    """An ApiClient whose every request except a watch first takes a token from `limiter` (a
    watch is one long request; client-go does not throttle watches either)."""

    def __init__(self, configuration: client.Configuration, limiter: TokenBucket | None) -> None:
        super().__init__(configuration)
        self.limiter = limiter

    async def request(
        self, method: str, url: str, query_params: Any = None, *args: Any, **kwargs: Any
    ) -> Any:
        REQUESTS.labels(method).inc()
        if self.limiter is not None and not _is_watch(query_params):
            started = time.perf_counter()
            await self.limiter.acquire()
            RATE_LIMITER_WAIT.observe(time.perf_counter() - started)
        return await super().request(method, url, query_params, *args, **kwargs)


async def new_api_client(
    kubeconfig: str | None = None,
    max_connections: int = 100,
    *,
    qps: float = 0,
    burst: int = 0,
) -> client.ApiClient:
    """An ApiClient; `kubeconfig` (or $KUBECONFIG) wins over the in-cluster service account.

    With `qps` > 0 every request but a watch is limited to `qps` a second with bursts of `burst`
    (at least 1); `qps` <= 0 means no client-side limit, as a negative QPS does in client-go."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    configuration = client.Configuration()
    if path:
        await config.load_kube_config(config_file=path, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = max(1, max_connections)
    limiter = TokenBucket(qps, max(1, burst)) if qps > 0 else None
    return RateLimitedApiClient(configuration, limiter)
