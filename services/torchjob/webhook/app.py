"""The admission webhook: aiohttp over TLS. Routes are thin: decode, call the pure handler, encode.

The certificate comes from a Secret the webhook keeps itself (or from files, for cert-manager) and
is reloaded into the live SSLContext, so a rotation needs no restart and drops no connection.

What a request may cost is bounded before any of it is read (`Admissions`): a body larger than
anything the apiserver sends is refused from its Content-Length (413); bodies in flight are
bounded in bytes (429 with Retry-After beyond it, which client-go, and so the apiserver, retries
within the webhook's timeout); the body must arrive within a read timeout (408) and the answer
within a handler timeout. Small bodies, which is every ordinary admission, are parsed and answered
on the event loop in a few milliseconds; larger ones in one worker thread, so that no body holds
the loop, and the probes are answered by threads of their own from the loop's heartbeat.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextvars
import datetime
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import orjson
import structlog
from aiohttp import hdrs, web
from prometheus_client import REGISTRY, Gauge

from torchjob.api import types
from torchjob.api.admission import Request, Response, handle, mutate_job, refuse, validate_job
from torchjob.api.job_api import KUBEFLOW_JOB, TRAINING_JOB, JobApi
from torchjob.api.kubeflow_admission import mutate_pytorchjob, validate_pytorchjob_request
from torchjob.kube import resources
from torchjob.kube.client import KubeClient, new_kube_client
from torchjob.kube.errors import NotFound
from torchjob.kube.informer import Informer
from torchjob.kube.rest import Resources
from torchjob.kube.slim import job_without_status
from torchjob.render.pod_admission_handler import (
    decode_job,
    job_api_of_pod,
    job_name_of,
    mutate_pod,
)
from torchjob.render.pod_rewrite import PreparedJob
from torchjob.runtime import logging as runtime_logging
from torchjob.runtime import metrics as runtime_metrics
from torchjob.runtime.probes import Heartbeat, serve_threaded_probes
from torchjob.webhook import admission_metrics
from torchjob.webhook.admission_metrics import AdmissionTally
from torchjob.webhook.certbundle import CertBundle
from torchjob.webhook.certstore import (
    FileCertificateSource,
    SecretCertificateStore,
    patch_ca_bundle,
    webhook_configuration_owner,
)
from torchjob.webhook.settings import Limits, MiB, Settings

log = structlog.get_logger("torchjob.webhook")

ADMISSIONS = AdmissionTally()
REGISTRY.register(ADMISSIONS)
INFLIGHT = Gauge(
    "torchjob_admission_inflight_bytes", "Bytes of admission bodies being read or answered"
)

# What the webhook's /metrics exports: its own families, not the controllers' it imports.
FAMILIES = runtime_metrics.Families(
    {
        admission_metrics.REQUESTS,
        admission_metrics.DURATION,
        "torchjob_admission_inflight_bytes",
    }
    | runtime_metrics.KUBE_CLIENT
    | runtime_metrics.INFORMER
)

SETTINGS = web.AppKey("settings", Settings)
API = web.AppKey("api", KubeClient)
JOBS = web.AppKey("jobs", Informer)
# Kubeflow's PyTorchJobs, cached when the webhook serves them (--kubeflow).
KUBEFLOW_JOBS = web.AppKey("kubeflow_jobs", Informer)


class ServingCertificate:
    """The SSLContext the server presents, and the certificate files it was loaded from."""

    def __init__(self) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._dir = Path(tempfile.mkdtemp(prefix="torchjob-webhook-tls-"))
        self.expires_at: float = 0.0
        self.loaded_pems = b""  # the certificate and key PEMs presented now, one after the other

    def load(self, cert_pem: bytes, key_pem: bytes, expires: datetime.datetime) -> bool:
        """Present this certificate, which expires at `expires`, on every new handshake; False
        when it is already loaded."""
        if cert_pem + key_pem == self.loaded_pems:
            return False
        cert, key = self._dir / "tls.crt", self._dir / "tls.key"
        key.touch(mode=0o600)
        key.write_bytes(key_pem)
        cert.write_bytes(cert_pem)
        self.context.load_cert_chain(cert, key)
        self.loaded_pems = cert_pem + key_pem
        self.expires_at = expires.timestamp()
        return True

    def problem(self) -> str | None:
        if not self.loaded_pems:
            return "no serving certificate yet"
        if self.expires_at <= time.time():
            return "the serving certificate has expired"
        return None

    def close(self) -> None:
        for path in self._dir.iterdir():
            path.unlink()
        self._dir.rmdir()


TLS = web.AppKey("tls", ServingCertificate)


class DecodedJobs:
    """The typed model of each cached job, decoded and prepared for rendering once per stored
    version (its uid and resourceVersion) rather than once per replica pod, and the job itself
    parsed once per version of the cache's JSON. The replicas of a job are admitted one after
    another, so the models most recently used are the ones kept. A Kubeflow PyTorchJob's model
    is the PyTorchTrainingJob that runs it. What is kept is shared by the admissions that read
    it: they only read it."""

    def __init__(self, capacity: int = 256, parsed_capacity: int = 16) -> None:
        self._capacity = capacity
        # A parsed job is several times the size of its model: only the jobs whose pods are
        # being admitted now are kept parsed.
        self._parsed_capacity = parsed_capacity
        self._decoded: collections.OrderedDict[tuple[str, str], PreparedJob] = (
            collections.OrderedDict()
        )
        # By namespace and name: the cache's JSON of the job (held, so that its identity stands
        # for its version) and the job parsed from it.
        self._parsed: collections.OrderedDict[tuple[str, str], tuple[bytes, dict[str, Any]]] = (
            collections.OrderedDict()
        )
        # The stored job decoded last, by identity: the replicas of a job come one after another,
        # each with the job parsed once (`parsed`), and then need no lookup by version.
        self._last: tuple[dict[str, Any], PreparedJob] | None = None

    def decode(self, job: dict[str, Any]) -> PreparedJob:
        last = self._last
        if last is not None and last[0] is job:
            return last[1]
        metadata = job.get("metadata")
        uid, resource_version = (
            (metadata.get("uid"), metadata.get("resourceVersion"))
            if isinstance(metadata, dict)
            else (None, None)
        )
        if not (isinstance(uid, str) and isinstance(resource_version, str)):
            return decode_job(job)  # not a stored object: nothing names this version
        prepared = _remembered(
            self._decoded, (uid, resource_version), lambda: decode_job(job), self._capacity
        )
        self._last = (job, prepared)
        return prepared

    def parsed(self, namespace: str, name: str, packed: bytes) -> dict[str, Any]:
        """The job whose JSON a cache holds under `namespace`/`name` as `packed`."""
        key = (namespace, name)
        kept = self._parsed.get(key)
        if kept is None or kept[0] is not packed:
            kept = (packed, orjson.loads(packed))
        _remember(self._parsed, key, kept, self._parsed_capacity)
        return kept[1]

    def __len__(self) -> int:
        return len(self._decoded)


K = TypeVar("K")
V = TypeVar("V")


def _remembered(
    kept: collections.OrderedDict[K, V], key: K, make: Callable[[], V], capacity: int
) -> V:
    value = kept.get(key)
    if value is None:
        value = make()
    _remember(kept, key, value, capacity)
    return value


def _remember(kept: collections.OrderedDict[K, V], key: K, value: V, capacity: int) -> None:
    """Keep `value` as the most recently used, and at most `capacity` values in all."""
    kept[key] = value
    kept.move_to_end(key)
    if len(kept) > capacity:
        kept.popitem(last=False)


DECODED_JOBS = web.AppKey("decoded_jobs", DecodedJobs)
# The module's logger is a lazy proxy that resolves itself on every call (five times the cost of a
# filtered-out debug line); admissions log through one resolved once logging is configured.
ADMISSION_LOG = web.AppKey("admission_log", structlog.typing.FilteringBoundLogger)


Answer = Callable[[web.Application, Any], Awaitable[dict[str, Any]]]
# An answer worked out without waiting for anything, or None when it has to wait (a job not
# cached yet): the `Answer` of the same route then answers.
AtOnce = Callable[[web.Application, Any], dict[str, Any] | None]
# A body read whole, and what it parses to.
Parsed = tuple[bytes, Any]
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
        if not self.has_room(cost):
            return False
        self.inflight += cost
        return True

    def has_room(self, cost: int) -> bool:
        room = self.limits.max_inflight_bytes
        if cost <= INLINE_BYTES:
            room += SMALL_RESERVE_BYTES
        return self.inflight + cost <= room

    def give(self, cost: int) -> None:
        self.inflight -= cost

    def close(self) -> None:
        self.worker.shutdown(wait=False, cancel_futures=True)


ADMISSIONS_BOUND = web.AppKey("admissions", Admissions)
# For an application built without init_app (tests of a single route): the default limits.
_DEFAULT_ADMISSIONS = Admissions(Limits())


class Work:
    """One request's share of the bound: its cost, its deadline, and the worker's task for it.

    The handler timeout is a timer armed (`arm`) before the first wait that can last: a body
    still arriving, the wait for the large-body lock (and then the worker thread), a job looked
    up from the apiserver. Until then the request runs without yielding to the loop, where no timer
    could stop it anyway; an ordinary admission, whose body has arrived and whose answer is
    worked out on the loop, never needs one."""

    def __init__(self, admissions: Admissions, cost: int, size: int, timeout: float) -> None:
        self.admissions = admissions
        self.cost = cost
        self.size = size  # of the body, once read; the cost until then
        self.deadline = time.monotonic() + timeout
        self.uid: str | None = None
        self._pending: concurrent.futures.Future[Any] | None = None
        self._timer: _Deadline | None = None

    @property
    def inline(self) -> bool:
        """Whether the body is small enough to be parsed and answered on the loop."""
        return self.size <= INLINE_BYTES

    def arm(self) -> None:
        """Start the handler timeout's timer, for what is left of the time, before a wait."""
        if self._timer is None:
            self._timer = _Deadline(max(0.0, self.deadline - time.monotonic()))

    def expired_with(self, error: BaseException | None) -> bool:
        """Stop the timer, once the request is over; whether the request ended in the
        cancellation the timer made."""
        return self._timer is not None and self._timer.expired_with(error)

    async def compute(self, work: Callable[[], T]) -> T:
        """`work()`, on the loop for a small body, else in the worker thread (with the caller's
        context, so that log lines keep the request's identity). A task the worker reaches after
        the deadline is dropped without running."""
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


