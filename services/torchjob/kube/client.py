"""Our client of the Kubernetes API, for the services and the `torchjob` CLI: requests by REST path
on one aiohttp session, whose answers are bytes (or JSON decoded by orjson) and whose failures are
our KubeErrors (kube/errors.py); watches read as a stream of lines; and client-go's client-side
rate limit. Credentials come from a kubeconfig or from the pod's service account
(kube/credentials.py).

kubernetes-asyncio's ApiClient is not used: its generated classes decode replies into model
objects, which costs more CPU than the request, and importing it loads every one of them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import urllib.request
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Mapping,
    Sequence,
)
from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp
import orjson
from multidict import CIMultiDict
from prometheus_client import Counter, Histogram

from torchjob.kube.credentials import Credentials, in_cluster
from torchjob.kube.errors import from_status

JSON: Final = "application/json"
Query = Mapping[str, str]

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

CONNECT_TIMEOUT = 10.0
# The apiserver answers any request but a watch within its own 60 s request timeout.
READ_SECONDS = 60.0

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


# Events go through a bucket of their own, as client-go's event broadcaster sends them through
# a client of its own: reporting a creation does not halve how fast a controller creates.
EVENTS_PATH = "/apis/events.k8s.io/"


class KubeClient:
    """Requests to one apiserver over a pool of at most `max_connections` connections. Every
    request first takes a token from `limiter`, or from `events_limiter` for an Event; a watch
    takes none (it is one long request; client-go does not throttle watches either). A connection
    is given `connect_seconds` to open, and an answer `read_seconds` for each wait for its next
    byte (a watch, and a request `open`s, say their own).

    The session does not read the environment on each request (aiohttp's `trust_env` looks for
    proxy variables and reads ~/.netrc in a worker thread before each one, which cost more CPU
    than the request itself): the proxy for the apiserver is looked up once, here."""

    def __init__(
        self,
        credentials: Credentials,
        *,
        max_connections: int = 100,
        limiter: TokenBucket | None = None,
        events_limiter: TokenBucket | None = None,
        headers: Sequence[tuple[str, str]] = (),
        connect_seconds: float = CONNECT_TIMEOUT,
        read_seconds: float = READ_SECONDS,
    ) -> None:
        self.host = credentials.host
        self.connect_seconds = connect_seconds
        # Sent with every request, a name given more than once sent as many times (the console's
        # Impersonate-User and Impersonate-Group headers).
        self._headers = tuple(headers)
        self.limiter = limiter
        self.events_limiter = events_limiter
        self._token = credentials.token
        self._proxy = credentials.proxy or proxy_from_environment(credentials.host)
        self._server_name = credentials.server_name
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=max(1, max_connections), ssl=credentials.tls),
            trust_env=False,
            # A connection the apiserver's end of which is gone (its node died) is given up after
            # a minute without a byte, not after the kernel's retransmissions (about 15 min); a
            # watch sets its own limits.
            timeout=aiohttp.ClientTimeout(sock_connect=connect_seconds, sock_read=read_seconds),
            # A watch event holds a whole object: etcd allows up to 1.5 MiB.
            read_bufsize=2**21,
        )

    async def close(self) -> None:
        await self.session.close()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def limiter_for(self, path: str) -> TokenBucket | None:
        """The bucket a request (not a watch) to `path` takes its token from."""
        return self.events_limiter if EVENTS_PATH in path else self.limiter

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        content_type: str = JSON,
        time_limits: aiohttp.ClientTimeout | None = None,
    ) -> bytes:
        """The body of the answer; a status of 300 or more raises one of our KubeErrors. `body`
        is sent as JSON (a dict, or a list for a JSON patch)."""
        limiter = self.limiter_for(path)
        if limiter is not None:
            started = time.perf_counter()
            await limiter.acquire()
            RATE_LIMITER_WAIT.observe(time.perf_counter() - started)
        response = await self._send(method, path, query, body, content_type, time_limits)
        try:
            data = await response.read()  # read to its end, so that the connection is reused
        finally:
            response.release()
        if response.status >= 300:
            raise from_status(response.status, response.reason, data)
        return data

    async def request_json(self, method: str, path: str, **options: Any) -> Any:
        """`request`'s answer, decoded."""
        return orjson.loads(await self.request(method, path, **options))

    async def watch(
        self, path: str, query: Query, *, read_seconds: float
    ) -> AsyncGenerator[bytes, None]:
        """The lines of a watch of `path` (one JSON event each), however large; a read that waits
        longer than `read_seconds` for the next byte fails. Close it (contextlib.aclosing) to end
        the watch before the apiserver does."""
        limits = aiohttp.ClientTimeout(sock_connect=self.connect_seconds, sock_read=read_seconds)
        response = await self._send("GET", path, {**query, "watch": "true"}, None, JSON, limits)
        try:
            if response.status >= 300:
                raise from_status(response.status, response.reason, await response.read())
            async for line in lines_of(response.content.iter_any()):
                yield line
        finally:
            response.close()

    @contextlib.asynccontextmanager
    async def open(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        read_seconds: float | None = READ_SECONDS,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """The answer to a request whose body is not JSON or not read at once (a pod's log, a
        service proxy's page), whatever its status, its body left to the caller to stream. Like
        a watch it takes no token: it is one long request. `read_seconds` None waits for the
        next byte as long as it takes (a followed log may be silent for hours)."""
        limits = aiohttp.ClientTimeout(sock_connect=self.connect_seconds, sock_read=read_seconds)
        sent = self._headers_with(headers or {})
        response = await self._request(method, path, query, data, sent, limits)
        try:
            yield response
        finally:
            response.close()

    async def _send(
        self,
        method: str,
        path: str,
        query: Query | None,
        body: Any,
        content_type: str,
        time_limits: aiohttp.ClientTimeout | None,
    ) -> aiohttp.ClientResponse:
        headers = self._headers_with({"Accept": JSON})
        data = None
        if body is not None:
            data = orjson.dumps(body)
            headers["Content-Type"] = content_type
        return await self._request(
            method, path, query, data, headers, time_limits or self.session.timeout
        )

    def _headers_with(self, extra: Mapping[str, str]) -> CIMultiDict[str]:
        """The headers of every request (the client's own and its Authorization), and `extra`."""
        headers = CIMultiDict(self._headers)
        headers.update(extra)
        authorization = self._token.authorization()
        if authorization:
            headers["Authorization"] = authorization
        return headers

    async def _request(
        self,
        method: str,
        path: str,
        query: Query | None,
        data: bytes | None,
        headers: CIMultiDict[str],
        time_limits: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        REQUESTS.labels(method).inc()
        return await self.session.request(
            method,
            self.host + path,
            params=query,
            data=data,
            headers=headers,
            proxy=self._proxy,
            server_hostname=self._server_name,
            timeout=time_limits,
        )


async def lines_of(chunks: AsyncIterable[bytes]) -> AsyncGenerator[bytes, None]:
    """The non-blank lines of a stream of chunks. A line that spans many chunks (an event of a
    large object arrives in many TLS records) is joined once, when its end arrives, not copied
    again with every chunk. A last line without its newline is dropped: the apiserver ends every
    event with one, so it is an event cut off."""
    started: list[bytes] = []  # the chunks of the line under way
    async for chunk in chunks:
        if b"\n" not in chunk:
            started.append(chunk)
            continue
        first, *whole, rest = chunk.split(b"\n")
        for line in (b"".join([*started, first]), *whole):
            if line.strip():
                yield line
        started = [rest] if rest else []


def proxy_from_environment(host: str) -> str | None:
    """The proxy that HTTPS_PROXY (HTTP_PROXY for http://) names for `host`, unless NO_PROXY
    exempts it; as client-go's ProxyFromEnvironment."""
    url = urlsplit(host)
    if not url.hostname or urllib.request.proxy_bypass(url.hostname):
        return None
    return urllib.request.getproxies().get(url.scheme or "https")


async def new_kube_client(
    kubeconfig_path: str | None = None,
    max_connections: int = 100,
    *,
    qps: float = 0,
    burst: int = 0,
) -> KubeClient:
    """A client; a kubeconfig (`kubeconfig_path`, or $KUBECONFIG) wins over the in-cluster
    service account.

    With `qps` > 0 every request but a watch is limited to `qps` a second with bursts of `burst`
    (at least 1), and Events, apart, to as many; `qps` <= 0 means no client-side limit, as a
    negative QPS does in client-go."""
    path = kubeconfig_path or os.environ.get("KUBECONFIG")
    if path:
        # Imported only for a kubeconfig, with the YAML parser it reads it with: a pod reads
        # none (about 3 MB of resident memory).
        from torchjob.kube import kubeconfig

        credentials = await kubeconfig.load(path)
    else:
        credentials = in_cluster()
    if qps <= 0:
        return KubeClient(credentials, max_connections=max_connections)
    return KubeClient(
        credentials,
        max_connections=max_connections,
        limiter=TokenBucket(qps, max(1, burst)),
        events_limiter=TokenBucket(qps, max(1, burst)),
    )
