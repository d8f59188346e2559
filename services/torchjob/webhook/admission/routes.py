"""The admission routes. Each is thin: decode, call the pure handler, encode; the pod route looks
its job up first. All of them take one request path (`Route.serve`).

What a request may cost is bounded before any of it is read (`bounds.Admissions`): a body larger
than anything the apiserver sends is refused from its Content-Length (413); bodies in flight are
bounded in bytes (429 with Retry-After beyond it, which client-go, and so the apiserver, retries
within the webhook's timeout); the body must arrive within a read timeout (408) and the answer
within a handler timeout. Small bodies, which is every ordinary admission, are parsed and answered
on the event loop in a few milliseconds; larger ones in one worker thread, so that no body holds
the loop, and the probes are answered by threads of their own from the loop's heartbeat.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

import orjson
import structlog
from aiohttp import hdrs, web
from prometheus_client import REGISTRY

from torchjob.api.admission import Request, Response, handle, refuse
from torchjob.api.trainer import RUNTIME_PLURALS
from torchjob.api.trainer_admission import validate_runtime_request
from torchjob.render.job_kinds import KINDS
from torchjob.render.pod_admission_handler import mutate_pod
from torchjob.runtime import logging as runtime_logging
from torchjob.webhook.admission.bounds import (
    INLINE_BYTES,
    MIN_BYTES_PER_CONTAINER,
    Busy,
    OutOfTime,
    TooLate,
    Work,
)
from torchjob.webhook.admission.keys import ADMISSION_LOG, ADMISSIONS_BOUND, DECODED_JOBS
from torchjob.webhook.admission.metrics import AdmissionTally
from torchjob.webhook.admission.pod_job import job_of_pod
from torchjob.webhook.admission.runtime_of_job import runtime_of_job
from torchjob.webhook.keys import SETTINGS
from torchjob.webhook.progress.target import NO_PROGRESS, PROGRESS
from torchjob.webhook.settings import Limits

log = structlog.get_logger("torchjob.webhook")

ADMISSIONS = AdmissionTally()
REGISTRY.register(ADMISSIONS)

LOGGED_REQUEST_FIELDS = ("uid", "namespace", "name", "operation")
# The answer's headers, copied into each response: cheaper than `content_type=`, same bytes.
_JSON: Mapping[str, str] = {hdrs.CONTENT_TYPE: "application/json"}

# A route's answer to a parsed AdmissionReview, given what its look-up found (None for a route
# without one). It never waits: it runs on the loop for a small body, in the worker thread for a
# large one.
Answer = Callable[[web.Application, Any, Any], dict[str, Any]]
# What a route looks up before it answers (the pod route: the job its pod claims). A look-up
# that waits does so within the handler timeout (`Work.handler_timeout`).
LookUp = Callable[[web.Application, Any, Work], Awaitable[Any]]


@dataclasses.dataclass(frozen=True, slots=True)
class Route:
    """One admission route: its endpoint (the label of its metrics), its answer, and for the pod
    route what it looks up first. `serve` is the aiohttp handler. Whatever the look-up or the
    answer raises becomes a refusal with a message, not a 500 page. No middleware: this is the
    only route kind there is, and a middleware would cost every admission a further call chain."""

    endpoint: str
    answer: Answer
    look_up: LookUp | None = None

    async def serve(self, http: web.Request) -> web.Response:
        """Bound, read, answer, count, encode; each wait within the handler timeout."""
        started = time.perf_counter()
        admissions = http.app[ADMISSIONS_BOUND]
        limits = admissions.limits
        length = http.content_length
        if length is not None and length > limits.max_body_bytes:
            return _turned_away(self.endpoint, "too_large", 413, _too_large(limits))
        # A body without Content-Length (chunked) may be as large as any.
        cost = length if length is not None else limits.max_body_bytes
        if not admissions.take(cost):
            message = "too many admissions at once; retry"
            return _turned_away(self.endpoint, "throttled", 429, message, retry_after=1)
        work = Work(admissions, cost, limits.handler_timeout_seconds)
        try:
            content = http.content
            if length is not None and length <= INLINE_BYTES and content.is_eof():
                # An ordinary admission, arrived whole in one read: answered without a wait.
                raw = content.read_nowait()
                work.size = len(raw)
                return await self._respond(http, work, _loads(raw), started)
            return await self._read_and_answer(http, work, started)
        except OutOfTime:
            return _timed_out(http.app, self.endpoint, work, started)
        finally:
            work.release()

    async def _read_and_answer(self, http: web.Request, work: Work, started: float) -> web.Response:
        raw = await self._read(http, work)
        if isinstance(raw, web.Response):
            return raw
        work.size = len(raw)
        if work.inline:
            return await self._respond(http, work, _loads(raw), started)
        if raw.count(b"{") + raw.count(b"[") > work.size // MIN_BYTES_PER_CONTAINER:
            message = (
                "the body holds more objects and arrays for its size than Kubernetes objects do"
            )
            return _turned_away(self.endpoint, "too_dense", 400, message)
        one_large = work.admissions.one_large
        async with work.handler_timeout():
            await one_large.acquire()
        try:
            async with work.handler_timeout():
                body = await work.compute(partial(_loads, raw))
            return await self._respond(http, work, body, started)
        finally:
            one_large.release()

    async def _read(self, http: web.Request, work: Work) -> bytes | web.Response:
        """The body, or the refusal of one that could not be read whole in time."""
        limits = work.admissions.limits
        try:
            if http.content.is_eof():
                # The whole body has arrived: reading it cannot wait, so it needs no timer.
                return await http.read()
            async with asyncio.timeout(limits.read_timeout_seconds), work.handler_timeout():
                return await http.read()
        except OutOfTime:
            raise
        except TimeoutError:
            message = f"the body did not arrive within {limits.read_timeout_seconds:g}s"
            return _turned_away(self.endpoint, "read_timeout", 408, message)
        except web.HTTPRequestEntityTooLarge:
            return _turned_away(self.endpoint, "too_large", 413, _too_large(limits))
        except Exception as error:  # the client went away, or sent a body aiohttp cannot decode
            message = f"the body could not be read: {error}"
            return _turned_away(self.endpoint, "unreadable", 400, message)

    async def _respond(
        self, http: web.Request, work: Work, body: Any, started: float
    ) -> web.Response:
        """The answer to the parsed body, or a refusal saying why there is none, encoded."""
        request = _request_fields(body)
        uid = request.get("uid")
        # The apiserver discards an answer whose uid is not the request's.
        work.uid = uid = uid if isinstance(uid, str) else ""
        # The request's identity on every log line written while it is handled.
        bound = runtime_logging.bind_request(request, LOGGED_REQUEST_FIELDS)
        try:
            try:
                review = await self._review(http.app, work, body)
            except OutOfTime:
                raise
            except Exception as error:
                review = _refusal(http, uid, error)
            return _encoded(http.app[ADMISSION_LOG], self.endpoint, review, started)
        finally:
            runtime_logging.unbind_request(bound)

    async def _review(self, app: web.Application, work: Work, body: Any) -> dict[str, Any]:
        found = None if self.look_up is None else await self.look_up(app, body, work)
        if work.inline:
            return self.answer(app, body, found)
        async with work.handler_timeout():
            return await work.compute(partial(self.answer, app, body, found))


def admission_routes() -> dict[str, Route]:
    """The admission routes by path: each job kind's own (`JobKind.admission`; an opt-in kind's
    are named by the webhook configurations only when its API is served), and the pods'."""
    routes: dict[str, Route] = {}
    for api, kind in KINDS.items():
        admission = kind.admission
        mutate = Route(f"mutate-{admission.endpoint}", _pure(admission.mutate))
        validate = Route(f"validate-{admission.endpoint}", _pure(admission.validate))
        if admission.validate_with_template is not None:
            answer = _with_template(admission.validate_with_template)
            validate = Route(f"validate-{admission.endpoint}", answer, look_up=runtime_of_job)
        routes.update({f"/mutate/{api.plural}": mutate, f"/validate/{api.plural}": validate})
    for plural in RUNTIME_PLURALS.values():
        routes[f"/validate/{plural}"] = Route(f"validate-{plural}", _pure(validate_runtime_request))
    routes["/mutate/pods"] = Route("mutate-pods", _rewrite_pod, look_up=job_of_pod)
    return routes


