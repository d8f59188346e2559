"""The admission webhook: aiohttp over TLS. Routes are thin: decode, call the pure handler, encode.

The certificate comes from a Secret the webhook keeps itself (or from files, for cert-manager) and
is reloaded into the live SSLContext, so a rotation needs no restart and drops no connection.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import orjson
import structlog
from aiohttp import web
from kubernetes_asyncio import client
from prometheus_client import Counter, Histogram

from torchjob.api import types
from torchjob.api.admission import Request, Response, handle, mutate_job, refuse, validate_job
from torchjob.kube import resources
from torchjob.kube.client import new_api_client
from torchjob.kube.errors import NotFound, translated
from torchjob.kube.informer import Informer
from torchjob.render.pod_admission_handler import job_name_of, mutate_pod
from torchjob.runtime.probes import serve_probes
from torchjob.webhook.certificates import CertBundle, not_after
from torchjob.webhook.certstore import (
    FileCertificateSource,
    SecretCertificateStore,
    patch_ca_bundle,
    webhook_configuration_owner,
)
from torchjob.webhook.settings import Settings

log = structlog.get_logger("torchjob.webhook")

ADMISSIONS = Counter(
    "torchjob_admission_requests_total", "Admission requests answered", ["endpoint", "outcome"]
)
LATENCY = Histogram(
    "torchjob_admission_duration_seconds",
    "Time to answer an admission request",
    ["endpoint", "outcome"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
)

SETTINGS = web.AppKey("settings", Settings)
API = web.AppKey("api", client.ApiClient)
JOBS = web.AppKey("jobs", Informer)


class ServingCertificate:
    """The SSLContext the server presents, and the certificate files it was loaded from."""

    def __init__(self) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._dir = Path(tempfile.mkdtemp(prefix="torchjob-webhook-tls-"))
        self.expires_at: float = 0.0
        self.loaded_pems = b""  # the certificate and key PEMs presented now, one after the other

    def load(self, cert_pem: bytes, key_pem: bytes) -> bool:
        """Present this certificate on every new handshake; False when it is already loaded."""
        if cert_pem + key_pem == self.loaded_pems:
            return False
        cert, key = self._dir / "tls.crt", self._dir / "tls.key"
        key.touch(mode=0o600)
        key.write_bytes(key_pem)
        cert.write_bytes(cert_pem)
        self.context.load_cert_chain(cert, key)
        self.loaded_pems = cert_pem + key_pem
        self.expires_at = not_after(cert_pem).timestamp()
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
    """The typed model of each cached job, decoded once per stored version rather than once per
    replica pod. Keyed by the cached object itself: the informer replaces it on every change."""

    def __init__(self, capacity: int = 1024) -> None:
        self._capacity = capacity
        self._decoded: dict[int, tuple[dict[str, Any], types.PyTorchTrainingJob]] = {}

    def decode(self, job: dict[str, Any]) -> types.PyTorchTrainingJob:
        entry = self._decoded.get(id(job))
        if entry is not None and entry[0] is job:
            return entry[1]
        decoded = types.PyTorchTrainingJob.from_dict(job)
        if len(self._decoded) >= self._capacity:
            self._decoded.clear()  # simplest bound; refilling costs one decode per job
        self._decoded[id(job)] = (job, decoded)
        return decoded

    def __len__(self) -> int:
        return len(self._decoded)


DECODED_JOBS = web.AppKey("decoded_jobs", DecodedJobs)
# The module's logger is a lazy proxy that resolves itself on every call (five times the cost of a
# filtered-out debug line); admissions log through one resolved once logging is configured.
ADMISSION_LOG = web.AppKey("admission_log", structlog.typing.FilteringBoundLogger)


Answer = Callable[[web.Application, Any], Awaitable[dict[str, Any]]]


def _route(endpoint: str, answer: Answer) -> Callable[[web.Request], Awaitable[web.Response]]:
    """The aiohttp handler: read, answer, count, encode. Whatever the answer raises becomes a
    refusal with a message, not a 500 page. No middleware: this is the only route kind there is,
    and a middleware would cost every admission a further call chain."""

    async def serve(http: web.Request) -> web.Response:
        started = time.perf_counter()
        body = await _read_body(http)
        request = _request_fields(body)
        tokens = _bind_request(request)
        try:
            review = await _answer_or_refuse(answer, http, body, request)
            return _answer(http.app[ADMISSION_LOG], endpoint, review, started)
        finally:
            structlog.contextvars.reset_contextvars(**tokens)

    return serve


async def _answer_or_refuse(
    answer: Answer, http: web.Request, body: Any, request: dict[str, Any]
) -> dict[str, Any]:
    try:
        return await answer(http.app, body)
    except Exception:
        log.exception("admission handler failed", path=http.path)
        # The apiserver discards an answer whose uid is not the request's.
        uid = request.get("uid")
        return refuse(
            uid if isinstance(uid, str) else "",
            "the webhook failed to process the request; see its log",
            500,
            "InternalError",
        ).review()


def _pure(handler: Callable[[Request], Response]) -> Answer:
    async def answer(_: web.Application, body: Any) -> dict[str, Any]:
        return handle(body, handler)

    return answer


async def _mutate_pod(app: web.Application, body: Any) -> dict[str, Any]:
    creators = app[SETTINGS].pod_creators
    decode = app[DECODED_JOBS].decode
    job = await _job_of(app, body)
    return handle(body, lambda request: mutate_pod(request, job, creators, decode))


async def _read_body(http: web.Request) -> Any:
    try:
        return orjson.loads(await http.read())
    except orjson.JSONDecodeError:
        return None  # answered by the handler as a malformed review


def _request_fields(body: Any) -> dict[str, Any]:
    """The AdmissionReview's request object, or nothing when the body has none."""
    request = body.get("request") if isinstance(body, dict) else None
    return request if isinstance(request, dict) else {}


