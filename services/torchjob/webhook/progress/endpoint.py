"""The progress endpoint: training processes POST Kubeflow Trainer's report
(`{"trainerStatus": {...}}`) to their job's status URL with a bearer token, and the report goes
into the job's `status.trainerStatus` (lifecycle/progress.py says what a report may hold).

It listens on a port of its own, beside the admission port, so that the network policy that
keeps admissions to the apiserver stays closed to pods, and a flood of reports has its own
bounds. Each request is checked cheapest first, and nothing is read of a body before its sender
has proved it runs in one of the job's pods: method, path, token present, declared size, the
token (auth.py), the job's rate (limit.py), the body, the report, the job not
finished. Accepted reports are written at most once per job per interval (writer.py).
Every refusal is a metav1.Status, as Kubeflow's server answers, so its clients read it."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import orjson
import structlog
from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError
from prometheus_client import Counter

from torchjob.api.constants import FINISHED_JOB_PHASES
from torchjob.api.job_api import JobApi, api_of
from torchjob.api.progress import MAX_BODY_BYTES, JobRef, job_of_path
from torchjob.kube.errors import Conflict
from torchjob.kube.informer import Informer
from torchjob.kube.resources import job_resource
from torchjob.kube.rest import Resources
from torchjob.kube.slim import job_without_status
from torchjob.lifecycle.progress import (
    FIELD,
    Progress,
    ReportError,
    failure_status,
    read_report,
    supersedes,
)
from torchjob.render.job_kinds import kind_of
from torchjob.webhook.certificates.tls import TLS
from torchjob.webhook.keys import API, JOB_CACHES, SETTINGS
from torchjob.webhook.progress.auth import Authenticator, Refused, unauthorized
from torchjob.webhook.progress.limit import JobRateLimit, Tarpit
from torchjob.webhook.progress.target import PROGRESS, ProgressTarget
from torchjob.webhook.progress.writer import CoalescingWriter

log = structlog.get_logger("torchjob.webhook")

REQUESTS = Counter(
    "torchjob_progress_requests", "Progress reports answered, by HTTP status code", ["code"]
)
FAMILIES: Final = frozenset({"torchjob_progress_requests", "torchjob_progress_writes"})

READ_CHUNK: Final = 16 * 1024
# Reads and conditional writes of one report before it waits for the job's next slot.
WRITE_ATTEMPTS: Final = 3
_JSON: Final = {hdrs.CONTENT_TYPE: "application/json"}
# How long a 429 is held before it is sent, and for how many callers at once (limit.py).
TARPIT_SECONDS: Final = 0.25
TARPIT_CAPACITY: Final = 256


@dataclass
class ProgressService:
    """What the endpoint's requests read: the job caches (by API), the token checks, the
    per-job rate limit and the writer."""

    jobs: Callable[[JobApi], Informer | None]
    authenticator: Authenticator
    limit: JobRateLimit
    writer: CoalescingWriter[JobVersion]
    read_timeout: float = 2.0
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    tarpit: Tarpit = field(default_factory=lambda: Tarpit(TARPIT_SECONDS, TARPIT_CAPACITY))


SERVICE = web.AppKey("progress_service", ProgressService)


def progress_app(service: ProgressService) -> web.Application:
    """The endpoint's application: one handler for every path and method, so that every
    answer, 404 and 405 included, is a metav1.Status."""
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[SERVICE] = service
    app.router.add_route("*", "/{tail:.*}", serve_report)
    return app


async def serve_report(request: web.Request) -> web.Response:
    try:
        answer = await _answer(request.app[SERVICE], request)
        response = web.Response(body=orjson.dumps(answer), headers=_JSON)
    except Refused as refusal:
        if refusal.code == 429:
            await request.app[SERVICE].tarpit.hold()
        response = _status_response(refusal)
    except Exception:
        log.exception("progress report failed", path=request.path)
        message = "the report could not be handled; see the webhook's log"
        response = _status_response(Refused(500, "InternalError", message))
    REQUESTS.labels(str(response.status)).inc()
    return response


async def _answer(service: ProgressService, request: web.Request) -> dict[str, Any]:
    if request.method != hdrs.METH_POST:
        raise Refused(405, "MethodNotAllowed", f"{request.method} is not allowed: POST a report")
    job = job_of_path(request.path)
    if job is None or service.jobs(job.api) is None:
        raise Refused(404, "NotFound", f"no job's status is reported at {request.path}"[:200])
    token = bearer_token(request.headers.get(hdrs.AUTHORIZATION))
    length = request.content_length
    if length is not None and length > MAX_BODY_BYTES:
        raise _too_large()
    await service.authenticator.authenticate(token, job, lambda: _job_uid(service, job))
    wait = service.limit.take(job)
    if wait > 0:
        message = f"{job.api.kind} {job.namespace}/{job.name} reports too often; retry"
        raise Refused(429, "TooManyRequests", message, max(1, math.ceil(wait)))
    report = _report(await _read(request, service.read_timeout))
    cached = _cached_job(service, job)
    uid = _uid_of(cached)
    if cached is None or uid is None:
        raise Refused(404, "NotFound", f"{job.api.kind} {job.namespace}/{job.name} not found")
    if finished(cached):
        raise Refused(409, "Conflict", "the job has finished")
    status = report.status(service.now())
    service.writer.submit(JobVersion(job, uid), status, at_once=report.final)
    return {FIELD: status}


def bearer_token(authorization: str | None) -> str:
    """The token of an `Authorization: Bearer <token>` header; else Refused (401)."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token or not token.isascii():
        raise unauthorized("a bearer token is required: Authorization: Bearer <token>")
    return token