def add_admission_routes(app: web.Application) -> None:
    """The admission routes, bounded by `app[ADMISSIONS_BOUND]` and logging through
    `app[ADMISSION_LOG]`. The pod route reads `app[SETTINGS]`, `app[DECODED_JOBS]`,
    `app[JOB_CACHES]`, and `app[API]` for a job not cached."""
    for path, route in admission_routes().items():
        app.router.add_post(path, route.serve)


def _pure(handler: Callable[[Request], Response]) -> Answer:
    """A pure handler's answer: it needs nothing looked up."""

    def answer(_: web.Application, body: Any, __: None) -> dict[str, Any]:
        return handle(body, handler)

    return answer


def _with_template(
    handler: Callable[[Request, Mapping[str, Any] | None], Response],
) -> Answer:
    """The answer of a handler given the template its look-up found (None: none)."""

    def answer(_: web.Application, body: Any, template: Any) -> dict[str, Any]:
        return handle(body, lambda request: handler(request, template))

    return answer


def _rewrite_pod(app: web.Application, body: Any, job: dict[str, Any] | None) -> dict[str, Any]:
    """The pod's rewrite for the job it claims (None when it claims none, or that job is gone)."""
    creators, in_place = app[SETTINGS].pod_creators, app[SETTINGS].restart_in_place
    decode, progress = app[DECODED_JOBS].decode, app.get(PROGRESS, NO_PROGRESS).current
    return handle(
        body, lambda request: mutate_pod(request, job, creators, decode, progress, in_place)
    )


def _loads(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:  # not JSON, or nested deeper than orjson goes (1024)
        return None  # answered by the handler as a malformed review


def _request_fields(body: Any) -> dict[str, Any]:
    """The AdmissionReview's request object, or nothing when the body has none."""
    request = body.get("request") if isinstance(body, dict) else None
    return request if isinstance(request, dict) else {}


def _refusal(http: web.Request, uid: str, error: Exception) -> dict[str, Any]:
    """The review that refuses a request whose look-up or answer raised `error`."""
    if isinstance(error, TooLate):
        message = "the webhook ran out of time before answering"
        return refuse(uid, message, 504, "Timeout").review()
    if isinstance(error, Busy):
        return refuse(uid, str(error), 429, "TooManyRequests").review()
    log.exception("admission handler failed", path=http.path)
    message = "the webhook failed to process the request; see its log"
    return refuse(uid, message, 500, "InternalError").review()


def _encoded(
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
    return _encoded(app[ADMISSION_LOG], endpoint, review, started, outcome="timeout")