def _bind_request(fields: dict[str, Any]) -> Mapping[str, contextvars.Token[Any]]:
    """Bind the request's identity to every log line written while it is handled. Bound and
    reset by token: structlog's `bound_contextvars` manager costs several times as much, on
    every admission."""
    return structlog.contextvars.bind_contextvars(
        uid=fields.get("uid"),
        namespace=fields.get("namespace"),
        name=fields.get("name"),
        operation=fields.get("operation"),
    )


@functools.cache
def _metrics_of(endpoint: str, outcome: str) -> tuple[Counter, Histogram]:
    """The labelled counter and histogram, looked up once per label pair (labels() takes a lock
    and builds a key on every call)."""
    return ADMISSIONS.labels(endpoint, outcome), LATENCY.labels(endpoint, outcome)


def _answer(
    logger: structlog.typing.FilteringBoundLogger,
    endpoint: str,
    review: dict[str, Any],
    started: float,
) -> web.Response:
    response = review["response"]
    outcome = "allowed" if response["allowed"] else "denied"
    if response.get("patch"):
        outcome = "patched"
    elapsed = time.perf_counter() - started
    count, latency = _metrics_of(endpoint, outcome)
    count.inc()
    latency.observe(elapsed)
    if response["allowed"]:
        logger.debug("admitted", endpoint=endpoint, outcome=outcome, seconds=elapsed)
    else:
        logger.info("admission denied", endpoint=endpoint, message=response["status"]["message"])
    return web.Response(body=orjson.dumps(review), content_type="application/json")


async def _job_of(app: web.Application, body: Any) -> dict[str, Any] | None:
    """The job a pod under admission claims, read from the apiserver (None when absent)."""
    request = body.get("request") if isinstance(body, dict) else None
    namespace = request.get("namespace") if isinstance(request, dict) else None
    name = job_name_of(request.get("object")) if isinstance(request, dict) else None
    if not isinstance(namespace, str) or name is None:
        return None
    cached = app[JOBS].get(namespace, name)
    if cached is not None:
        return cached
    # Not cached yet (created a moment ago): ask the apiserver.
    objects = client.CustomObjectsApi(app[API])
    try:
        async with translated():
            job = await objects.get_namespaced_custom_object(
                types.GROUP, types.VERSION, namespace, types.PLURAL, name
            )
    except NotFound:
        return None
    return job if isinstance(job, dict) else None


async def _resolve_logger(app: web.Application) -> None:
    app[ADMISSION_LOG] = log.bind()


async def _api_client(app: web.Application) -> AsyncIterator[None]:
    app[API] = await new_api_client(app[SETTINGS].kubeconfig)
    yield
    await app[API].close()


async def _job_cache(app: web.Application) -> AsyncIterator[None]:
    """Jobs from a watch, so a pod admission reads its job from memory instead of a GET."""
    app[JOBS] = Informer(app[API], resources.JOBS)
    task = asyncio.create_task(app[JOBS].run(), name="job-informer")
    yield
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


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
        # Trust first, then present: clients must accept a new CA before they meet it.
        await patch_ca_bundle(
            app[API], bundle.ca_bundle_pem, settings.mutating_config, settings.validating_config
        )
        if tls.load(bundle.cert_pem, bundle.key_pem):
            log.info(
                "serving certificate loaded",
                expires_at=bundle and not_after(bundle.cert_pem).isoformat(),
            )

    return refresh


def _file_refresher(settings: Settings, tls: ServingCertificate) -> Callable[[], Any]:
    source = FileCertificateSource(settings.cert_file or "", settings.key_file or "")

    async def refresh() -> None:
        cert, key = source.load()
        if tls.load(cert, key):
            log.info("serving certificate loaded from files", cert_file=settings.cert_file)

    return refresh


def init_app(settings: Settings) -> web.Application:
    app = web.Application(client_max_size=8 * 1024 * 1024)
    app[SETTINGS] = settings
    app[TLS] = ServingCertificate()
    app[DECODED_JOBS] = DecodedJobs()
    app.on_startup.append(_resolve_logger)
    app.cleanup_ctx.append(_api_client)
    app.cleanup_ctx.append(_job_cache)
    app.cleanup_ctx.append(_keep_certificate)
    app.cleanup_ctx.append(serve_probes(settings.host, settings.probe_port, app[TLS].problem))
    routes = {
        f"/mutate/{types.PLURAL}": _route("mutate-jobs", _pure(mutate_job)),
        f"/validate/{types.PLURAL}": _route("validate-jobs", _pure(validate_job)),
        "/mutate/pods": _route("mutate-pods", _mutate_pod),
    }
    for path, serve in routes.items():
        app.router.add_post(path, serve)
    return app