def _cached_job(service: ProgressService, job: JobRef) -> dict[str, Any] | None:
    cache = service.jobs(job.api)
    packed = cache.get_json(job.namespace, job.name) if cache is not None else None
    return None if packed is None else dict(orjson.loads(packed))


def _job_uid(service: ProgressService, job: JobRef) -> str | None:
    return _uid_of(_cached_job(service, job))


def _uid_of(job: dict[str, Any] | None) -> str | None:
    uid = (job or {}).get("metadata", {}).get("uid")
    return uid if isinstance(uid, str) else None


async def _read(request: web.Request, seconds: float) -> bytes:
    """The body, at most MAX_BODY_BYTES whatever its framing (chunked too), within `seconds`."""
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(seconds):
            while chunk := await request.content.read(READ_CHUNK):
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise _too_large()
                chunks.append(chunk)
    except TimeoutError:
        raise Refused(408, "Timeout", f"the body did not arrive within {seconds:g}s") from None
    except (OSError, ValueError, web.HTTPException, HttpProcessingError) as error:
        # cut off, badly framed or undecodable
        raise Refused(400, "BadRequest", f"the body could not be read: {error}"[:200]) from None
    return b"".join(chunks)


def _report(raw: bytes) -> Progress:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise Refused(400, "BadRequest", "malformed JSON") from None
    try:
        return read_report(body)
    except ReportError as error:
        raise Refused(422, "Invalid", str(error)) from None


def _too_large() -> Refused:
    return Refused(413, "RequestEntityTooLarge", f"the body is over {MAX_BODY_BYTES} bytes")


def _status_response(refusal: Refused) -> web.Response:
    body = failure_status(refusal.code, refusal.reason, refusal.message)
    headers: dict[str, str] = {hdrs.CONTENT_TYPE: "application/json"}
    if refusal.retry_after is not None:
        headers["Retry-After"] = str(refusal.retry_after)
    return web.Response(status=refusal.code, body=orjson.dumps(body), headers=headers)


def finished(cached: dict[str, Any]) -> bool:
    """A job as the webhook's caches keep it (`job_with_outcome`) has finished."""
    status = cached.get("status")
    return isinstance(status, dict) and status.get("phase") in FINISHED_JOB_PHASES


def job_with_outcome(job: dict[str, Any]) -> dict[str, Any]:
    """What the webhook's job caches keep: the job without its status (the pod route's needs),
    except what its pods are rendered from (a TrainJob's runtime copy) and whether it has
    finished (the progress endpoint's), as `status.phase`: a status that changes only once,
    where a whole one changes with every replica."""
    slim = job_without_status(job)
    kind = kind_of(api_of(job))
    status = kind.rendered_from(job)
    if (ended := kind.outcome(job)) is not None:
        status = {**status, "phase": ended}
    if status:
        slim["status"] = status
    return slim


async def serve_progress(app: web.Application) -> AsyncIterator[None]:
    """The main application's cleanup context: the endpoint on its own port, sharing the
    serving certificate's SSLContext, and the pod rewrite told where it is. Off with
    --no-progress."""
    settings = app[SETTINGS]
    if not settings.progress:
        yield
        return
    api = app[API]
    writer: CoalescingWriter[JobVersion] = CoalescingWriter(
        lambda job, report: write_report(Resources(api), job, report),
        settings.progress_write_seconds,
    )
    service = ProgressService(
        jobs=lambda job_api: app[JOB_CACHES].get(job_api),
        authenticator=Authenticator(api),
        limit=JobRateLimit(settings.progress_rate, settings.progress_burst),
        writer=writer,
        read_timeout=settings.limits.read_timeout_seconds,
    )
    target = app[PROGRESS] = ProgressTarget(settings.progress_base_url, app[TLS])
    if target.current is None:
        log.warning("no CA is known for the serving certificate: pods are not told to report")
    # A reporter posts every few seconds at most; an idle connection is not kept longer.
    runner = web.AppRunner(
        progress_app(service), access_log=None, lingering_time=0, keepalive_timeout=15
    )
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.progress_port, ssl_context=app[TLS].context)
    await site.start()
    writing = asyncio.create_task(writer.run(), name="progress-writer")
    log.info(
        "progress endpoint serving", port=settings.progress_port, url=settings.progress_base_url
    )
    yield
    await runner.cleanup()
    writing.cancel()
    await asyncio.gather(writing, return_exceptions=True)
    try:
        async with asyncio.timeout(5):
            await writer.flush()
    except TimeoutError:
        log.warning("progress reports not written at shutdown", waiting=writer.waiting)


@dataclass(frozen=True, slots=True)
class JobVersion:
    """A job as the report was accepted for it: a job deleted and made again under its name is
    another job, which the report must not reach."""

    job: JobRef
    uid: str


async def write_report(resources: Resources, version: JobVersion, report: dict[str, Any]) -> None:
    """Write `report` unless status shows one received later. Each webhook replica writes its own
    latest report, so a replica's slot can come after another replica wrote a newer one: the
    write is conditional on the job's resourceVersion read with it, and read again on a
    conflict; after WRITE_ATTEMPTS conflicts the report waits for the job's next slot."""
    job = version.job
    kind = job_resource(job.api)
    for _ in range(WRITE_ATTEMPTS):
        current = await resources.get(kind, job.namespace, job.name)
        shown = (current.get("status") or {}).get(FIELD)
        if current["metadata"]["uid"] != version.uid or not supersedes(report, shown):
            return
        body = {
            "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
            "status": {FIELD: report},
        }
        try:
            await resources.patch(kind, job.namespace, job.name, body, subresource="status")
            return
        except Conflict:
            continue  # the job changed since it was read: read it again
    raise Conflict(409, "Conflict", f"{job.path} kept changing while its progress was written")
