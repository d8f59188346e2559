"""The API client every service uses: in-cluster credentials, else a kubeconfig file; with an
optional client-side rate limit in client-go's shape (kubernetes-asyncio has none)."""

from __future__ import annotations

import asyncio
import os
import time
import urllib.request
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
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


# Events go through a bucket of their own, as client-go's event broadcaster sends them through
# a client of its own: reporting a creation does not halve how fast a controller creates.
EVENTS_PATH = "/apis/events.k8s.io/"


class RateLimitedApiClient(client.ApiClient):
    """An ApiClient whose every request except a watch first takes a token from `limiter` (a
    watch is one long request; client-go does not throttle watches either), or from
    `events_limiter` for an Event.

    Its HTTP session does not read the environment on every request: kubernetes-asyncio's
    (`trust_env`) looks for proxy variables and reads ~/.netrc in a worker thread before each
    one, which cost more CPU than the request itself. The proxy the environment names for the
    apiserver is looked up once, when the client is made (`proxy_from_environment`)."""

    def __init__(
        self,
        configuration: client.Configuration,
        limiter: TokenBucket | None,
        events_limiter: TokenBucket | None = None,
    ) -> None:
        super().__init__(configuration)
        self.limiter = limiter
        self.events_limiter = events_limiter
        self._use_session_without_environment()

    def _use_session_without_environment(self) -> None:
        rest = self.rest_client
        session: aiohttp.ClientSession = rest.pool_manager
        connector = session.connector
        session.detach()  # the new session owns the connector (and its TLS settings) now
        rest.pool_manager = aiohttp.ClientSession(
            connector=connector, trust_env=False, read_bufsize=2**21
        )

    async def request(
        self, method: str, url: str, query_params: Any = None, *args: Any, **kwargs: Any
    ) -> Any:
        REQUESTS.labels(method).inc()
        limiter = self.limiter_for(url, query_params)
        if limiter is not None:
            started = time.perf_counter()
            await limiter.acquire()
            RATE_LIMITER_WAIT.observe(time.perf_counter() - started)
        return await super().request(method, url, query_params, *args, **kwargs)

    def limiter_for(self, url: str, query_params: Any) -> TokenBucket | None:
        """The bucket a request takes its token from; None for a watch."""
        if _is_watch(query_params):
            return None
        return self.events_limiter if EVENTS_PATH in url else self.limiter


def proxy_from_environment(host: str) -> str | None:
    """The proxy that HTTPS_PROXY (HTTP_PROXY for http://) names for `host`, unless NO_PROXY
    exempts it; as client-go's ProxyFromEnvironment."""
    url = urlsplit(host)
    if not url.hostname or urllib.request.proxy_bypass(url.hostname):
        return None
    return urllib.request.getproxies().get(url.scheme or "https")


async def reply_body(request: Awaitable[Any]) -> bytes:
    """The body of the reply to a request sent with `_preload_content=False`, never decoded into
    the client's model objects, which costs more CPU than the request (a created pod's reply:
    about 0.6 ms). A status of 300 or more raises ApiException (see `errors.translated`)."""
    response: aiohttp.ClientResponse = await request
    try:
        body: bytes = await response.read()  # read to its end, so that the connection is reused
    finally:
        response.release()
    if response.status >= 300:
        error = ApiException(status=response.status, reason=response.reason)
        error.body = body
        raise error
    return body


async def new_api_client(
    kubeconfig: str | None = None,
    max_connections: int = 100,
    *,
    qps: float = 0,
    burst: int = 0,
) -> client.ApiClient:
    """An ApiClient; `kubeconfig` (or $KUBECONFIG) wins over the in-cluster service account.

    With `qps` > 0 every request but a watch is limited to `qps` a second with bursts of `burst`
    (at least 1), and Events, apart, to as many; `qps` <= 0 means no client-side limit, as a
    negative QPS does in client-go."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    configuration = client.Configuration()
    if path:
        await config.load_kube_config(config_file=path, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = max(1, max_connections)
    if configuration.proxy is None:
        configuration.proxy = proxy_from_environment(configuration.host or "")
    if qps <= 0:
        return RateLimitedApiClient(configuration, None)
    return RateLimitedApiClient(
        configuration, TokenBucket(qps, max(1, burst)), TokenBucket(qps, max(1, burst))
    )