class _Deadline:
    """The handler timeout: what `asyncio.timeout` does to the request's task, for a third of its
    CPU (which every admission pays, on uvloop about 12 µs against 4): one timer that cancels the
    task when it fires, and that cancellation, and only it, taken as the timeout."""

    __slots__ = ("_cancelling", "_expired", "_task", "_timer")

    def __init__(self, seconds: float) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._cancelling = task.cancelling()
        self._expired = False
        self._timer = asyncio.get_running_loop().call_later(seconds, self._expire)

    def _expire(self) -> None:
        self._expired = True
        self._task.cancel()

    def expired_with(self, error: BaseException | None) -> bool:
        """Stop the timer, once the request is over; whether it ended in the cancellation the
        timer made (asyncio.timeout's rule: ours, unless the task was cancelled again since)."""
        self._timer.cancel()
        if not self._expired:
            return False
        uncancelled = self._task.uncancel()
        return isinstance(error, asyncio.CancelledError) and uncancelled <= self._cancelling


_WORK: contextvars.ContextVar[Work | None] = contextvars.ContextVar("work", default=None)


async def _compute(work: Callable[[], T]) -> T:
    current = _WORK.get()
    if current is None or current.inline:
        return work()
    return await current.compute(work)


def _route(
    endpoint: str,
    answer: Answer,
    *,
    arms_own_waits: bool = False,
    at_once: AtOnce | None = None,
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """The aiohttp handler: bound, read, answer, count, encode. Whatever the answer raises becomes
    a refusal with a message, not a 500 page. No middleware: this is the only route kind there
    is, and a middleware would cost every admission a further call chain.

    The handler timeout covers the whole request when the answer may wait on anything; an
    answer that `arms_own_waits` arms it (`Work.arm`) before each wait of its own, and the
    request that never waits runs without a timer.

    A route with an `at_once` answer answers an ordinary admission (a small body, all of it
    arrived) in one go, without a task switch or a share of the bound taken and given back: it
    never yields to the loop, so no other request sees its share; it still needs the room for it.
    When `at_once` cannot answer without waiting, the request goes on as any other, its body
    already read."""

    async def serve(http: web.Request) -> web.Response:
        started = time.perf_counter()
        admissions = http.app.get(ADMISSIONS_BOUND) or _DEFAULT_ADMISSIONS
        limits = admissions.limits
        length = http.content_length
        if length is not None and length > limits.max_body_bytes:
            return _turned_away(endpoint, "too_large", 413, _too_large(limits))
        parsed: Parsed | None = None
        if (
            at_once is not None
            and length is not None
            and length <= INLINE_BYTES
            and http.content.is_eof()
            and admissions.has_room(length)
        ):
            raw = http.content.read_nowait()
            parsed = (raw, _loads(raw))
            response = _answered_at_once(endpoint, at_once, http, parsed[1], started)
            if response is not None:
                return response
        # A body without Content-Length (chunked) may be as large as any.
        cost = length if length is not None else limits.max_body_bytes
        if not admissions.take(cost):
            return _turned_away(
                endpoint, "throttled", 429, "too many admissions at once; retry", retry_after=1
            )
        work = Work(admissions, cost, cost, limits.handler_timeout_seconds)
        if not arms_own_waits:
            work.arm()
        bound = _WORK.set(work)
        try:
            try:
                response = await _serve(endpoint, answer, http, work, started, parsed)
            except BaseException as error:
                if work.expired_with(error):
                    return _timed_out(http.app, endpoint, work, started)
                raise
            work.expired_with(None)
            return response
        finally:
            _WORK.reset(bound)
            work.release()

    return serve


def _answered_at_once(
    endpoint: str, at_once: AtOnce, http: web.Request, body: Any, started: float
) -> web.Response | None:
    """The answer to a small body read whole, when `at_once` can work it out without waiting."""
    request = _request_fields(body)
    bound = runtime_logging.bind_request(request, LOGGED_REQUEST_FIELDS)
    try:
        try:
            review = at_once(http.app, body)
        except Exception:
            review = _failed(http, request)
        if review is None:
            return None
        return _answer(http.app[ADMISSION_LOG], endpoint, review, started)
    finally:
        runtime_logging.unbind_request(bound)


async def _serve(
    endpoint: str,
    answer: Answer,
    http: web.Request,
    work: Work,
    started: float,
    parsed: Parsed | None = None,
) -> web.Response:
    if parsed is not None:  # read, and found to need a wait, by the at-once answer
        raw, body = parsed
        work.size = len(raw)
        return await _answer_parsed(endpoint, answer, http, work, body, started)
    limits = work.admissions.limits
    try:
        if http.content.is_eof():
            # The whole body has arrived (an ordinary admission, in one read): reading it cannot
            # wait, so it needs no timer.
            raw = await http.read()
        else:
            work.arm()
            async with asyncio.timeout(limits.read_timeout_seconds):
                raw = await http.read()
    except TimeoutError:
        message = f"the body did not arrive within {limits.read_timeout_seconds:g}s"
        return _turned_away(endpoint, "read_timeout", 408, message)
    except web.HTTPRequestEntityTooLarge:
        return _turned_away(endpoint, "too_large", 413, _too_large(limits))
    except Exception as error:  # the client went away, or sent a body aiohttp cannot decode
        return _turned_away(endpoint, "unreadable", 400, f"the body could not be read: {error}")
    work.size = len(raw)
    if work.inline:
        return await _parse_and_answer(endpoint, answer, http, work, raw, started)
    if raw.count(b"{") + raw.count(b"[") > work.size // MIN_BYTES_PER_CONTAINER:
        message = "the body holds more objects and arrays for its size than Kubernetes objects do"
        return _turned_away(endpoint, "too_dense", 400, message)
    work.arm()
    async with work.admissions.one_large:
        return await _parse_and_answer(endpoint, answer, http, work, raw, started)


async def _parse_and_answer(
    endpoint: str, answer: Answer, http: web.Request, work: Work, raw: bytes, started: float
) -> web.Response:
    body = _loads(raw) if work.inline else await work.compute(partial(_loads, raw))
    return await _answer_parsed(endpoint, answer, http, work, body, started)


async def _answer_parsed(
    endpoint: str, answer: Answer, http: web.Request, work: Work, body: Any, started: float
) -> web.Response:
    request = _request_fields(body)
    uid = request.get("uid")
    work.uid = uid if isinstance(uid, str) else ""
    # The request's identity on every log line written while it is handled.
    bound = runtime_logging.bind_request(request, LOGGED_REQUEST_FIELDS)
    try:
        review = await _answer_or_refuse(answer, http, body, request)
        return _answer(http.app[ADMISSION_LOG], endpoint, review, started)
    finally:
        runtime_logging.unbind_request(bound)


def _too_large(limits: Limits) -> str:
    return f"the body is larger than {limits.max_body_bytes} bytes, more than the apiserver sends"


def _turned_away(
    endpoint: str, outcome: str, status: int, message: str, retry_after: int | None = None
) -> web.Response:
    """A plain HTTP refusal, for a request turned away before its uid was read: the apiserver
    applies the webhook's failurePolicy (Fail), or retries a 429 that says when. The connection
    is closed rather than drained of what is left of the body."""
    ADMISSIONS.count(endpoint, outcome)
    # Debug, not info: a flood would flood the log too. The counter's outcome label tells.
    log.debug("admission turned away", endpoint=endpoint, status=status, reason=message)
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    response = web.Response(status=status, text=message, headers=headers)
    response.force_close()
    return response


def _timed_out(app: web.Application, endpoint: str, work: Work, started: float) -> web.Response:
    """Out of time: a refusal the apiserver shows as ours when the uid is known, else a 504."""
    message = (
        f"the webhook could not answer within {work.admissions.limits.handler_timeout_seconds:g}s"
    )
    if not work.uid:
        return _turned_away(endpoint, "timeout", 504, message)
    review = refuse(work.uid, message, 504, "Timeout").review()
    return _answer(app[ADMISSION_LOG], endpoint, review, started, outcome="timeout")


async def _answer_or_refuse(
    answer: Answer, http: web.Request, body: Any, request: dict[str, Any]
) -> dict[str, Any]:
    # The apiserver discards an answer whose uid is not the request's.
    uid = request.get("uid")
    uid = uid if isinstance(uid, str) else ""
    try:
        return await answer(http.app, body)
    except TooLate:
        message = "the webhook ran out of time before answering"
        return refuse(uid, message, 504, "Timeout").review()
    except Busy as busy:
        return refuse(uid, str(busy), 429, "TooManyRequests").review()
    except Exception:
        return _failed(http, request)


def _failed(http: web.Request, request: dict[str, Any]) -> dict[str, Any]:
    """The refusal of a request whose answer raised, logged with the error."""
    log.exception("admission handler failed", path=http.path)
    uid = request.get("uid")
    return refuse(
        uid if isinstance(uid, str) else "",
        "the webhook failed to process the request; see its log",
        500,
        "InternalError",
    ).review()


def _pure(handler: Callable[[Request], Response]) -> tuple[Answer, AtOnce]:
    """A pure handler's answer, and the same answer at once (it never waits)."""

    async def answer(_: web.Application, body: Any) -> dict[str, Any]:
        return await _compute(partial(handle, body, handler))

    def at_once(_: web.Application, body: Any) -> dict[str, Any]:
        return handle(body, handler)

    return answer, at_once


async def _mutate_pod(app: web.Application, body: Any) -> dict[str, Any]:
    job = await _job_of(app, body)
    return await _compute(partial(_rewrite_pod, app, body, job))


def _mutate_pod_at_once(app: web.Application, body: Any) -> dict[str, Any] | None:
    """The pod's rewrite when its job is cached (or it claims none); None when it must be read
    from the apiserver first."""
    claimed = _claimed_job(body)
    if claimed is None:
        return _rewrite_pod(app, body, None)
    namespace, name, pod = claimed
    job = _cached_job(app, job_api_of_pod(pod), namespace, name)
    return None if job is None else _rewrite_pod(app, body, job)


def _rewrite_pod(app: web.Application, body: Any, job: dict[str, Any] | None) -> dict[str, Any]:
    creators = app[SETTINGS].pod_creators
    decode = app[DECODED_JOBS].decode
    return handle(body, lambda request: mutate_pod(request, job, creators, decode))


def _loads(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:  # not JSON, or nested deeper than orjson goes (1024)
        return None  # answered by the handler as a malformed review


def _request_fields(body: Any) -> dict[str, Any]:
    """The AdmissionReview's request object, or nothing when the body has none."""
    request = body.get("request") if isinstance(body, dict) else None
    return request if isinstance(request, dict) else {}


LOGGED_REQUEST_FIELDS = ("uid", "namespace", "name", "operation")


# The answer's headers, copied into each response: cheaper than `content_type=`, same bytes.
_JSON: Mapping[str, str] = {hdrs.CONTENT_TYPE: "application/json"}


def _answer(
    logger: structlog.typing.FilteringBoundLogger,
    endpoint: str,
    review: dict[str, Any],
    started: float,
    outcome: str | None = None,
) -> web.Response:
    response = review["response"]
    if outcome is None:
        outcome = "allowed" if response["allowed"] else "denied"
        if response.get("patch"):
            outcome = "patched"
    elapsed = time.perf_counter() - started
    ADMISSIONS.answered(endpoint, outcome, elapsed)
    if response["allowed"]:
        logger.debug("admitted", endpoint=endpoint, outcome=outcome, seconds=elapsed)
    else:
        logger.info("admission denied", endpoint=endpoint, message=response["status"]["message"])
    try:
        encoded = orjson.dumps(review)
    except orjson.JSONEncodeError:  # e.g. a warning echoing input nested deeper than orjson writes
        log.exception("admission answer could not be encoded")
        uid = response.get("uid", "")
        encoded = orjson.dumps(
            refuse(uid, "the webhook could not encode its answer", 500, "InternalError").review()
        )
    return web.Response(body=encoded, headers=_JSON)


def _claimed_job(body: Any) -> tuple[str, str, Any] | None:
    """The namespace and name of the job a pod under admission claims by its label, and the pod;
    None when it claims none."""
    request = body.get("request") if isinstance(body, dict) else None
    namespace = request.get("namespace") if isinstance(request, dict) else None
    pod = request.get("object") if isinstance(request, dict) else None
    name = job_name_of(pod)
    if not isinstance(namespace, str) or name is None:
        return None
    return namespace, name, pod


def _cached_job(
    app: web.Application, api: JobApi, namespace: str, name: str
) -> dict[str, Any] | None:
    """The job of `api` named so, from the cache of its kind (None when not cached)."""
    cache = _cache_of(app, api)
    cached = cache.get_json(namespace, name) if cache is not None else None
    return None if cached is None else app[DECODED_JOBS].parsed(namespace, name, cached)


async def _job_of(app: web.Application, body: Any) -> dict[str, Any] | None:
    """The job a pod under admission claims (a PyTorchTrainingJob, or a Kubeflow PyTorchJob when
    the pod's controller is one), from the cache of its kind, else read from the apiserver (None
    when absent)."""
    claimed = _claimed_job(body)
    if claimed is None:
        return None
    namespace, name, pod = claimed
    api = job_api_of_pod(pod)
    cached = _cached_job(app, api, namespace, name)
    if cached is not None:
        return cached
    # Not cached yet (created a moment ago): ask the apiserver.
    admissions = app.get(ADMISSIONS_BOUND) or _DEFAULT_ADMISSIONS
    if admissions.lookups >= MAX_JOB_LOOKUPS:
        raise Busy(f"too many pods of jobs the webhook has not cached yet; retry ({name})")
    admissions.lookups += 1
    work = _WORK.get()
    if work is not None:
        work.arm()
    try:
        job = await Resources(app[API]).get(resources.job_resource(api), namespace, name)
    except NotFound:
        return None
    finally:
        admissions.lookups -= 1
    return job if isinstance(job, dict) else None


def _cache_of(app: web.Application, api: JobApi) -> Informer | None:
    """The cache of jobs of `api`: PyTorchJobs are cached only when the webhook serves them."""
    if api is TRAINING_JOB:
        return app[JOBS]
    return app.get(KUBEFLOW_JOBS)


async def _resolve_logger(app: web.Application) -> None:
    app[ADMISSION_LOG] = log.bind()


async def _api_client(app: web.Application) -> AsyncIterator[None]:
    app[API] = await new_kube_client(app[SETTINGS].kubeconfig)
    yield
    await app[API].close()


async def _job_cache(app: web.Application) -> AsyncIterator[None]:
    """Jobs from a watch, so a pod admission reads its job from memory instead of a GET."""
    app[JOBS] = Informer(app[API], resources.JOBS, transform=job_without_status)
    tasks = [asyncio.create_task(app[JOBS].run(), name="job-informer")]
    if app[SETTINGS].kubeflow:
        app[KUBEFLOW_JOBS] = Informer(
            app[API], resources.KUBEFLOW_JOBS, transform=job_without_status
        )
        tasks.append(asyncio.create_task(app[KUBEFLOW_JOBS].run(), name="kubeflow-job-informer"))
    yield
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _keep_certificate(app: web.Application) -> AsyncIterator[None]:
    """Load the certificate before serving, then re-check it periodically in the background."""
    settings, tls = app[SETTINGS], app[TLS]
    refresh = (
        _file_refresher(settings, tls)
        if settings.certificates_from_files
        else _secret_refresher(app)
    )
    await refresh()
    task = asyncio.create_task(
        _periodically(refresh, settings.rotate_check_seconds), name="certificate-refresh"
    )
    yield
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    tls.close()


async def _periodically(refresh: Callable[[], Any], every: float) -> None:
    while True:
        await asyncio.sleep(every)
        try:
            await refresh()
        except Exception:
            log.exception("certificate refresh failed; serving the current one")


def _secret_refresher(app: web.Application) -> Callable[[], Any]:
    settings, tls = app[SETTINGS], app[TLS]
    store = SecretCertificateStore(
        app[API],
        settings.namespace,
        settings.secret_name,
        settings.dns_names,
        list(settings.ip_addresses),
        owner=(
            webhook_configuration_owner(app[API], settings.validating_config)
            if settings.validating_config
            else None
        ),
    )

    async def refresh() -> None:
        bundle: CertBundle = await store.ensure()
        expires = store.not_after
        # Trust first, then present: clients must accept a new CA before they meet it.
        await patch_ca_bundle(
            app[API], bundle.ca_bundle_pem, settings.mutating_config, settings.validating_config
        )
        if tls.load(bundle.cert_pem, bundle.key_pem, expires):
            log.info("serving certificate loaded", expires_at=expires.isoformat())

    return refresh


def _file_refresher(settings: Settings, tls: ServingCertificate) -> Callable[[], Any]:
    source = FileCertificateSource(settings.cert_file or "", settings.key_file or "")

    async def refresh() -> None:
        cert, key, expires = await source.load()
        if tls.load(cert, key, expires):
            log.info("serving certificate loaded from files", cert_file=settings.cert_file)

    return refresh


async def _admission_worker(app: web.Application) -> AsyncIterator[None]:
    yield
    app[ADMISSIONS_BOUND].close()


def init_app(settings: Settings) -> web.Application:
    limits = settings.limits
    app = web.Application(client_max_size=limits.max_body_bytes)
    app[SETTINGS] = settings
    app[TLS] = ServingCertificate()
    app[DECODED_JOBS] = DecodedJobs()
    admissions = app[ADMISSIONS_BOUND] = Admissions(limits)
    # Read when /metrics is scraped, rather than set on every admission.
    INFLIGHT.set_function(lambda: admissions.inflight)
    app.on_startup.append(_resolve_logger)
    # The probes first: they report a stalled loop from the start, and stop last.
    heartbeat = Heartbeat(stall_after=limits.loop_stall_seconds)
    app.cleanup_ctx.append(
        serve_threaded_probes(
            settings.host, settings.probe_port, app[TLS].problem, heartbeat, FAMILIES.exposition
        )
    )
    app.cleanup_ctx.append(_admission_worker)
    app.cleanup_ctx.append(_api_client)
    app.cleanup_ctx.append(_job_cache)
    app.cleanup_ctx.append(_keep_certificate)
    add_admission_routes(app)
    return app


def add_admission_routes(app: web.Application) -> None:
    """The admission routes, bounded by `app[ADMISSIONS_BOUND]`. The pod route reads
    `app[SETTINGS]`, `app[DECODED_JOBS]`, `app[JOBS]` and `app[KUBEFLOW_JOBS]` when there is
    one, and `app[API]` for a job not cached. Kubeflow's PyTorchJobs have routes of their own,
    which the webhook configurations name only when Kubeflow's API is served."""
    # Each of these answers arms the handler timeout before it waits (the worker thread, a job
    # looked up from the apiserver).
    routes = {
        f"/mutate/{types.PLURAL}": ("mutate-jobs", _pure(mutate_job)),
        f"/validate/{types.PLURAL}": ("validate-jobs", _pure(validate_job)),
        f"/mutate/{KUBEFLOW_JOB.plural}": ("mutate-kubeflow-jobs", _pure(mutate_pytorchjob)),
        f"/validate/{KUBEFLOW_JOB.plural}": (
            "validate-kubeflow-jobs",
            _pure(validate_pytorchjob_request),
        ),
        "/mutate/pods": ("mutate-pods", (_mutate_pod, _mutate_pod_at_once)),
    }
    for path, (endpoint, (answer, at_once)) in routes.items():
        app.router.add_post(path, _route(endpoint, answer, arms_own_waits=True, at_once=at_once))
